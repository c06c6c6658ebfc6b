package userstack

import (
	"net/netip"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// First bytes, for TCP flows to names (names.go).
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
// at most peekMax of them (the window past them is not acknowledged), are
// decided:
//   - a TLS ClientHello: its SNI must be the flow's name (case does not
//     matter); another name ("sni mismatch": domain fronting, or a name
//     the allowlist never resolved) or none ("no sni") is refused with a
//     RST and recorded, and the host socket closed with a RST, written
//     nothing;
//   - an HTTP request: its Host must be the flow's name, the same way;
//   - neither (raw TCP: SSH, a database, a custom protocol): allowed; the
//     name was already allowed on this port;
//   - a malformed or oversized ClientHello or request: refused.
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

// peekState is a flow's deferred dial, while it lasts (tcpFlow.peek).
type peekState struct {
	f       *tcpFlow
	name    string
	timer   loopTimer
	armed   bool
	started time.Time
	done    bool // decided (allowed or refused)
	// recheckAt: the bytes held before which looking at them again can
	// tell nothing new (a ClientHello's announced length not reached).
	recheckAt int
}

func (p *peekState) timerFired(*loopTimer) {
	f := p.f
	f.mu.Lock()
	defer f.unlock()
	p.armed = false
	if f.peek != p || p.done || f.state == tcpClosed {
		return
	}
	if f.pendLen == 0 {
		// The client waits for the server to speak first. What it sends
		// once it has heard the server is still checked (peekwatch.go).
		f.startWatch(p.name)
		p.decide(sniffNotThis, "")
		return
	}
	if _, res := sniffTLS(f.pendView()); res != sniffNeedMore {
		// The start of what may be an HTTP request line (any token is a
		// method), and then silence: a short message of another
		// protocol ("x", "PING") waiting for its answer. Relayed as
		// neither: a client pausing in its request line gains nothing
		// it could not have with bytes that are no HTTP at all: the
		// rest of its first message is still checked (peekwatch.go).
		f.startWatch(p.name)
		p.decide(sniffNotThis, "")
		return
	}
	// A ClientHello begun and not finished: TLS clients send it whole.
	if time.Since(p.started) >= peekWaitMax {
		p.refuse("incomplete TLS ClientHello")
		return
	}
	p.arm(f.st.names.cfg.PeekTimeout)
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
	p := &peekState{f: f, name: name}
	p.timer = newLoopTimer(p)
	return p
}

// startName dials a new flow to a name (st.mu is not held; the flow is
// in the table, dialing): from the cache on the loop when it holds the
// name's address, as an address is dialed; else on a worker.
func (f *tcpFlow) startName(nf *nameFlow) {
	st := f.st
	if nf.dns {
		f.mu.Lock()
		defer f.unlock()
		if f.state != tcpDialing {
			return
		}
		fd, err := st.names.startDNSTCP(f.key.dst)
		if err != nil {
			f.dialFailed(err)
			return
		}
		f.fd = fd
		f.hostUp()
		return
	}
	if st.cfg.Dialer == nil {
		if target, gate, ok := st.names.cachedTarget(netpolicy.ProtoTCP, f.key.dst, nf.name); ok && gate == nil {
			f.connect(target)
			return
		}
	}
	if !st.goFlow(func() { f.dialName(nf.name) }) {
		f.mu.Lock()
		f.state = tcpClosed
		f.unlock()
	}
}

// cachedTarget is what resolveTarget, without wait, decides from the
// first family it tries (dst's own) when that family has an address to
// take: the first one the policy allows for proto, or the IPv6 gate it
// waits for. false: none fresh in the cache (the other family, or a
// lookup, is resolveTarget's; nothing is recorded here).
func (n *names) cachedTarget(proto netpolicy.Proto, dst netip.AddrPort, name string) (netip.AddrPort, <-chan struct{}, bool) {
	t, _ := lookupOrder(dst)
	target, ok := n.cachedAllowed(proto, name, t, dst.Port())
	if !ok {
		return netip.AddrPort{}, nil, false
	}
	if gate := n.st.ipv6Gate(target.Addr()); gate != nil {
		return netip.AddrPort{}, gate, true
	}
	return target, nil, true
}

// dialName resolves the flow's name and dials the first address the
// policy does not block (on a worker): the SYN is answered with what the
// dial finds. No address to dial: a RST, as for a blocked address (the
// refusal is recorded by resolveTarget).
func (f *tcpFlow) dialName(name string) {
	st := f.st
	defer st.wg.Done()
	target, _, ok := st.names.resolveTarget(st.ctx, netpolicy.ProtoTCP, f.key.dst, name, true)
	if !ok {
		f.refuseDialing(nil)
		return
	}
	f.open(target)
}

// peekEstablished starts the wait for the first bytes once the sandbox
// completed its handshake (called with mu).
func (f *tcpFlow) peekEstablished() {
	p := f.peek
	p.started = time.Now()
	p.arm(f.st.names.cfg.PeekTimeout)
}

// rcvRoom is how much more of the sandbox's data the flow buffers: while
// it peeks, up to peekMax.
func (f *tcpFlow) rcvRoom() int {
	if f.peek != nil && !f.peek.done {
		return max(0, peekMax-f.pendLen)
	}
	return tcpRcvBuf - f.pendLen
}

// peekData looks at what the sandbox sent so far (called with mu after
// data or a FIN was taken).
func (f *tcpFlow) peekData() {
	p := f.peek
	if p.done || f.state == tcpClosed || (f.pendLen == 0 && !f.has(finFromSandbox)) {
		return
	}
	if f.pendLen == 0 {
		p.decide(sniffNotThis, "") // closed without a byte: nothing to check
		return
	}
	if f.pendLen < p.recheckAt && !f.has(finFromSandbox) {
		// Each look copies and parses all that is held: a ClientHello
		// sent a byte a segment would cost the square of its length.
		return
	}
	b := f.pendView()
	rule, res := checkFirst(b, p.name, f.has(finFromSandbox))
	switch {
	case rule != "":
		p.refuse(rule)
	case res != sniffNeedMore:
		p.decide(res, "")
	default:
		p.recheckAt = min(clientHelloLeast(b), peekMax)
	}
	// NeedMore: more data, or the timer
}

// clientHelloLeast is a lower bound on the length of a stream that starts
// with b and holds a whole ClientHello: what is missing of the record
// under way, the rest of the handshake message its header announced, and
// a record header more when the record under way cannot hold that rest;
// 0 when b does not announce the message's length yet (or is no TLS
// handshake). Shorter, the sniffer can only answer NeedMore or Malformed,
// and Malformed it still answers later (a prefix that is malformed stays
// so): nothing is relayed meanwhile. Looking again only once the stream
// reaches the bound makes a ClientHello sent a byte a segment, even in
// records of a byte, cost a number of looks logarithmic in its length.
func clientHelloLeast(b []byte) int {
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

// refuse resets the sandbox's side, closes the host socket with a RST
// (nothing was written to it) and records the block.
func (p *peekState) refuse(rule string) {
	f := p.f
	p.done = true
	p.stop()
	f.st.blockName(netpolicy.ProtoTCP, f.key.dst, p.name, rule)
	f.st.memGive(f.pendLen)
	f.pend, f.pendLen = nil, 0
	f.flags &^= pendWaiting
	f.sendReset()
	f.flags |= resetHost
	f.state = tcpClosed
}

// decide ends the peek: the flow is allowed, and what the sandbox sent
// so far goes to the host (a FIN after it, if one came).
func (p *peekState) decide(_ sniffResult, _ string) {
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
