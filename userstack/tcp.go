package userstack

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// TCP is relayed, not terminated.
//
// gVisor's TCP endpoints are not used. Each flow is mapped segment by
// segment onto the host socket dialed for it: data the sandbox sends is
// written to that socket from the packet path, and what the socket reads
// is framed into segments here. The stack keeps only the TCP state the
// sandbox's side needs (sequence numbers, both windows, and the data the
// sandbox has not acknowledged yet), none of a congestion-controlled
// stack's: congestion control is the host kernel's business on the real
// path, and the TUN hop is short and practically loss-free, so a simple
// retransmission (go-back-N on a timeout, one segment on three duplicate
// ACKs) is enough. A segment gets here from the TUN's fast path, which
// takes only ordinary ones (see fastIP), or through gVisor's IP layer,
// which validates the rest and drops what a non-loopback link must not
// carry.
//
// Measured against gVisor's endpoints on the same path, this about halves
// the proxy's CPU per request/response round trip and per connection: an
// endpoint's receive queue, its processor goroutine, the hand-off to a copy
// loop and its own ACK for every segment all went away.

const (
	// tcpWndShift is the window scale the stack offers.
	tcpWndShift = 7
	// tcpRcvBuf bounds the sandbox's data buffered per flow while the
	// host socket is full; the advertised window is what is left of it.
	tcpRcvBuf = 4 << 20
	// tcpSndBuf bounds the host's data in flight to the sandbox per flow.
	tcpSndBuf = 4 << 20
	// tcpAckDelay is how long a bare ACK waits for data to ride on, like
	// a kernel's delayed ACK (shorter: the event loop's timers have
	// millisecond resolution, epoll_wait's), unless tcpAckEvery bytes are
	// unacknowledged.
	tcpAckDelay = time.Millisecond
	tcpAckEvery = 64 << 10
	// Retransmission to the sandbox: the first timeout, its cap, and how
	// many timeouts in a row end the flow (the sandbox is gone).
	tcpRTOMin     = 200 * time.Millisecond
	tcpRTOMax     = 10 * time.Second
	tcpMaxRetries = 8
	// tcpDefaultMSS is TCP's default when a SYN carries no MSS option.
	tcpDefaultMSS = 536
	// tcpReadMax is the most one read from a host socket takes (one
	// segment); reads shorter than half of it are copied out of the
	// pooled buffer, so that data waiting for the sandbox's ACK never
	// pins more than twice its size (a sandbox can ask for small
	// segments with its MSS).
	tcpReadMax   = 64 << 10
	tcpCopyBelow = tcpReadMax / 2
	// tcpPendChunk is the least a buffer for sandbox data waiting for the
	// host socket holds: small segments share one, so that their count
	// does not multiply the memory their bytes take.
	tcpPendChunk = 16 << 10
	// tcpWndShort: a window the memory budget narrows below this waits
	// for memory to be given back, to be widened (mem.go).
	tcpWndShort = 64 << 10
	// tcpSynRetries bounds the SYN-ACK retransmissions to a sandbox that
	// never completes its handshake (the host socket is open meanwhile).
	tcpSynRetries = 5
	// maxIovecs is the kernel's limit on one writev (IOV_MAX).
	maxIovecs = 1024
	// The host sockets' keepalive, Go's net package's defaults: probes
	// after 15 s idle, every 15 s, 9 unanswered ones end the connection.
	tcpKeepIdle  = 15
	tcpKeepIntvl = 15
	tcpKeepCnt   = 9
)

type tcpState uint8

const (
	tcpDialing     tcpState = iota // SYN seen, host dial in progress
	tcpSynRcvd                     // SYN-ACK sent
	tcpEstablished                 // handshake done (either side may have closed its half)
	tcpClosed                      // gone: nothing more is sent or relayed
)

// readBuffers recycles the 64 KiB buffers host data is read into.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, tcpReadMax); return &b }}

// tcpChunk is data sent to the sandbox and not yet acknowledged: exactly
// one segment's payload (front-trimmed by a partial ACK).
type tcpChunk struct {
	data   []byte
	pooled *[]byte // the read buffer data lives in, if pooled
	cost   int     // what it holds of the relay's memory budget
}

// tcpFlow is one relayed connection. Everything but key and addresses is
// guarded by mu. The host socket is written and read with plain system
// calls on its descriptor under mu, only while the flow is not closed, and
// closed under mu when it closes: no I/O reaches a reused descriptor.
//
// The host side is read and written on the stack's event loop (pollReady):
// it reads while the sandbox's window has room, and writes what the
// sandbox sent that the socket did not take at once.
type tcpFlow struct {
	st       *Stack
	key      flowKey // src: the sandbox's end; dst: the destination it dialed
	v6       bool
	src, dst tcpip.Address // dst's and src's addresses, for framing

	mu    sync.Mutex
	state tcpState
	// pollFD: the host socket (fd, -1 before the dial) and its
	// registration on the event loop.
	pollFD
	early bool // the host spoke before the sandbox's handshake ended
	reset bool // close the host socket with a RST (SO_LINGER 0)
	// opening: counted in st.opening (dialing or SYN-RCVD). Set and
	// cleared under both mu and st.mu; read under either.
	opening bool
	closed  bool // torn down (timers stopped, table entry removed)

	// The sandbox's data, toward the host.
	irs      uint32
	rcvNxt   uint32
	rcvAcked uint32   // the last ACK number sent
	rcvWnd   uint32   // the last window sent, in bytes
	rcvShift uint8    // our window scale (0 if the sandbox offered none)
	pend     [][]byte // accepted and acknowledged, not yet written to the host
	pendLen  int      // held of the relay's memory budget
	writing  bool     // pend waits for room in the host socket
	finRcvd  bool     // the sandbox's FIN is accepted
	shutWr   bool     // passed on: the host socket's sending side is shut
	rcvUrg   bool     // the sandbox sent urgent data: rcvUp is its pointer
	rcvUp    uint32   // one past the sandbox's urgent byte (BSD, as Linux sends)

	// The host's data, toward the sandbox.
	iss      uint32
	sndUna   uint32
	sndNxt   uint32
	sndWnd   uint32 // the sandbox's window, in bytes
	sndShift uint8
	mss      int
	sent     []tcpChunk // from sndUna on
	hostEOF  bool
	finSent  bool
	urgIn    bool   // the host socket has urgent data not yet read (EPOLLPRI)
	sndUrg   bool   // segments before sndUp carry URG
	sndUp    uint32 // one past the host's urgent byte, in the sandbox's sequence
	dupAcks  int
	retries  int
	rto      time.Duration

	ackTimer loopTimer
	ackArmed bool
	rtoTimer loopTimer // the dial's timeout while dialing
	rtoArmed bool
	rtoFrom  time.Time // since when the oldest outstanding segment waits

	memWait bool // on the stack's list of flows waiting for memory (mem.go)

	peek  *peekState // a flow to a name not dialed yet (peek.go)
	watch *flowWatch // a flow to a name dialed before its first message (peekwatch.go)
}

