package userstack

import (
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/relayapi"
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
// (tcpFlow.watch): a relayapi.Watch, and what its bytes hold of the
// relay's memory budget.
type flowWatch struct {
	relayapi.Watch
	cost int
	// parts holds Segment's arguments: on the stack they would escape,
	// through the interface, once a segment.
	parts [4][]byte
}

// startWatch begins watching a flow the peek timeout dials (called with
// mu; pend holds what the sandbox sent so far).
func (f *tcpFlow) startWatch(name string) {
	f.watch = &flowWatch{Watch: f.st.names.NewWatch(name, f.pendBytes()), cost: f.st.memTake(f.pendLen)}
}

// watchData checks take bytes of a segment, from skip on, with the
// stream's first bytes before they are relayed. False: the segment is not
// taken (refused, and the flow reset; or no memory to hold it, and it is
// not acknowledged).
func (f *tcpFlow) watchData(data [][]byte, skip, take int) bool {
	w := f.watch
	add := w.Room(take)
	grant := f.st.memTake(add)
	if grant < add {
		f.st.memGive(grant)
		return false // the sandbox sends it again
	}
	w.cost += grant
	d := w.Segment(cutSlices(w.parts[:0], data, skip, add)...)
	clear(w.parts[:]) // the segment's buffers are not kept past it
	if d.Verdict == relayapi.Refuse {
		f.st.blockName(netpolicy.ProtoTCP, f.key.dst, w.Name(), d.Rule)
		f.endWatch()
		f.refuseFirstBytes()
		return false
	}
	return true
}

// watchTook keeps, of the segment watchData checked, the bytes the relay
// took: what it did not take (its memory budget spent) the sandbox sends
// again, maybe not the same, and is checked then. Watching ends only when
// the bytes that decided were all taken.
func (f *tcpFlow) watchTook(took int) {
	w := f.watch
	dropped, done := w.Took(took)
	w.cost -= dropped
	f.st.memGive(dropped)
	if done {
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
