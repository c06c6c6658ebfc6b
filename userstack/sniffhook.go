package userstack

// The first-bytes parsers the deferred dial uses (package
// userstack/sniff), behind names of this package's own.

type sniffResult uint8

const (
	sniffNeedMore sniffResult = iota
	sniffFound
	sniffNotThis
	sniffMalformed
)

// peekMax bounds the bytes a flow to a name buffers before its dial.
const peekMax = 64 << 10

// placeholder until userstack/sniff lands
var (
	sniffTLS  = func(b []byte) (string, sniffResult) { return "", sniffNotThis }
	sniffHTTP = func(b []byte) (string, sniffResult) { return "", sniffNotThis }
)