func seqLT(a, b uint32) bool { return int32(a-b) < 0 }
func seqGT(a, b uint32) bool { return int32(a-b) > 0 }

// tcpIn is a segment from the sandbox.
type tcpIn struct {
	v6     bool
	local  tcpip.Address // the destination the sandbox addressed
	remote tcpip.Address // the sandbox's address
	key    flowKey
	h      header.TCP // with its options
	data   [][]byte   // the payload
	n      int        // its length
}

// handleTCP receives the TCP segments gVisor's IP layer delivers (there
// are no gVisor TCP endpoints): the ones the TUN's fast path leaves to it
// (fragments, extension headers, unusual addresses), and every one on
// other links. It runs on the packet path and never blocks.
func (st *Stack) handleTCP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	h := header.TCP(pkt.TransportHeader().Slice())
	if !tcpHeaderOK(h) {
		return true // consumed: no RST for a malformed segment
	}
	var small [4][]byte
	n := pkt.Data().Size()
	st.tcpInput(&tcpIn{
		v6:     id.LocalAddress.BitLen() == 128,
		local:  id.LocalAddress,
		remote: id.RemoteAddress,
		key: flowKey{
			src: netip.AddrPortFrom(toAddr(id.RemoteAddress), id.RemotePort),
			dst: netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort),
		},
		h:    h,
		data: payloadSlices(small[:0], pkt, n),
		n:    n,
	})
	return true
}

// tcpInput takes a segment from the sandbox, from either path.
func (st *Stack) tcpInput(in *tcpIn) {
	if !tcpHeaderOK(in.h) {
		return // dropped unanswered, as a kernel drops a malformed segment
	}
	st.mu.Lock()
	f := st.tcp[in.key]
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return
	}
	if f == nil {
		st.newTCP(in)
		return
	}
	f.segment(in)
}

// tcpHeaderOK reports whether h is exactly one whole TCP header: its data
// offset at least the minimum header and equal to the header's length.
// Neither path hands on anything else: the fast path takes only such
// headers, and gVisor's parser, given a data offset below 5 words or past
// the segment's end, consumes the minimum header and leaves the offset as
// it was, which header.TCP's Options and Payload would then slice out of
// range (issue 15: a panic that took the launcher down).
func tcpHeaderOK(h header.TCP) bool {
	if len(h) < header.TCPMinimumSize {
		return false
	}
	off := int(h.DataOffset())
	return off >= header.TCPMinimumSize && off == len(h)
}

// ResetFor returns the sequence number, acknowledgement number and flags
// of the RST that answers seg (carrying n payload bytes) as a closed port
// does (RFC 9293 3.10.7.1); ok is false for a RST, which gets no answer.
// The jail's sink answers blocked segments with it too.
func ResetFor(seg header.TCP, n int) (seq, ack uint32, flags header.TCPFlags, ok bool) {
	in := seg.Flags()
	if in.Contains(header.TCPFlagRst) {
		return 0, 0, 0, false
	}
	if in.Contains(header.TCPFlagAck) {
		return seg.AckNumber(), 0, header.TCPFlagRst, true
	}
	ack = seg.SequenceNumber() + uint32(n)
	if in.Contains(header.TCPFlagSyn) {
		ack++
	}
	if in.Contains(header.TCPFlagFin) {
		ack++
	}
	return 0, ack, header.TCPFlagRst | header.TCPFlagAck, true
}

// rejectTCP answers a segment that belongs to no flow with a RST.
func (st *Stack) rejectTCP(in *tcpIn) {
	h := in.h
	seq, ack, out, ok := ResetFor(h, in.n)
	if !ok {
		return
	}
	seg := tcpSegment{v6: in.v6, src: in.local, dst: in.remote, srcPort: h.DestinationPort(), dstPort: h.SourcePort(), flags: out, seq: seq, ack: ack}
	if err := st.writeTCP(&seg, nil); err != nil {
		st.cfg.Logf("userstack: tcp reset to %v: %v", in.key.src, err)
	}
}

