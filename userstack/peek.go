package userstack

import (
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
	"github.com/claude-sandbox/claude-sandbox/userstack/relayapi"
)

// First bytes, for TCP flows to names (package names).
//
// A flow to a name connects as a flow to an address does (issue 30): the
// name is resolved on the host side when the sandbox's SYN comes, the
// first address the policy does not block is dialed, and the SYN is
// answered only with what the dial found: a SYN-ACK once the host
// connected; a RST when the host refused, or when no address of the name
// may be dialed (recorded: "resolves only to blocked addresses", "does
// not resolve on the host"); an ICMP unreachable for an unreachable host;
// nothing when the connect timed out (the sandbox's own SYN retries then
// time out). A name whose answer is in the resolver cache (the sandbox
// just asked for it: that is how it got the synthetic address) is dialed
// from the event loop at once, as an address is; otherwise the lookup
// and the dial run on a worker. `nc -z`, a health check or a happy-eyeballs
// client sees what it would see without the jail.
//
// What the sandbox sends is still looked at before any of it reaches the
// host: the connected host socket is written nothing (pend, which the
// relay fills when the host socket is full, holds what the sandbox sends;
// pendWaiting without EPOLLOUT interest) until the sandbox's first bytes,
// at most st.peekMax of them (Config.Names' FirstBytesMax; the window
// past them is not acknowledged), are decided by the relayapi.Peek the
// names side hands out (Config.Names.NewPeek: package userstack/inspect's,
// whose doc lists the verdicts: the
// SNI of a ClientHello or the Host of an HTTP request must be the flow's
// name; other protocols are allowed; malformed, oversized or cleartext
// HTTP/2 first messages are refused). A refusal resets the sandbox's
// side, closes the host socket with a RST, written nothing, and is
// recorded.
//
// Once allowed, the held bytes are written and the flow goes on as any
// relayed flow. The host's own data is relayed meanwhile, as on any flow
// (a server that speaks first: SSH, SMTP): a client that waits for it
// answers it, and its answer is what is looked at. A client that sends
// nothing within PeekTimeout is let through as "neither"; a short message
// followed by silence that may begin an HTTP request line (any word: "x",
// "PING") likewise after PeekTimeout; the start of a ClientHello that
// stops short of its end is waited for up to peekWaitMax in all, then
// refused. A flow let through at the timeout is not left unchecked: what
// its client sends next is read with its first bytes before it is
// relayed (peekwatch.go), so waiting out the timeout and then naming
// another host gets a RST as well.
//
// A flow to a name counts among the connections opening (the cap of
// Config.MaxInFlight) from its SYN until its handshake completes, its
// lookup and host connect included, as a flow to an address does; then
// among the established flows (Config.MaxFlows), its host socket being
// open.

// peekWaitMax bounds the wait for the rest of a ClientHello that has
// begun (a variable for the tests).
var peekWaitMax = 10 * time.Second

// peekState is a flow's deferred dial, while it lasts (tcpFlow.peek):
// the stack's side of a relayapi.Peek (the decision), its timer and the
// flow it acts on.
type peekState struct {
	f       *tcpFlow
	in      relayapi.Peek // its name: in.Name()
	timer   loopTimer
	armed   bool
	started time.Time
	done    bool // decided (allowed or refused)
}

func (p *peekState) timerFired(*loopTimer) {
	f := p.f
	f.mu.Lock()
	defer f.unlock()
	p.armed = false
	if f.peek != p || p.done || f.state == tcpClosed {
		return
	}
	var held []byte
	if f.pendLen > 0 {
		held = f.pendView()
	}
	d, watch := p.in.Timeout(held, time.Since(p.started))
	p.act(d, watch)
	if d.Verdict == relayapi.NeedMore {
		p.arm(f.st.names.PeekTimeout())
	}
}

// act does what the first bytes decided: watch, an allowed flow let
// through before its first message was seen (peekwatch.go).
func (p *peekState) act(d relayapi.Decision, watch bool) {
	switch d.Verdict {
	case relayapi.Refuse:
		p.refuse(d.Rule)
	case relayapi.Allow:
		if watch {
			p.f.startWatch(p.in.Name())
		}
		p.decide()
	}
}

// pendView is the sandbox's data held so far, for a look that neither
// keeps nor changes it: pend's buffer itself while it is one (small
// segments share one, tcpPendChunk), not a copy per segment looked at.
func (f *tcpFlow) pendView() []byte {
	if len(f.pend) == 1 {
		return f.pend[0]
	}
	return f.pendBytes()
}

