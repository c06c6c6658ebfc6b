// Package inspect decides a TCP flow to an allowed name from the first
// bytes its client sends, before any of them reaches the host: the
// first-bytes check of the egress stack's domain allowlist, as a pure
// state machine. It holds no socket, no clock and no stack: the stack
// feeds it the bytes it holds and the time waited, and does what the
// [Decision] says.
//
// The verdict ([Check]) on a stream's first bytes for a flow to name:
//   - a TLS ClientHello: its SNI must be name (case does not matter, ASCII
//     only); another name ("sni mismatch": domain fronting, or a name
//     the allowlist never resolved) or none ("no sni") is refused;
//   - an HTTP/1.x request: its Host must be name, the same way ("http
//     host mismatch");
//   - cleartext HTTP/2 with prior knowledge: refused (its :authority is in
//     HPACK-coded frames that are not read);
//   - neither (raw TCP: SSH, a database, a custom protocol): allowed; the
//     name was already allowed on this port;
//   - a malformed first message, one larger than [Max] bytes, or one the
//     client ends its stream in the middle of: refused;
//   - a stream ended without a byte: allowed (nothing to check);
//   - otherwise: [NeedMore].
//
// [Peek] is the wait before the host is written anything: the stack calls
// Data after each segment (or the client's FIN) and Timeout when its
// timer fires. A client silent at the timeout (a server that speaks first:
// SSH, SMTP), or one that sent a few bytes that are no ClientHello
// ("PING", the start of a request line), is allowed and watched: [Watch]
// goes on collecting the stream's first bytes while they are relayed and
// checks each segment with them before it is written, so waiting out the
// timeout and then naming another host is refused at the segment that
// completes the message. The start of a ClientHello that stops short is
// waited for up to the caller's bound, then refused.
//
// Each look parses all that is held; a message sent a byte a segment
// would cost the square of its length, so both look again only once the
// bytes reach [ClientHelloLeast]'s bound.
package inspect

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/claude-sandbox/claude-sandbox/userstack/relayapi"
	"github.com/claude-sandbox/claude-sandbox/userstack/sniff"
)

// Max bounds the first bytes held for a flow: a whole ClientHello,
// whatever its size (post-quantum key shares take it past a kilobyte;
// the sniffer reads at most MaxClientHello), or an HTTP request's header.
const Max = max(sniff.MaxClientHello, sniff.MaxHTTPHeader)

// H2Preface opens an HTTP/2 connection with prior knowledge (RFC 9113
// section 3.4).
const H2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// The verdict types are package relayapi's (the relay acts on them
// without importing this package).
type (
	// Verdict is what a look at the first bytes decided.
	Verdict = relayapi.Verdict
	// Decision is a verdict, with the reason recorded for a refusal.
	Decision = relayapi.Decision
)

// The verdicts.
const (
	NeedMore = relayapi.NeedMore
	Allow    = relayapi.Allow
	Refuse   = relayapi.Refuse
)

func refuse(rule string) Decision { return Decision{Verdict: Refuse, Rule: rule} }

// Check is the verdict on a flow to name (lower case, no trailing dot)
// whose client sent b first; fin: the client ended its stream after b.
func Check(b []byte, name string, fin bool) Decision {
	if len(b) == 0 && fin {
		return Decision{Verdict: Allow} // closed without a byte: nothing to check
	}
	got, res := sniff.ClientHello(b)
	kind := "TLS"
	if res == sniff.NotThis {
		got, res = sniff.HTTPHost(b)
		kind = "HTTP"
	}
	if res == sniff.NotThis {
		kind = "HTTP/2"
		switch n := min(len(b), len(H2Preface)); {
		case !bytes.Equal(b[:n], []byte(H2Preface[:n])):
		case n == len(H2Preface):
			return refuse("cleartext HTTP/2 (its :authority is not checked: use TLS, or --allow-ip for the address)")
		default:
			res = sniff.NeedMore
		}
	}
	switch res {
	case sniff.NeedMore:
		switch {
		case len(b) >= Max:
			return refuse(kind + " first message larger than the stack checks")
		case fin:
			return refuse("incomplete " + kind + " first message before the end of the stream")
		}
		return Decision{}
	case sniff.Malformed:
		return refuse("malformed " + kind + " first message")
	case sniff.Found:
		switch {
		case got == "":
			return refuse("no sni")
		case Canon(got) == name && isASCII(got):
			// ASCII only: strings.ToLower folds the Kelvin sign (U+212A)
			// to "k", and a name with it is another name to a server.
		case kind == "HTTP":
			return refuse("http host mismatch: " + Canon(got))
		case !isASCII(got):
			return refuse("sni mismatch: " + strconv.QuoteToASCII(got))
		default:
			return refuse("sni mismatch: " + Canon(got))
		}
	}
	return Decision{Verdict: Allow}
}