// newTCP decides a segment for which there is no flow: a SYN starts one
// (policy check, then the dial in the background), anything else is reset.
func (st *Stack) newTCP(in *tcpIn) {
	h, key := in.h, in.key
	if h.Flags()&(header.TCPFlagSyn|header.TCPFlagAck|header.TCPFlagRst|header.TCPFlagFin) != header.TCPFlagSyn {
		st.rejectTCP(in)
		return
	}
	var nf *nameFlow // the domain allowlist's (names.go)
	target, ok := netip.AddrPort{}, true
	if st.names != nil {
		nf, ok = st.names.admit(netpolicy.ProtoTCP, key.dst)
		ok = !ok
	}
	if ok && nf == nil {
		target, ok = st.tcpTarget(key.dst)
	}
	if !ok {
		st.rejectTCP(in) // "connection refused" at once
		return
	}
	opts := header.ParseSynOptions(h.Options(), false)
	f := &tcpFlow{
		st:     st,
		key:    key,
		v6:     in.v6,
		src:    in.local,
		dst:    in.remote,
		pollFD: pollFD{fd: -1},
		irs:    h.SequenceNumber(),
		rcvNxt: h.SequenceNumber() + 1,
		rto:    tcpRTOMin,
	}
	f.ackTimer = newLoopTimer(f)
	f.rtoTimer = newLoopTimer(f)
	f.rcvAcked = f.rcvNxt
	if opts.WS >= 0 {
		f.sndShift = uint8(min(opts.WS, 14))
		f.rcvShift = tcpWndShift
	}
	f.sndWnd = uint32(h.WindowSize()) // a SYN's window is never scaled
	f.mss = int(opts.MSS)
	if f.mss == 0 {
		f.mss = tcpDefaultMSS
	}
	f.mss = min(f.mss, st.maxSegment(f.v6))
	st.mu.Lock()
	switch {
	case st.closed:
		st.mu.Unlock()
		return
	case st.tcp[key] != nil:
		st.mu.Unlock() // a retransmitted SYN raced the first
		return
	case st.opening >= st.cfg.MaxInFlight:
		st.mu.Unlock() // dropped: the sandbox retries the SYN
		return
	}
	st.tcp[key] = f
	st.tcpLive.Add(1)
	st.opening++
	f.opening = true
	if nf != nil {
		st.mu.Unlock()
		f.startName(nf) // the SYN answered at once (peek.go)
		return
	}
	if st.cfg.Dialer == nil {
		st.mu.Unlock()
		f.connect(target)
		return
	}
	st.wg.Add(1)
	st.mu.Unlock()
	st.work.Go(func() { f.dial(target) })
}

// goFlow runs fn, which calls st.wg.Done when it returns, on a worker; it
// reports false when the stack is closing.
func (st *Stack) goFlow(fn func()) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.wg.Add(1)
	st.work.Go(fn)
	return true
}

// maxSegment is the largest TCP payload that fits the link's MTU.
func (st *Stack) maxSegment(v6 bool) int {
	return int(st.ep.MTU()) - ipHeaderLen(v6) - header.TCPMinimumSize
}

// tcpTarget returns where a connection to dst goes: the upstream resolver
// for port 53 of a local address, dst itself when the policy allows it. It
// records a Block for a refused destination.
func (st *Stack) tcpTarget(dst netip.AddrPort) (netip.AddrPort, bool) {
	if st.isLocal(dst.Addr()) {
		if dst.Port() == netpolicy.DNSPort {
			return st.upstream()
		}
		st.block(netpolicy.ProtoTCP, dst, "local address, not a DNS port")
		return netip.AddrPort{}, false
	}
	if v := st.check(netpolicy.ProtoTCP, dst); !v.Allowed {
		st.block(netpolicy.ProtoTCP, dst, v.Rule)
		return netip.AddrPort{}, false
	}
	return dst, true
}

// connect opens the host side with a non-blocking connect, which the
// event loop sees complete (pollReady); only then is the SYN answered, so
// that a refused or unreachable destination gives the sandbox a RST
// instead of an accepted connection that then closes.
func (f *tcpFlow) connect(target netip.AddrPort) {
	fd, err := dialSocket(unix.SOCK_STREAM, target)
	f.mu.Lock()
	defer f.unlock()
	if err != nil {
		f.dialFailed(err)
		return
	}
	f.fd = fd
	if f.state != tcpDialing {
		f.state = tcpClosed // closed meanwhile: unlock closes fd
		return
	}
	f.armRTO(f.st.cfg.DialTimeout)
}

// connected takes the outcome of the non-blocking connect.
func (f *tcpFlow) connected() {
	n, err := unix.GetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err == nil && n != 0 {
		err = syscall.Errno(n)
	}
	if err != nil {
		f.dialFailed(err)
		return
	}
	f.stopRTO()
	f.hostUp()
}

// dialFailed passes the outcome of a failed host-side connect on to the
// sandbox as the destination's network would (issue 15): refused, a RST
// (ECONNREFUSED); unreachable, an ICMP destination unreachable, which a
// connecting kernel takes as fatal (EHOSTUNREACH, ENETUNREACH); timed
// out, nothing: the flow ends silently, and the sandbox's own SYN
// retries time out as they would (ETIMEDOUT), each retry after the flow
// ended trying the destination again. Any other failure (no local port,
// a Dialer's own error) is refused with a RST.
func (f *tcpFlow) dialFailed(err error) {
	if f.state != tcpDialing {
		return // reset or closed meanwhile
	}
	f.st.cfg.Logf("userstack: dial tcp %s: %v", f.key.dst, err)
	switch {
	case errors.Is(err, errDialTimeout) || errors.Is(err, unix.ETIMEDOUT) || errors.Is(err, context.DeadlineExceeded):
	case errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.EHOSTDOWN):
		f.st.tcpUnreachable(f, false)
	case errors.Is(err, unix.ENETUNREACH):
		f.st.tcpUnreachable(f, true)
	default:
		f.sendReset()
	}
	f.state = tcpClosed
}

// dial opens the host side through the configured Dialer (on a worker:
// it may block), then goes on as connected does.
func (f *tcpFlow) dial(target netip.AddrPort) {
	st := f.st
	defer st.wg.Done()
	fd, err := st.dialConn("tcp", target)
	f.mu.Lock()
	defer f.unlock()
	if err != nil {
		f.dialFailed(err)
		return
	}
	f.fd = fd // closed by unlock if the flow is
	if f.state != tcpDialing || st.ctx.Err() != nil {
		// Reset by the sandbox, or the stack is closing, while dialing.
		f.state = tcpClosed
		return
	}
	f.hostUp()
}

// hostUp answers the SYN once the host side is connected.
func (f *tcpFlow) hostUp() {
	// Urgent data stays in the stream, in its place (reads stop at its
	// mark, which SIOCATMARK tells): readSome marks it for the sandbox.
	_ = unix.SetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_OOBINLINE, 1)
	f.iss = tcpISS()
	f.sndUna, f.sndNxt = f.iss, f.iss+1
	f.state = tcpSynRcvd
	f.sendSynAck()
	f.startRTO()
}

