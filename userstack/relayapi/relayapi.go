// Package relayapi is the contract between the egress stack's relay
// (package userstack: the TUN, the event loop, TCP, UDP, ICMP, the memory
// budget) and the parts plugged into it from outside: the names side of
// the domain allowlist (package userstack/names implements it, the
// embedder builds it) and the first-bytes inspection the names side hands
// out per flow (package userstack/inspect's state machines).
//
// It holds only types: the relay imports it, and neither names nor
// inspect, so the relay knows nothing of names, DNS or TLS; names and
// inspect import it, and not the relay, so they hold no pointer to the
// stack. What the names side needs of the stack comes in [Deps] (given
// when the stack attaches it); what the relay needs of a flow's first
// bytes is a [Peek] and, once a flow is let through unchecked, a [Watch].
package relayapi

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Verdict is what a look at a flow's first bytes decided.
type Verdict uint8

const (
	// NeedMore: nothing decided; wait for more bytes (or the timer).
	NeedMore Verdict = iota
	// Allow: the flow goes on; its held bytes may be written to the host.
	Allow
	// Refuse: the flow is reset and the Decision's Rule recorded.
	Refuse
)

func (v Verdict) String() string {
	switch v {
	case NeedMore:
		return "need more"
	case Allow:
		return "allow"
	case Refuse:
		return "refuse"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Decision is a verdict, with the reason recorded for a refusal.
type Decision struct {
	Verdict Verdict
	Rule    string // Refuse only
}

// Peek decides a TCP flow to a name from the first bytes its client
// sends, before the host is written any of them. The relay calls Data
// after each segment (or the client's FIN), unless Early says the bytes
// held cannot decide yet, and Timeout when its timer fires. Not safe for
// concurrent use (the relay calls it under the flow's lock).
type Peek interface {
	// Name is the flow's name.
	Name() string
	// Early reports that n bytes held (fin: the client ended its
	// stream) are too few to change the decision: no need to look.
	Early(n int, fin bool) bool
	// Data decides on the bytes held so far (not kept).
	Data(held []byte, fin bool) Decision
	// Timeout decides when the wait ran out, waited after the handshake;
	// watch: the flow is let through before its first message was seen,
	// and what it sends next must be watched ([Watch]). NeedMore: wait
	// another timeout.
	Timeout(held []byte, waited time.Duration) (d Decision, watch bool)
}

// Watch checks a flow let through before its first message was seen:
// each new segment, with the stream's first bytes, before it is relayed.
type Watch interface {
	// Name is the flow's name.
	Name() string
	// Room is how many of take new bytes are kept to be looked at (the
	// rest of a segment is relayed unchecked once the bound is reached).
	Room(take int) int
	// Segment checks the next bytes (parts, in order) with those before.
	Segment(parts ...[]byte) Decision
	// Took keeps, of the bytes Segment saw last, the took the relay
	// took: dropped is how many it lets go, done that watching ends.
	Took(took int) (dropped int, done bool)
}

// Deps is what the names side takes from the stack it is attached to.
type Deps struct {
	// Ctx ends when the stack closes.
	Ctx context.Context
	// Now is the clock (cache expiry); Logf logs.
	Now  func() time.Time
	Logf func(string, ...any)
	// Spawn runs fn on a worker the stack bounds and waits for at Close;
	// false: the stack is closing, fn was not started.
	Spawn func(fn func()) bool
	// Upstream is the host's resolver (zero: none), dialed on the host
	// side through Dialer (nil: net.Dialer).
	Upstream netip.AddrPort
	Dialer   interface {
		DialContext(ctx context.Context, network, address string) (net.Conn, error)
	}
	// Block records a refused query or connection (name "" for none).
	Block func(proto netpolicy.Proto, dst netip.AddrPort, name, rule string)
	// NoteDNS tells the allowed-flow hook of an answered query.
	NoteDNS func(proto netpolicy.Proto, to netip.AddrPort, name string, t dnsmessage.Type, rule string)
	// WriteUDP sends a datagram to the sandbox (an answer over UDP), its
	// payload buf[Headroom:][:n], from src to dst.
	WriteUDP func(buf []byte, n int, src, dst netip.AddrPort) error
	Headroom int
	// Ask: the ask mode is on (a name off the allowlist gets an address).
	Ask bool
}
