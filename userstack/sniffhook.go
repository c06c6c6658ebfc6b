package userstack

import (
	"github.com/claude-sandbox/claude-sandbox/userstack/inspect"
	"github.com/claude-sandbox/claude-sandbox/userstack/sniff"
)

// The first-bytes parsers (package userstack/sniff) and the decision on
// them (package userstack/inspect), behind names of this package's own.

const (
	sniffNeedMore = sniff.NeedMore
	sniffFound    = sniff.Found
)

// peekMax bounds the bytes a flow to a name buffers before its dial
// (inspect.Max).
const peekMax = inspect.Max

// h2Preface opens an HTTP/2 connection with prior knowledge; it is
// refused on a flow to a name (inspect.Check).
const h2Preface = inspect.H2Preface

var (
	sniffTLS         = sniff.ClientHello
	clientHelloLeast = inspect.ClientHelloLeast
)