// tcpISS picks an initial sequence number (the fuzz target fixes it, to
// script whole handshakes).
var tcpISS = rand.Uint32

// errDialTimeout: the stack's own connect took longer than DialTimeout.
var errDialTimeout = errors.New("timed out")

// dialConn dials target through the configured Dialer, with the dial
// timeout, and takes the conn's descriptor over (see detachConn).
func (st *Stack) dialConn(network string, target netip.AddrPort) (int, error) {
	ctx, cancel := context.WithTimeout(st.ctx, st.cfg.DialTimeout)
	defer cancel()
	out, err := st.cfg.Dialer.DialContext(ctx, network, target.String())
	if err != nil {
		return -1, err
	}
	return detachConn(out)
}

// errNoDescriptor: the Dialer's contract is a conn with a descriptor.
var errNoDescriptor = errors.New("the dialed conn has no descriptor (Dialer must return a syscall.Conn)")

// detachConn takes c's descriptor over: a duplicate (see dupFD), with c
// closed, which takes it out of Go's netpoller.
func detachConn(c net.Conn) (int, error) {
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errNoDescriptor
	}
	return dupFD(sc)
}

// dialSocket opens a non-blocking socket of type typ connected (or, for
// TCP, connecting) to to.
func dialSocket(typ int, to netip.AddrPort) (int, error) {
	a := to.Addr().Unmap()
	var sa unix.Sockaddr
	family := unix.AF_INET
	if a.Is4() {
		sa = &unix.SockaddrInet4{Port: int(to.Port()), Addr: a.As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(to.Port()), Addr: a.As16()}
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if typ == unix.SOCK_STREAM {
		// As Go's net package does: each segment the sandbox sends
		// leaves at once (the sandbox's own stack already batched), and
		// keepalives find a remote end that vanished (or a NAT that
		// forgot the connection) on an idle connection, which then ends
		// with a RST to the sandbox. The sandbox's own keepalives stop
		// at the relay, which answers them.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, tcpKeepIdle)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, tcpKeepIntvl)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, tcpKeepCnt)
	}
	if err := unix.Connect(fd, sa); err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pollReady runs on the event loop when the host socket is ready.
func (f *tcpFlow) pollReady(events uint32) {
	f.mu.Lock()
	defer f.unlock()
	switch f.state {
	case tcpClosed:
		return
	case tcpDialing:
		f.connected()
		return
	case tcpSynRcvd:
		if events&unix.EPOLLERR != 0 {
			n, _ := unix.GetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_ERROR)
			f.hostFailed(syscall.Errno(n))
			return
		}
		f.early = true // read once the sandbox completes its handshake
		return
	}
	if f.writing && events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		f.flush()
	}
	if events&unix.EPOLLPRI != 0 {
		f.urgIn = true
	}
	if f.hostOpen() && events&(unix.EPOLLIN|unix.EPOLLPRI|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		f.readSome()
	}
}

// segment handles a segment of an existing flow.
func (f *tcpFlow) segment(in *tcpIn) {
	h := in.h
	flags := h.Flags()
	seq := h.SequenceNumber()
	f.mu.Lock()
	defer f.unlock()
	switch f.state {
	case tcpClosed:
		return
	case tcpDialing:
		if flags.Contains(header.TCPFlagRst) {
			f.state = tcpClosed // the dial's result is closed when it comes
		}
		return // a retransmitted SYN: the answer comes when the dial does
	}
	if flags.Contains(header.TCPFlagRst) {
		// RFC 5961 3.2: a reset ends the flow only at exactly the next
		// sequence number; elsewhere in the window it gets a challenge
		// ACK (a genuine sender answers it with a reset at the right
		// number; a blind attacker cannot see it), and outside the
		// window it is dropped.
		switch {
		case seq == f.rcvNxt:
			f.reset = true
			f.state = tcpClosed
		case seq-f.rcvNxt < f.window():
			f.sendAck()
		}
		return
	}
	if flags.Contains(header.TCPFlagSyn) {
		if f.state == tcpSynRcvd && seq == f.irs && !flags.Contains(header.TCPFlagAck) {
			f.sendSynAck() // our SYN-ACK was lost
			return
		}
		f.sendAck() // challenge ACK (RFC 5961 4.2)
		return
	}
	if !flags.Contains(header.TCPFlagAck) {
		return
	}
	ack := h.AckNumber()
	if f.state == tcpSynRcvd {
		if ack != f.iss+1 {
			return
		}
		f.state = tcpEstablished
		f.st.mu.Lock()
		f.st.opening--
		f.st.mu.Unlock()
		f.opening = false
		f.sndUna = ack
		f.retries, f.rto = 0, tcpRTOMin
		f.sndWnd = uint32(h.WindowSize()) << f.sndShift
		if f.peek != nil {
			f.peekEstablished()
		}
	}
	n := in.n
	if flags.Contains(header.TCPFlagUrg) && h.UrgentPointer() != 0 {
		// RFC 9293 3.10.7.4: the urgent pointer only moves forward.
		if up := seq + uint32(h.UrgentPointer()); !f.rcvUrg || seqGT(up, f.rcvUp) {
			if seqGT(up, f.rcvNxt) {
				f.rcvUrg, f.rcvUp = true, up
			}
		}
	}
	f.processAck(ack, uint32(h.WindowSize())<<f.sndShift, n == 0 && !flags.Contains(header.TCPFlagFin))
	switch {
	case f.state == tcpClosed:
	case n > 0 || flags.Contains(header.TCPFlagFin):
		f.processData(seq, in.data, n, flags.Contains(header.TCPFlagFin))
		if f.peek != nil {
			f.peekData()
		}
	case seq != f.rcvNxt:
		// Not acceptable (RFC 9293 3.10.7.4): a keepalive or a zero
		// window probe, answered with the current ACK and window.
		f.sendAck()
	}
	if f.early && f.hostOpen() {
		// The host spoke first (a greeting, a banner) and its data waits
		// in the socket: send it now rather than a turn of the loop later.
		f.early = false
		f.readSome()
	}
	f.maybeDone()
}