// Canon is a name in the form the allowlist keeps and decides it in:
// lower case, no trailing dot. The stack's name table uses it too.
func Canon(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// Peek is the first-bytes state of a flow to a name whose host is
// written nothing yet. Its zero value is not usable: use NewPeek.
type Peek struct {
	name    string
	waitMax time.Duration
	decided Decision
	// recheckAt: the bytes held before which looking at them again can
	// tell nothing new (a ClientHello's announced length not reached).
	recheckAt int
}

// NewPeek starts the wait for the first bytes of a flow to name; waitMax
// bounds the wait for the rest of a ClientHello that has begun.
func NewPeek(name string, waitMax time.Duration) Peek { return Peek{name: name, waitMax: waitMax} }

// Name is the flow's name.
func (p *Peek) Name() string { return p.name }

// Done reports whether the flow is decided (allowed or refused).
func (p *Peek) Done() bool { return p.decided.Verdict != NeedMore }

func (p *Peek) decide(d Decision) Decision {
	if d.Verdict != NeedMore {
		p.decided = d
	}
	return d
}

// Early reports whether a look at n bytes held (fin: and the end of the
// stream) can tell nothing new: Data would answer NeedMore. A caller that
// must copy the bytes to look at them asks first.
func (p *Peek) Early(n int, fin bool) bool {
	return !p.Done() && !fin && (n == 0 || n < p.recheckAt)
}

// Data looks at held, all the client sent so far (at most Max bytes), fin
// whether it ended its stream after them. Once decided, the decision
// stands.
func (p *Peek) Data(held []byte, fin bool) Decision {
	switch {
	case p.Done():
		return p.decided
	case p.Early(len(held), fin):
		return Decision{}
	}
	d := Check(held, p.name, fin)
	if d.Verdict == NeedMore {
		p.recheckAt = min(ClientHelloLeast(held), Max)
	}
	return p.decide(d)
}

// Timeout is the decision when the caller's timer fires, waited after the
// client's handshake completed, with held all it sent so far: allowed
// and to be watched (watch true: see Watch) when it sent nothing or
// nothing that may still become a ClientHello; refused when a ClientHello
// begun is still incomplete once waited reaches NewPeek's waitMax; else
// NeedMore (arm the timer again).
func (p *Peek) Timeout(held []byte, waited time.Duration) (d Decision, watch bool) {
	if p.Done() {
		return p.decided, false
	}
	if len(held) == 0 {
		// The client waits for the server to speak first.
		return p.decide(Decision{Verdict: Allow}), true
	}
	if _, res := sniff.ClientHello(held); res != sniff.NeedMore {
		// The start of what may be an HTTP request line (any token is a
		// method), and then silence: a short message of another
		// protocol ("x", "PING") waiting for its answer. Relayed as
		// neither: a client pausing in its request line gains nothing
		// it could not have with bytes that are no HTTP at all: the
		// rest of its first message is still checked (Watch).
		return p.decide(Decision{Verdict: Allow}), true
	}
	// A ClientHello begun and not finished: TLS clients send it whole.
	if waited >= p.waitMax {
		return p.decide(refuse("incomplete TLS ClientHello")), false
	}
	return Decision{}, false
}

// Watch is the first bytes of a flow allowed before they were decided
// (Peek.Timeout's watch), while they are relayed. Its zero value is not
// usable: use NewWatch.
type Watch struct {
	name string
	buf  []byte // the client's first bytes so far
	// The segment being taken: its bytes are at the end of buf until the
	// caller says how many it took (Took); ends: they decided.
	pending int
	ends    bool
	// recheckAt: the length of buf before which checking it again can
	// tell nothing new; 0 after bytes that set it were not taken, since
	// the client may send others.
	recheckAt int
}

// NewWatch starts watching a flow to name whose client sent first (held
// by the caller until now: the Watch keeps the slice).
func NewWatch(name string, first []byte) *Watch { return &Watch{name: name, buf: first} }

// Name is the flow's name.
func (w *Watch) Name() string { return w.name }

// Len is the bytes held.
func (w *Watch) Len() int { return len(w.buf) }

// Room is how many of take new bytes the watch holds: the rest of a
// segment, past Max, is relayed unlooked at (a message that long is
// refused or decided by then).
func (w *Watch) Room(take int) int { return max(0, min(take, Max-len(w.buf))) }

// Segment adds parts (at most Room bytes: what the caller will relay of a
// segment) and checks the first bytes with them. Refuse: reset the flow,
// relay nothing of it. Otherwise relay the segment, then call Took.
func (w *Watch) Segment(parts ...[]byte) Decision {
	add := 0
	for _, p := range parts {
		w.buf = append(w.buf, p...)
		add += len(p)
	}
	if len(w.buf) < w.recheckAt {
		// The ClientHello begun cannot end before: no segment up to
		// there completes it.
		w.pending, w.ends = add, false
		return Decision{}
	}
	d := Check(w.buf, w.name, false)
	if d.Verdict == Refuse {
		return d
	}
	w.pending, w.ends = add, d.Verdict != NeedMore
	if d.Verdict == NeedMore {
		w.recheckAt = min(ClientHelloLeast(w.buf), Max)
	}
	return d
}

// Took keeps, of the bytes the last Segment added, the took the caller
// relayed: what it did not (its memory budget spent) the client sends
// again, maybe not the same, and is checked then. dropped: the bytes let
// go; done: watching ends (the bytes that decided were all taken).
func (w *Watch) Took(took int) (dropped int, done bool) {
	if took < w.pending {
		dropped = w.pending - took
		w.buf = w.buf[:len(w.buf)-dropped]
		w.pending = 0
		w.recheckAt = 0 // it may have come from the bytes dropped
		return dropped, false
	}
	w.pending = 0
	return 0, w.ends
}

// ClientHelloLeast is a lower bound on the length of a stream that starts
// with b and holds a whole ClientHello: what is missing of the record
// under way, the rest of the handshake message its header announced, and
// a record header more when the record under way cannot hold that rest;
// 0 when b does not announce the message's length yet (or is no TLS
// handshake). Shorter, the sniffer can only answer NeedMore or Malformed,
// and Malformed it still answers later (a prefix that is malformed stays
// so): nothing is relayed meanwhile. Looking again only once the stream
// reaches the bound makes a ClientHello sent a byte a segment, even in
// records of a byte, cost a number of looks logarithmic in its length.
func ClientHelloLeast(b []byte) int {
	var hs [4]byte
	got, total := 0, -1 // handshake bytes seen; the message's length with its header
	for off := 0; ; {
		if len(b)-off < 5 { // at a record header, whole or not
			if total < 0 || got >= total {
				return 0
			}
			return len(b) + 5 - (len(b) - off) + total - got
		}
		if b[off] != 0x16 {
			return 0
		}
		n := int(b[off+3])<<8 | int(b[off+4])
		off += 5
		m := min(n, len(b)-off)
		if got < len(hs) {
			copy(hs[got:], b[off:off+m])
		}
		got += m
		if total < 0 && got >= len(hs) {
			if hs[0] != 1 {
				return 0
			}
			total = len(hs) + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]))
		}
		if m < n { // the record goes on past b
			if total < 0 || got >= total {
				return 0
			}
			need, rest := total-got, n-m
			if need <= rest {
				return len(b) + need
			}
			return len(b) + rest + 5 + need - rest
		}
		off += n
	}
}

// The relay's view of them (package relayapi).
var (
	_ relayapi.Peek  = (*Peek)(nil)
	_ relayapi.Watch = (*Watch)(nil)
)
