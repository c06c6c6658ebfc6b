package userstack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
)

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

// connected takes the outcome of the non-blocking connect, which events
// (the socket's readiness) tells: writable without an error or hang-up is
// connected (a failed connect always reports EPOLLERR: the socket's error
// is set before it is woken), so SO_ERROR is asked only for a failure's
// reason. A connection reset right after it was made is met by the first
// read or write, as on any established flow.
func (f *tcpFlow) connected(events uint32) {
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 || events&unix.EPOLLOUT == 0 {
		n, err := unix.GetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && n != 0 {
			err = syscall.Errno(n)
		}
		if err != nil {
			f.dialFailed(err)
			return
		}
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
		f.endHow = "timeout (dial)"
	case errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.EHOSTDOWN):
		f.st.tcpUnreachable(f, false)
	case errors.Is(err, unix.ENETUNREACH):
		f.st.tcpUnreachable(f, true)
	default:
		f.sendReset()
	}
	if f.endHow == "" {
		f.endHow = "dial failed"
	}
	f.state = tcpClosed
}

// dial opens the host side through the configured Dialer (on a worker:
// it may block), then goes on as connected does. With a gate, it first
// waits for the IPv6 gate (ready6.go) and checks target again against
// the policy then in force (a refusal is a RST, recorded); without a
// Dialer it then connects as the event loop does (connect).
func (f *tcpFlow) dial(target netip.AddrPort, gate <-chan struct{}) {
	st := f.st
	defer st.wg.Done()
	if gate != nil {
		if d := st.afterIPv6Gate(netpolicy.ProtoTCP, target, gate); d.Action != admission.Dial {
			f.refuseDialing(func() { st.record(netpolicy.ProtoTCP, target, d) })
			return
		}
	}
	f.open(target) // Dialer nil: only with a gate (newTCP connects at once otherwise)
}

// open opens the host side of a flow decided on a worker: through the
// Dialer, or with the stack's own connect.
func (f *tcpFlow) open(target netip.AddrPort) {
	if f.st.cfg.Dialer == nil {
		f.connect(target)
		return
	}
	f.dialVia(target)
}

// refuseDialing answers a flow refused on a worker with a RST, if it is
// still dialing and the stack open; record, if set, records the refusal
// then.
func (f *tcpFlow) refuseDialing(record func()) {
	f.mu.Lock()
	defer f.unlock()
	if f.state == tcpDialing && f.st.ctx.Err() == nil {
		if record != nil {
			record()
		}
		f.sendReset()
	}
	if f.endHow == "" {
		f.endHow = "refused"
	}
	f.state = tcpClosed
}

// dialVia dials target through the configured Dialer (on a worker) and
// answers the SYN with what it found.
func (f *tcpFlow) dialVia(target netip.AddrPort) {
	st := f.st
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
	f.iss = seqnum.Value(f.st.cfg.tcpISS())
	f.sndUna, f.sndNxt = f.iss, f.iss.Add(1)
	f.state = tcpSynRcvd
	if f.peek != nil {
		// A flow to a name: nothing of the sandbox's is written to the
		// host before its first bytes are decided (peek.go); pend holds it.
		f.flags |= pendWaiting
	}
	f.sendSynAck()
	f.startRTO()
}

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
		f.connected(events)
		return
	case tcpSynRcvd:
		if events&unix.EPOLLERR != 0 {
			n, _ := unix.GetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_ERROR)
			f.hostFailed(syscall.Errno(n))
			return
		}
		f.flags |= hostSpokeFirst // read once the sandbox completes its handshake
		if events&unix.EPOLLPRI != 0 {
			f.flags |= urgFromHost // and its urgent byte marked then
		}
		return
	}
	if events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 && f.has(pendWaiting) && f.peek == nil {
		f.flush() // not while the first bytes are looked at (peek.go)
	}
	if events&unix.EPOLLPRI != 0 {
		f.flags |= urgFromHost
	}
	if f.hostOpen() && events&(unix.EPOLLIN|unix.EPOLLPRI|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		f.readSome()
	}
}