// processAck takes the sandbox's acknowledgement and window.
func (f *tcpFlow) processAck(ack, wnd uint32, bare bool) {
	if seqGT(ack, f.sndNxt) {
		f.sendAck() // acknowledges what was never sent
		return
	}
	switch {
	case seqGT(ack, f.sndUna):
		f.dropAcked(ack - f.sndUna)
		f.sndUna = ack
		f.dupAcks, f.retries, f.rto = 0, 0, tcpRTOMin
		if f.sndUna != f.sndNxt {
			f.startRTO() // progress: the rest waits from now
		}
	case ack == f.sndUna && bare && f.sndUna != f.sndNxt && wnd == f.sndWnd:
		f.dupAcks++
		if f.dupAcks == 3 {
			f.retransmit(true) // fast retransmit
		}
	}
	if wnd == 0 && f.sndWnd == 0 {
		// An answer to a window probe: the sandbox is there, it just
		// does not read. Probing goes on (backing off) for as long as it
		// answers, as Linux's does.
		f.retries = 0
	}
	f.sndWnd = wnd // a wider window: unlock reads the host again
	if wnd == 0 && f.sndUna == f.sndNxt && f.hostOpen() && !f.rtoArmed {
		f.startRTO() // a window probe, if the sandbox's update is lost
	}
}

// dropAcked releases n acknowledged bytes (the FIN's sequence number
// included, when it is acknowledged) from the front of sent.
func (f *tcpFlow) dropAcked(n uint32) {
	i := 0
	for ; i < len(f.sent) && n > 0; i++ {
		c := &f.sent[i]
		if uint32(len(c.data)) > n {
			c.data = c.data[n:]
			break
		}
		n -= uint32(len(c.data))
		f.st.memGive(c.cost)
		c.release()
	}
	if i > 0 {
		k := copy(f.sent, f.sent[i:])
		clear(f.sent[k:])
		f.sent = f.sent[:k]
	}
}

func (c *tcpChunk) release() {
	if c.pooled != nil {
		readBuffers.Put(c.pooled)
	}
	*c = tcpChunk{}
}

// processData takes the payload (and FIN) of an in-window segment: in
// order, it goes to the host; a gap or a duplicate is answered with an
// immediate ACK (the sandbox's fast retransmit fills gaps; nothing out of
// order is kept).
func (f *tcpFlow) processData(seq uint32, data [][]byte, n int, fin bool) {
	skip := 0
	if seqLT(seq, f.rcvNxt) {
		old := int(f.rcvNxt - seq)
		if old > n || (old == n && !fin) {
			f.sendAck() // entirely old: a retransmission we already have
			return
		}
		skip = old
	} else if seq != f.rcvNxt {
		f.sendAck() // a gap: duplicate ACK
		return
	}
	if f.finRcvd {
		f.sendAck()
		return
	}
	take := n - skip
	if room := f.rcvRoom(); take > room {
		take, fin = room, false // beyond the window: dropped
	}
	if take > 0 && f.watch != nil && !f.watchData(data, skip, take) {
		return
	}
	if take > 0 {
		var took int
		var ok bool
		if f.rcvUrg && f.rcvUp-1-f.rcvNxt < uint32(take) {
			took, ok = f.toHostUrgent(data, skip, take)
		} else {
			took, ok = f.toHost(data, skip, take)
		}
		if !ok {
			return
		}
		f.rcvNxt += uint32(took)
		if f.watch != nil {
			f.watchTook(took)
		}
		if took < take {
			// The relay's memory budget is spent: the rest is not
			// acknowledged (the sandbox sends it again), and the window
			// this ACK carries is what is left.
			f.sendAck()
			return
		}
	}
	if fin {
		f.rcvNxt++
		f.finRcvd = true
		f.shutHost()
		if f.finSent {
			f.sendAck() // the last segment of the flow
		} else {
			f.armAck() // the host's FIN, if it follows soon, carries it
		}
		return
	}
	if f.rcvNxt-f.rcvAcked >= tcpAckEvery {
		f.sendAck()
		return
	}
	f.armAck()
}

// toHost writes take bytes of the segment's payload, from skip on, to the
// host socket without waiting; what does not fit is copied to pend and
// written when the socket has room (flush), as far as the relay's memory
// budget allows. It returns how many bytes it took, and false when the
// flow failed.
func (f *tcpFlow) toHost(data [][]byte, skip, take int) (int, bool) {
	var small [4][]byte
	parts := cutSlices(small[:0], data, skip, take)
	if !f.writing {
		n, err := rawWritev(f.fd, parts)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			n = 0
		case err != nil:
			f.hostFailed(err)
			return 0, false
		}
		parts = trimFront(parts, n)
	}
	rest := 0
	for _, p := range parts {
		rest += len(p)
	}
	if rest == 0 {
		return take, true
	}
	grant := f.st.memTake(rest)
	took := take - rest + grant
	parts = truncParts(parts, grant)
	if len(parts) == 0 {
		return took, true
	}
	for _, p := range parts {
		f.pendLen += len(p)
		if k := len(f.pend) - 1; k >= 0 && cap(f.pend[k])-len(f.pend[k]) >= len(p) {
			f.pend[k] = append(f.pend[k], p...)
			continue
		}
		f.pend = append(f.pend, append(make([]byte, 0, max(len(p), tcpPendChunk)), p...))
	}
	f.writing = true
	return took, true
}

