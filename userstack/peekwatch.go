package userstack

import (
	"bytes"
	"strconv"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Watching a flow dialed before its first message was seen (peek.go).
//
// The peek timeout dials a flow whose client said nothing (a server that
// speaks first) or only a few bytes that may begin an HTTP request line
// ("PING"). Those flows are not left unchecked: the stream's first bytes
// go on being collected, from its first byte, while they are relayed, and
// each new segment is checked with them before it is written to the host.
// A client that waits out the timeout and then sends a ClientHello or an
// HTTP request naming another host (or none) is reset at the segment
// that completes it, so the server never holds a whole ClientHello or a
// whole request header for the wrong name. Watching ends as soon as the
// bytes are decided: not TLS, not HTTP (an SSH or SMTP client's reply,
// "PING\r\n") and it stops costing anything; the right name, and the rest
// is relayed as for any flow.

// flowWatch is a dialed flow's first bytes, while they are not decided
// (tcpFlow.watch).
type flowWatch struct {
	name string
	buf  []byte // the sandbox's first bytes so far
	cost int    // of buf, held of the relay's memory budget
	// The segment being taken: its bytes are at the end of buf until the
	// relay says how many it took (watchTook); ends: they decided.
	pending int
	ends    bool
	// recheckAt: the length of buf before which checking it again can
	// tell nothing new (clientHelloLeast, peek.go); 0 after bytes that
	// set it were not taken, since the sandbox may send others.
	recheckAt int
}

// h2Preface opens an HTTP/2 connection with prior knowledge (RFC 9113
// section 3.4). In cleartext its :authority is in HPACK-coded frames the
// stack does not read, so it is refused on a flow to a name.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// checkFirst decides on a flow to name from its first bytes b: a rule
// to refuse it by, or "" with NeedMore (wait for more) or another result
// (allowed). fin: the sandbox ended its stream after b.
func checkFirst(b []byte, name string, fin bool) (string, sniffResult) {
	got, res := sniffTLS(b)
	kind := "TLS"
	if res == sniffNotThis {
		got, res = sniffHTTP(b)
		kind = "HTTP"
	}
	if res == sniffNotThis {
		kind = "HTTP/2"
		switch n := min(len(b), len(h2Preface)); {
		case !bytes.Equal(b[:n], []byte(h2Preface[:n])):
		case n == len(h2Preface):
			return "cleartext HTTP/2 (its :authority is not checked: use TLS, or --allow-ip for the address)", sniffMalformed
		default:
			res = sniffNeedMore
		}
	}
	switch res {
	case sniffNeedMore:
		switch {
		case len(b) >= peekMax:
			return kind + " first message larger than the stack checks", res
		case fin:
			return "incomplete " + kind + " first message before the end of the stream", res
		}
	case sniffMalformed:
		return "malformed " + kind + " first message", res
	case sniffFound:
		switch {
		case got == "":
			return "no sni", res
		case canonName(got) == name && isASCII(got):
			// ASCII only: strings.ToLower folds the Kelvin sign (U+212A)
			// to "k", and a name with it is another name to a server.
		case kind == "HTTP":
			return "http host mismatch: " + canonName(got), res
		case !isASCII(got):
			return "sni mismatch: " + strconv.QuoteToASCII(got), res
		default:
			return "sni mismatch: " + canonName(got), res
		}
	}
	return "", res
}

// startWatch begins watching a flow the peek timeout dials (called with
// mu; pend holds what the sandbox sent so far).
func (f *tcpFlow) startWatch(name string) {
	f.watch = &flowWatch{name: name, buf: f.pendBytes(), cost: f.st.memTake(f.pendLen)}
}

// watchData checks take bytes of a segment, from skip on, with the
// stream's first bytes before they are relayed. False: the segment is not
// taken (refused, and the flow reset; or no memory to hold it, and it is
// not acknowledged).
func (f *tcpFlow) watchData(data [][]byte, skip, take int) bool {
	w := f.watch
	add := min(take, peekMax-len(w.buf))
	grant := f.st.memTake(add)
	if grant < add {
		f.st.memGive(grant)
		return false // the sandbox sends it again
	}
	w.cost += grant
	var small [4][]byte
	for _, p := range cutSlices(small[:0], data, skip, add) {
		w.buf = append(w.buf, p...)
	}
	if len(w.buf) < w.recheckAt {
		// The ClientHello begun cannot end before: no segment up to
		// there completes it (a check per segment of a byte would
		// cost the square of its length).
		w.pending, w.ends = add, false
		return true
	}
	rule, res := checkFirst(w.buf, w.name, false)
	if rule != "" {
		f.st.blockName(netpolicy.ProtoTCP, f.key.dst, w.name, rule)
		f.endWatch()
		f.st.memGive(f.pendLen)
		f.pend, f.pendLen = nil, 0
		f.sendReset()
		f.flags |= resetHost
		f.state = tcpClosed
		return false
	}
	w.pending, w.ends = add, res != sniffNeedMore
	if res == sniffNeedMore {
		w.recheckAt = min(clientHelloLeast(w.buf), peekMax)
	}
	return true
}

// watchTook keeps, of the segment watchData checked, the bytes the relay
// took: what it did not take (its memory budget spent) the sandbox sends
// again, maybe not the same, and is checked then. Watching ends only when
// the bytes that decided were all taken.
func (f *tcpFlow) watchTook(took int) {
	w := f.watch
	if took < w.pending {
		drop := w.pending - took
		w.buf = w.buf[:len(w.buf)-drop]
		w.cost -= drop
		f.st.memGive(drop)
		w.pending = 0
		w.recheckAt = 0 // it may have come from the bytes dropped
		return
	}
	w.pending = 0
	if w.ends {
		f.endWatch()
	}
}

// endWatch lets the first bytes go.
func (f *tcpFlow) endWatch() {
	if f.watch != nil {
		f.st.memGive(f.watch.cost)
		f.watch = nil
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
