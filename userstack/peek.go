package userstack

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Deferred dial, for TCP flows to names (names.go).
//
// A flow to a name is not dialed when its SYN comes: the stack answers
// the SYN itself (the flow has no host socket yet, and pend, which the
// relay fills when the host socket is full, holds what the sandbox sends),
// takes the sandbox's first bytes, at most peekMax of them (the window
// past them is not acknowledged), and looks at them:
//   - a TLS ClientHello: its SNI must be the flow's name (case does not
//     matter); another name ("sni mismatch": domain fronting, or a name
//     the allowlist never resolved) or none ("no sni") is refused with a
//     RST and recorded;
//   - an HTTP request: its Host must be the flow's name, the same way;
//   - neither (raw TCP: SSH, a database, a custom protocol): allowed; the
//     name was already allowed on this port;
//   - a malformed or oversized ClientHello or request: refused.
//
// Only then is the name resolved on the host side and the first address
// the policy does not block dialed; the buffered bytes are written to the
// host once it connects, and the flow goes on as any relayed flow. A
// client that waits for the server to speak first (SSH, SMTP) sends
// nothing: after PeekTimeout without a byte the flow is dialed as
// "neither". A short message followed by silence that may begin an HTTP
// request line (any word: "x", "PING") is dialed as "neither" after
// PeekTimeout too; the start of a ClientHello that stops short of its end
// is waited for up to peekWaitMax in all, then refused. A flow dialed at
// the timeout is not left unchecked: what its client sends next is read
// with its first bytes before it is relayed (peekwatch.go), so waiting
// out the timeout and then naming another host gets a RST as well.
//
// A flow to a name counts among the connections opening (the cap of
// Config.MaxInFlight) from its SYN until its host connect ends, connected
// or failed: the wait for its first bytes, the name's resolution and the
// connect all keep its place, as a plain flow's dial does. A sandbox that
// completes its handshakes gains nothing: a SYN over the cap is dropped
// (the sandbox retries it), and no more host sockets are ever connecting
// at once than the cap (the count once ended at the sandbox's handshake
// ACK, leaving deferred dials to blackholed addresses without a bound).
//
// What the sandbox sees differs from a plain relayed flow in one way: its
// connect succeeds before the host is reached, so a refused or
// unreachable destination ends in a RST after the connect instead of a
// failed connect.

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
	done    bool // decided: resolving and dialing
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

// startName opens a flow to a name: the SYN is answered at once, no host
// socket yet (st.mu is not held; the flow is in the table).
func (f *tcpFlow) startName(nf *nameFlow) {
	f.mu.Lock()
	defer f.unlock()
	if f.state != tcpDialing {
		return
	}
	if nf.dns {
		fd, err := f.st.names.startDNSTCP(f.key.dst)
		if err != nil {
			f.dialFailed(err)
			return
		}
		f.fd = fd
		f.hostUp()
		return
	}
	p := &peekState{f: f, name: nf.name}
	p.timer = newLoopTimer(p)
	f.peek = p
	// pend collects the sandbox's data until the host socket is there
	// (toHost writes nothing while writing is set).
	f.flags |= pendWaiting
	f.hostUp()
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

// refuse resets the sandbox's side and records the block.
func (p *peekState) refuse(rule string) {
	f := p.f
	p.done = true
	f.st.blockName(netpolicy.ProtoTCP, f.key.dst, p.name, rule)
	f.st.memGive(f.pendLen)
	f.pend, f.pendLen = nil, 0
	f.flags &^= pendWaiting
	f.sendReset()
	f.flags |= resetHost
	f.state = tcpClosed
}

// decide ends the peek: the name is resolved and dialed on a worker.
func (p *peekState) decide(_ sniffResult, _ string) {
	f := p.f
	p.done = true
	if p.armed {
		f.st.poll.stop(&p.timer)
		p.armed = false
	}
	st := f.st
	if !st.goFlow(func() { defer st.wg.Done(); p.dial() }) {
		f.state = tcpClosed
	}
}

// dial resolves the flow's name and opens the host socket (on a worker).
func (p *peekState) dial() {
	f := p.f
	st := f.st
	target, _, ok := st.names.resolveTarget(st.ctx, netpolicy.ProtoTCP, f.key.dst, p.name, true)
	var fd int
	var err error
	if ok {
		if st.cfg.Dialer != nil {
			fd, err = st.dialConn("tcp", target)
		} else {
			fd, err = dialSocket(unix.SOCK_STREAM, target)
		}
	}
	f.mu.Lock()
	defer f.unlock()
	if ok && err == nil {
		f.fd = fd // closed by unlock if the flow is
	}
	if f.state == tcpClosed || st.ctx.Err() != nil {
		f.state = tcpClosed
		return
	}
	if !ok || err != nil {
		if err != nil {
			st.cfg.Logf("userstack: dial tcp %s (%s) for %s: %v", target, p.name, f.key.dst, err)
		}
		f.sendReset()
		f.flags |= resetHost
		f.state = tcpClosed
		return
	}
	_ = unix.SetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_OOBINLINE, 1)
	f.peek = nil
	// writing stays set: the first EPOLLOUT (the connect's end) flushes
	// pend, passes a FIN on and clears it; a failed connect ends there.
	if st.cfg.Dialer != nil {
		f.openDone() // the Dialer's conn is connected: the flow is open
	} else {
		// The stack's own connect is still under way: it gets DialTimeout,
		// as a Dialer's dial does (dialConn), not the kernel's SYN
		// retries (about two minutes). The flow stays counted as opening
		// until the connect ends (pollReady), or the flow does.
		c := &connectWait{f: f}
		c.timer = newLoopTimer(c)
		f.connWait = c
		st.poll.arm(&c.timer, st.cfg.DialTimeout)
	}
}

// connectWait bounds a deferred dial's own non-blocking connect (Dialer
// nil) by DialTimeout: the sandbox's side is established already, so a
// connect that has not ended by then resets the flow, as a failed one
// does. The first event of the host socket (EPOLLOUT, or an error) ends
// the wait (pollReady).
type connectWait struct {
	f     *tcpFlow
	timer loopTimer
}

func (c *connectWait) timerFired(*loopTimer) {
	f := c.f
	f.mu.Lock()
	defer f.unlock()
	if f.connWait != c || f.state == tcpClosed {
		return // connected, or ended, meanwhile
	}
	f.connWait = nil
	f.st.cfg.Logf("userstack: dial tcp for %s: %v after %v", f.key.dst, errDialTimeout, f.st.cfg.DialTimeout)
	f.sendReset()
	f.flags |= resetHost
	f.state = tcpClosed
}

// endConnectWait stops the deferred connect's timer, if it runs.
func (f *tcpFlow) endConnectWait() {
	if f.connWait != nil {
		f.st.poll.stop(&f.connWait.timer)
		f.connWait = nil
	}
}