// toHostUrgent is toHost for data that holds the sandbox's urgent byte:
// the bytes before it are written, then the byte with MSG_OOB (so the
// host kernel sends it with an urgent pointer, and the server reads it
// with recv(MSG_OOB) or at its mark, SIGURG raised), then the rest. When
// the bytes before it could not all go to the socket at once (it is full)
// the byte goes in line, in its place: urgent data may not overtake the
// data before it.
func (f *tcpFlow) toHostUrgent(data [][]byte, skip, take int) (int, bool) {
	at := int(f.rcvUp - 1 - f.rcvNxt)
	f.rcvUrg = false
	took, ok := f.toHost(data, skip, at)
	if !ok || took < at || f.writing {
		if ok && took == at {
			more, ok := f.toHost(data, skip+at, take-at)
			return took + more, ok
		}
		return took, ok
	}
	var one [1]byte
	var small [4][]byte
	copy(one[:], cutSlices(small[:0], data, skip+at, 1)[0])
	if n, err := unix.SendmsgN(f.fd, one[:], nil, nil, unix.MSG_OOB|unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); err != nil || n != 1 {
		more, ok := f.toHost(data, skip+at, take-at) // in line
		return took + more, ok
	}
	took++
	if rest := take - at - 1; rest > 0 {
		more, ok := f.toHost(data, skip+at+1, rest)
		return took + more, ok
	}
	return took, true
}

// truncParts keeps the first n bytes of parts.
func truncParts(parts [][]byte, n int) [][]byte {
	for i, p := range parts {
		if n <= len(p) {
			parts[i] = p[:n]
			if n == 0 {
				i--
			}
			clear(parts[i+1:])
			return parts[:i+1]
		}
		n -= len(p)
	}
	return parts
}

// payloadSlices appends the slices holding the n bytes of pkt's payload.
func payloadSlices(dst [][]byte, pkt *stack.PacketBuffer, n int) [][]byte {
	return cutSlices(dst, pkt.AsSlices(), pkt.HeaderSize(), n)
}

// cutSlices appends the slices of src that hold take bytes from skip on.
func cutSlices(dst, src [][]byte, skip, take int) [][]byte {
	for _, s := range src {
		if take == 0 {
			break
		}
		if skip >= len(s) {
			skip -= len(s)
			continue
		}
		s = s[skip:]
		skip = 0
		if len(s) > take {
			s = s[:take]
		}
		dst = append(dst, s)
		take -= len(s)
	}
	return dst
}

// trimFront drops n bytes from the front of parts (letting go of the
// slices it passes).
func trimFront(parts [][]byte, n int) [][]byte {
	for len(parts) > 0 && n >= len(parts[0]) {
		n -= len(parts[0])
		parts[0] = nil
		parts = parts[1:]
	}
	if n > 0 {
		parts[0] = parts[0][n:]
	}
	return parts
}

// flush writes pend to the host socket as far as it has room, and once
// all is written passes on a FIN and reopens the window it had narrowed.
func (f *tcpFlow) flush() {
	for f.state != tcpClosed && len(f.pend) > 0 {
		n, err := rawWritev(f.fd, f.pend[:min(len(f.pend), maxIovecs)])
		if err == unix.EAGAIN || err == unix.EINTR {
			return // the loop calls again when there is room
		}
		if err != nil {
			f.hostFailed(err)
			break
		}
		f.pendLen -= n
		f.st.memGive(n)
		f.pend = trimFront(f.pend, n)
	}
	f.st.memGive(f.pendLen) // what a failed host socket will never take
	f.pend, f.pendLen = nil, 0
	f.writing = false
	if f.state != tcpClosed {
		f.shutHost()
		// The window reopens: say so if it had closed below half.
		if f.rcvNxt != f.rcvAcked || f.rcvWnd < tcpRcvBuf/2 {
			f.sendAck()
		}
		f.maybeDone()
	}
}

// shutHost passes the sandbox's FIN on once everything before it is
// written.
func (f *tcpFlow) shutHost() {
	if !f.finRcvd || f.shutWr || f.writing {
		return
	}
	f.shutWr = true
	if err := unix.Shutdown(f.fd, unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
		f.hostFailed(err)
	}
}

// hostBurst bounds the reads of one socket in one turn of the loop.
const hostBurst = 16

// readSome reads the host socket as far as the sandbox's window allows
// and sends what it reads. A read shorter than asked ends the turn: the
// socket is drained, and whatever comes next (an EOF already queued
// behind the data, too) keeps it readable for the loop's next wait.
func (f *tcpFlow) readSome() {
	for i := 0; i < hostBurst; i++ {
		room := min(f.space(), f.mss, tcpReadMax)
		if room == 0 {
			return // the window closed: unlock narrows the interest
		}
		// What the read may cost of the memory budget, taken before it:
		// a pooled buffer whole, or (short of that) a read small enough
		// to be copied out.
		grant := f.st.memTake(tcpReadMax)
		if grant == 0 {
			f.waitMem(0)
			return // unlock narrows the interest
		}
		if grant < tcpReadMax {
			room = min(room, grant, tcpCopyBelow-1)
		}
		urgent := false
		if f.urgIn {
			// A read stops short of the mark: at it, the first byte
			// read is the urgent one.
			if at, err := unix.IoctlGetInt(f.fd, unix.SIOCATMARK); err == nil && at == 1 {
				urgent, f.urgIn = true, false
			}
		}
		buf := readBuffers.Get().(*[]byte)
		n, err := rawRead(f.fd, (*buf)[:room])
		if urgent && err == nil && n > 0 {
			f.sndUrg, f.sndUp = true, f.sndNxt+1
		}
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			readBuffers.Put(buf)
			f.st.memGive(grant)
			return
		case err != nil:
			readBuffers.Put(buf)
			f.st.memGive(grant)
			f.hostFailed(err)
			return
		case n == 0:
			readBuffers.Put(buf)
			f.st.memGive(grant)
			f.hostEOF = true
			f.sendFin()
			f.maybeDone()
			return
		}
		c := tcpChunk{data: (*buf)[:n], pooled: buf, cost: tcpReadMax}
		if n < tcpCopyBelow {
			c = tcpChunk{data: append([]byte(nil), (*buf)[:n]...), cost: n}
			readBuffers.Put(buf)
		}
		f.st.memGive(grant - c.cost)
		f.sendData(c)
		if n < room {
			return
		}
	}
}