// toHost writes take bytes of the segment's payload, from skip on, to the
// host socket without waiting; what does not fit is copied to pend and
// written when the socket has room (flush), as far as the relay's memory
// budget allows. It returns how many bytes it took, and false when the
// flow failed.
func (f *tcpFlow) toHost(data [][]byte, skip, take int) (int, bool) {
	var small [4][]byte
	parts := cutSlices(small[:0], data, skip, take)
	if !f.has(pendWaiting) {
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
	f.flags |= pendWaiting
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
	at := int(f.rcvNxt.Size(f.rcvUp - 1))
	f.flags &^= urgFromSandbox
	took, ok := f.toHost(data, skip, at)
	if !ok || took < at || f.has(pendWaiting) {
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

// dropPend lets go of what the sandbox sent that the host socket never
// took: its memory goes back to the budget, and it leaves the bytes
// counted up (FlowEnd.Up is what was written to the host).
func (f *tcpFlow) dropPend() {
	f.st.memGive(f.pendLen)
	f.up -= uint64(f.pendLen)
	f.pend, f.pendLen = nil, 0
	f.flags &^= pendWaiting
}

// refuseFirstBytes ends a flow to a name whose first bytes the stack
// refused (peek.go, peekwatch.go; the block is recorded by the caller):
// nothing held for the host is written, and both sides are reset.
func (f *tcpFlow) refuseFirstBytes() {
	f.dropPend()
	f.sendReset()
	f.flags |= resetHost
	f.endHow = "refused"
	f.state = tcpClosed
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
	f.dropPend() // what a failed host socket will never take
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
	if !f.has(finFromSandbox) || f.has(finToHost) || f.has(pendWaiting) {
		return
	}
	f.flags |= finToHost
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
		grant := f.st.memTakeLeast(tcpReadLeast, tcpPooledCost)
		if grant == 0 {
			f.waitMem(f.st.memFree())
			return // unlock narrows the interest
		}
		if grant < tcpPooledCost {
			room = min(room, copiedMax(grant), tcpCopyBelow-1)
		}
		urgent := false
		if f.has(urgFromHost) {
			// A read stops short of the mark: at it, the first byte
			// read is the urgent one.
			if at, err := unix.IoctlGetInt(f.fd, unix.SIOCATMARK); err == nil && at == 1 {
				urgent = true
				f.flags &^= urgFromHost
			}
		}
		buf := readBuffers.Get().(*[]byte)
		n, err := rawRead(f.fd, (*buf)[:room])
		if urgent && err == nil && n > 0 {
			f.flags |= urgToSandbox
			f.sndUp = f.sndNxt.Add(1)
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
			f.flags |= eofFromHost
			f.sendFin()
			f.maybeDone()
			return
		}
		c := tcpChunk{data: (*buf)[:n], pooled: buf, cost: tcpPooledCost}
		if n < tcpCopyBelow {
			c = tcpChunk{data: append([]byte(nil), (*buf)[:n]...), cost: copiedCost(n)}
			readBuffers.Put(buf)
		}
		f.st.memGive(grant - c.cost)
		f.down += uint64(n)
		f.sendData(c)
		if n < room {
			return
		}
	}
}

// hostFailed ends the flow after a host socket error: the sandbox gets a
// RST, as it would from the remote end.
func (f *tcpFlow) hostFailed(err error) {
	if f.state == tcpClosed {
		return
	}
	f.st.cfg.Logf("userstack: tcp %v: host side: %v", f, err)
	f.sendReset()
	f.flags |= resetHost
	f.state = tcpClosed
	if f.endHow == "" {
		f.endHow = "reset by the host side"
	}
}

// hostOpen reports whether the host side is still read: established, and
// no EOF from the host yet.
func (f *tcpFlow) hostOpen() bool { return f.state == tcpEstablished && !f.has(eofFromHost) }
