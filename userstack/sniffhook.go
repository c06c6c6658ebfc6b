package userstack

import "github.com/claude-sandbox/claude-sandbox/userstack/inspect"

// The first-bytes parsers are package userstack/sniff, the decision on
// them package userstack/inspect (peek.go, peekwatch.go use it).

// peekMax bounds the bytes a flow to a name buffers before its dial
// (inspect.Max).
const peekMax = inspect.Max