// space is how much more the sandbox's window and the send buffer take.
func (f *tcpFlow) space() int {
	inflight := f.sndNxt - f.sndUna
	lim := min(f.sndWnd, tcpSndBuf)
	if inflight >= lim {
		return 0
	}
	return int(lim - inflight)
}

// sendData sends a chunk of host data as one segment and keeps it until
// it is acknowledged.
func (f *tcpFlow) sendData(c tcpChunk) {
	seg := f.seg(header.TCPFlagAck|header.TCPFlagPsh, f.sndNxt)
	if f.sndUna == f.sndNxt || !f.rtoArmed {
		f.startRTO()
	}
	f.sent = append(f.sent, c)
	f.sndNxt += uint32(len(c.data))
	f.write(&seg, c.data)
}

// sendFin sends the host's FIN once all its data is sent.
func (f *tcpFlow) sendFin() {
	if f.finSent {
		return
	}
	f.finSent = true
	seg := f.seg(header.TCPFlagAck|header.TCPFlagFin, f.sndNxt)
	if f.sndUna == f.sndNxt || !f.rtoArmed {
		f.startRTO()
	}
	f.sndNxt++
	f.write(&seg, nil)
}

// retransmit resends from sndUna: one segment, or everything outstanding
// (go-back-N), the FIN included.
func (f *tcpFlow) retransmit(one bool) {
	if f.state == tcpSynRcvd {
		f.sendSynAck()
		return
	}
	seq := f.sndUna
	for _, c := range f.sent {
		seg := f.seg(header.TCPFlagAck|header.TCPFlagPsh, seq)
		f.write(&seg, c.data)
		seq += uint32(len(c.data))
		if one {
			return
		}
	}
	if f.finSent && seq != f.sndNxt {
		seg := f.seg(header.TCPFlagAck|header.TCPFlagFin, seq)
		f.write(&seg, nil)
	}
}

// window is the receive window to advertise, in bytes.
func (f *tcpFlow) window() uint32 {
	w, _, _ := f.windowLimit()
	return w
}

// windowLimit is window, and whether the relay's memory budget narrowed
// it to a window worth widening later (below tcpWndShort). Each flow is
// offered at most its share of what is free of the budget (split evenly
// among the live flows), so that the windows open at any one time seldom
// promise more than is free: what arrives beyond what toHost can be
// granted is not acknowledged, and the sandbox then sends it again only
// after its retransmission timeout.
//
// free is what it saw free of the budget (for waitMem).
func (f *tcpFlow) windowLimit() (w uint32, short bool, free int) {
	w = min(uint32(f.rcvRoom()), 0xffff<<f.rcvShift)
	free = f.st.memFree()
	share := free / max(1, int(f.st.tcpLive.Load()))
	if share < int(w) { // in int: a budget past 4 GiB does not fit a uint32
		return uint32(max(share, 0)), share < tcpWndShort, free
	}
	return w, false, free
}

// seg starts a segment from the flow's destination to the sandbox,
// acknowledging everything received so far.
func (f *tcpFlow) seg(flags header.TCPFlags, seq uint32) tcpSegment {
	w, short, free := f.windowLimit()
	if short {
		f.waitMem(free) // a window update once memory is given back
	}
	f.rcvWnd = w >> f.rcvShift << f.rcvShift
	s := tcpSegment{
		v6: f.v6, src: f.src, dst: f.dst, srcPort: f.key.dst.Port(), dstPort: f.key.src.Port(),
		flags: flags, seq: seq, ack: f.rcvNxt, wnd: uint16(f.rcvWnd >> f.rcvShift),
	}
	if f.sndUrg {
		// Every segment before the urgent pointer carries it (RFC 9293
		// 3.8.5), retransmissions included, until it is acknowledged.
		switch {
		case !seqLT(f.sndUna, f.sndUp):
			f.sndUrg = false
		case seqLT(seq, f.sndUp) && f.sndUp-seq <= 0xffff:
			s.flags |= header.TCPFlagUrg
			s.urg = uint16(f.sndUp - seq)
		}
	}
	return s
}

// write sends seg; every segment carries the current ACK, so a delayed
// one is no longer due.
func (f *tcpFlow) write(seg *tcpSegment, payload []byte) {
	f.rcvAcked = f.rcvNxt
	if err := f.st.writeTCP(seg, payload); err != nil {
		// A full or closed device: retransmission covers the first,
		// the flow's end the second.
		f.st.cfg.Logf("userstack: tcp segment to %s: %v", f.key.src, err)
	}
}

func (f *tcpFlow) sendAck() {
	if f.state == tcpDialing || f.state == tcpClosed {
		return
	}
	seg := f.seg(header.TCPFlagAck, f.sndNxt)
	f.write(&seg, nil)
}

func (f *tcpFlow) sendSynAck() {
	seg := f.seg(header.TCPFlagSyn|header.TCPFlagAck, f.iss)
	seg.wnd = uint16(min(f.window(), 0xffff)) // a SYN's window is never scaled
	seg.mss = uint16(f.st.maxSegment(f.v6))
	seg.ws = -1
	if f.rcvShift > 0 {
		seg.ws = int(f.rcvShift)
	}
	f.write(&seg, nil)
}

// sendReset resets the sandbox's side.
func (f *tcpFlow) sendReset() {
	seg := f.seg(header.TCPFlagRst|header.TCPFlagAck, f.sndNxt)
	if f.state == tcpDialing {
		seg.seq = 0
	}
	f.write(&seg, nil)
}

// hostFailed ends the flow after a host socket error: the sandbox gets a
// RST, as it would from the remote end.
func (f *tcpFlow) hostFailed(err error) {
	if f.state == tcpClosed {
		return
	}
	f.st.cfg.Logf("userstack: tcp %s -> %s: host side: %v", f.key.src, f.key.dst, err)
	f.sendReset()
	f.reset = true
	f.state = tcpClosed
}