// pendBytes is the sandbox's data held so far, in one slice of its own.
func (f *tcpFlow) pendBytes() []byte {
	b := make([]byte, 0, f.pendLen)
	for _, c := range f.pend {
		b = append(b, c...)
	}
	return b
}

func (p *peekState) arm(d time.Duration) {
	p.armed = true
	p.f.st.poll.arm(&p.timer, d)
}

// newPeek is the first-bytes state of a new flow to name (before it is
// filed: no lock).
func newPeek(f *tcpFlow, name string) *peekState {
	p := &peekState{f: f, in: f.st.names.NewPeek(name, peekWaitMax)}
	p.timer = newLoopTimer(p)
	return p
}

// startName dials a new flow to a name, d.Name (st.mu is not held; the
// flow is in the table, dialing): from the cache on the loop when it
// holds the name's address, as an address is dialed; else on a worker.
// A flow to the stack's own resolver (d is LocalDNS) is served at once.
func (f *tcpFlow) startName(d admission.Decision) {
	st := f.st
	if d.Action == admission.LocalDNS {
		f.mu.Lock()
		defer f.unlock()
		if f.state != tcpDialing {
			return
		}
		fd, err := st.names.StartTCP(f.key.dst)
		if err != nil {
			f.dialFailed(err)
			return
		}
		f.fd = fd
		f.hostUp()
		return
	}
	if st.cfg.Dialer == nil {
		if c := st.adm.FromCache(netpolicy.ProtoTCP, f.key.dst, d.Name); c.Action == admission.Dial {
			f.connect(c.Target)
			return
		}
	}
	if !st.goFlow(func() { f.dialName(d.Name) }) {
		f.mu.Lock()
		f.state = tcpClosed
		f.unlock()
	}
}

// dialName resolves the flow's name and dials the first address the
// policy does not block (on a worker): the SYN is answered with what the
// dial finds. No address to dial: a RST, as for a blocked address (the
// refusal recorded first).
func (f *tcpFlow) dialName(name string) {
	st := f.st
	defer st.wg.Done()
	d := st.adm.Resolve(st.ctx, netpolicy.ProtoTCP, f.key.dst, name)
	if d.Action != admission.Dial {
		st.record(netpolicy.ProtoTCP, f.key.dst, d)
		f.refuseDialing(nil)
		return
	}
	f.open(d.Target)
}

// peekEstablished starts the wait for the first bytes once the sandbox
// completed its handshake (called with mu).
func (f *tcpFlow) peekEstablished() {
	p := f.peek
	p.started = time.Now()
	p.arm(f.st.names.PeekTimeout())
}

// rcvRoom is how much more of the sandbox's data the flow buffers: while
// it peeks, up to st.peekMax.
func (f *tcpFlow) rcvRoom() int {
	if f.peek != nil && !f.peek.done {
		return max(0, f.st.peekMax-f.pendLen)
	}
	return tcpRcvBuf - f.pendLen
}

// peekData looks at what the sandbox sent so far (called with mu after
// data or a FIN was taken).
func (f *tcpFlow) peekData() {
	p := f.peek
	if p.done || f.state == tcpClosed {
		return
	}
	fin := f.has(finFromSandbox)
	if p.in.Early(f.pendLen, fin) {
		// Each look copies and parses all that is held: a ClientHello
		// sent a byte a segment would cost the square of its length.
		return
	}
	var held []byte
	if f.pendLen > 0 {
		held = f.pendView()
	}
	p.act(p.in.Data(held, fin), false)
	// NeedMore: more data, or the timer
}

// refuse resets the sandbox's side, closes the host socket with a RST
// (nothing was written to it) and records the block.
func (p *peekState) refuse(rule string) {
	f := p.f
	p.done = true
	p.stop()
	f.st.blockName(netpolicy.ProtoTCP, f.key.dst, p.in.Name(), rule)
	f.refuseFirstBytes()
}

// decide ends the peek: the flow is allowed, and what the sandbox sent
// so far goes to the host (a FIN after it, if one came).
func (p *peekState) decide() {
	f := p.f
	p.done = true
	p.stop()
	f.peek = nil
	f.flush()
}

func (p *peekState) stop() {
	if p.armed {
		p.f.st.poll.stop(&p.timer)
		p.armed = false
	}
}
