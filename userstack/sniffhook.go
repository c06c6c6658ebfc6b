package userstack

import "github.com/claude-sandbox/claude-sandbox/userstack/sniff"

// The first-bytes parsers the deferred dial uses (package
// userstack/sniff), behind names of this package's own.

type sniffResult = sniff.Result

const (
	sniffNeedMore  = sniff.NeedMore
	sniffFound     = sniff.Found
	sniffNotThis   = sniff.NotThis
	sniffMalformed = sniff.Malformed
)

// peekMax bounds the bytes a flow to a name buffers before its dial: a
// whole ClientHello, whatever its size (post-quantum key shares take it
// past a kilobyte; the sniffer reads at most MaxClientHello), or an HTTP
// request's header.
const peekMax = max(sniff.MaxClientHello, sniff.MaxHTTPHeader)

var (
	sniffTLS  = sniff.ClientHello
	sniffHTTP = sniff.HTTPHost
)