// hostOpen reports whether the host side is still read: established, and
// no EOF from the host yet.
func (f *tcpFlow) hostOpen() bool { return f.state == tcpEstablished && !f.hostEOF }

// maybeDone ends a flow both sides have closed and acknowledged.
func (f *tcpFlow) maybeDone() {
	if f.state == tcpEstablished && f.finRcvd && f.shutWr && !f.writing &&
		f.finSent && f.sndUna == f.sndNxt && !f.hostOpen() {
		f.state = tcpClosed
	}
}

// Timers. Both run on the event loop and take mu.

func (f *tcpFlow) timerFired(t *loopTimer) {
	if t == &f.ackTimer {
		f.onAckTimer()
		return
	}
	f.onRTO()
}

func (f *tcpFlow) armAck() {
	if f.ackArmed {
		return
	}
	f.ackArmed = true
	f.st.poll.arm(&f.ackTimer, tcpAckDelay)
}

func (f *tcpFlow) onAckTimer() {
	f.mu.Lock()
	defer f.unlock()
	f.ackArmed = false
	if f.rcvAcked != f.rcvNxt {
		f.sendAck()
	}
}

// The retransmission timer is lazy: progress only moves rtoFrom, and the
// timer, once armed, runs out and then looks at what is outstanding.
// Re-arming a timer for every segment cost more than a tenth of the
// relay's CPU per round trip.

// startRTO starts the wait of what is outstanding now.
func (f *tcpFlow) startRTO() {
	f.rtoFrom = time.Now()
	if !f.rtoArmed {
		f.armRTO(f.rto)
	}
}

func (f *tcpFlow) armRTO(d time.Duration) {
	f.st.poll.arm(&f.rtoTimer, d)
	f.rtoArmed = true
}

func (f *tcpFlow) stopRTO() {
	if f.rtoArmed {
		f.st.poll.stop(&f.rtoTimer)
		f.rtoArmed = false
	}
}

// onRTO retransmits everything outstanding, or probes a zero window, and
// gives the flow up after tcpMaxRetries timeouts without progress.
func (f *tcpFlow) onRTO() {
	f.mu.Lock()
	defer f.unlock()
	if !f.rtoArmed {
		return // stopped after it was due
	}
	f.rtoArmed = false
	if f.state == tcpDialing {
		f.dialFailed(errDialTimeout)
		return
	}
	if f.state != tcpSynRcvd && f.state != tcpEstablished {
		return
	}
	probe := f.state == tcpEstablished && f.sndUna == f.sndNxt
	if probe && (f.space() > 0 || !f.hostOpen()) {
		return // nothing outstanding, no window to probe
	}
	if left := f.rto - time.Since(f.rtoFrom); left > 0 {
		f.armRTO(left) // progress since the timer was armed
		return
	}
	f.retries++
	if f.retries > tcpMaxRetries || (f.state == tcpSynRcvd && f.retries > tcpSynRetries) {
		f.st.cfg.Logf("userstack: tcp %s -> %s: the sandbox stopped acknowledging", f.key.src, f.key.dst)
		f.sendReset()
		f.reset = true
		f.state = tcpClosed
		return
	}
	f.rto = min(2*f.rto, tcpRTOMax)
	if probe {
		// Out of window on purpose: the sandbox answers with an ACK that
		// carries its current window.
		seg := f.seg(header.TCPFlagAck, f.sndUna-1)
		f.write(&seg, nil)
	} else {
		f.retransmit(false)
	}
	f.rtoFrom = time.Now()
	f.armRTO(f.rto)
}

// unlock releases mu. Before, a live flow's interest in its host socket is
// brought up to date (every change of state that moves it passes here),
// and a flow that just closed is torn down: timers stopped, host socket
// closed; then its table entry is removed.
func (f *tcpFlow) unlock() {
	if f.state != tcpClosed {
		if err := f.st.poll.set(&f.pollFD, f.interest(), f); err != nil {
			f.hostFailed(err)
		}
	}
	if f.state == tcpClosed && f.fd >= 0 {
		// Also a dial's socket that arrives after the flow closed.
		if f.reset {
			_ = unix.SetsockoptLinger(f.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		}
		f.st.poll.forget(&f.pollFD)
		unix.Close(f.fd)
		f.fd = -1
	}
	if f.state != tcpClosed || f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.st.poll.stop(&f.ackTimer)
	f.stopRTO()
	for i := range f.sent {
		f.st.memGive(f.sent[i].cost)
		f.sent[i].release()
	}
	f.st.memGive(f.pendLen)
	f.sent, f.pend, f.pendLen = nil, nil, 0
	f.endWatch()
	f.mu.Unlock()
	st := f.st
	st.mu.Lock()
	if st.tcp[f.key] == f {
		delete(st.tcp, f.key)
		st.tcpLive.Add(-1)
	}
	if f.opening {
		st.opening--
	}
	st.mu.Unlock()
}

// interest is what the flow waits for on its host socket: the connect's
// end; data while the sandbox's window has room; room while pend waits.
func (f *tcpFlow) interest() uint32 {
	if f.fd < 0 {
		return 0
	}
	var ev uint32
	switch f.state {
	case tcpDialing:
		ev = unix.EPOLLOUT
	case tcpSynRcvd:
		if !f.early {
			ev = unix.EPOLLIN // just to hear of an error: data waits
		}
	case tcpEstablished:
		if f.hostOpen() && f.space() > 0 {
			if f.st.memFree() > 0 {
				ev |= unix.EPOLLIN | unix.EPOLLPRI
			} else {
				f.waitMem(0) // read again once memory is given back
			}
		}
		if f.writing {
			ev |= unix.EPOLLOUT
		}
	}
	return ev
}

// closeTCP ends every flow (the stack is closing); nothing is sent.
func (st *Stack) closeTCP(flows map[flowKey]*tcpFlow) {
	for _, f := range flows {
		f.mu.Lock()
		f.state = tcpClosed
		f.unlock()
	}
}
