package userstack

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
)

// flowKey identifies a TCP flow as the sandbox sees it, and a UDP
// mapping: for a mapping of its own (endpoint-independent, the stack's
// sockets or a PacketListener's) src is the sandbox's socket and dst the
// unspecified address of the host socket's family, port 0; for a Dialer's
// connected conn (no PacketListener) dst is the destination.
type flowKey struct {
	src, dst netip.AddrPort
}

// maxUDPPeers bounds the destinations (and reply sources) one mapping
// remembers. Past it, an arbitrary one is forgotten: its next datagram
// from the sandbox is decided again, and a reply from another port of its
// address is dropped until the sandbox sends there again.
const maxUDPPeers = 1024

// maxUDPPeersTotal bounds the peers all mappings remember together (each
// a few hundred bytes of the launcher's heap: 512 mappings of 1,024 peers
// took 120 MB); past it, a mapping with peers forgets one of its own to
// remember another, as at maxUDPPeers (a mapping's first peer is always
// remembered, so the total stays under this plus the flow cap).
const maxUDPPeersTotal = 32768

// udpPeer is a remote end of a mapping, keyed by its host-side address.
type udpPeer struct {
	sandbox netip.AddrPort // the address the sandbox sees it as (the virtual DNS address for the resolver)
	sent    bool           // the sandbox sent to it (it opens its address for replies, if not local)
	local   bool           // the resolver behind a local address: exact replies only
	denied  bool           // a reply source the policy refuses: dropped
	// gen is the policy generation (netpolicy.Policy.Generation) the
	// peer was decided under. A live policy update does not reach a
	// mapping's traffic by itself (nothing new is decided: UDP has no
	// connection to end, and a mapping in use lives for ever): a peer
	// whose generation is not the policy's is decided again before a
	// datagram goes to it or comes from it (currentLocked).
	gen uint64
}

// udpFlow is one NAT mapping: the host socket that stands for one
// sandbox socket (endpoint-independent mapping: one host port, whatever
// the destination, for the mapping's life), the destinations the sandbox
// sent to through it, and the reply sources learnt.
//
// Filtering is address-dependent: a datagram to the host port reaches
// the sandbox if it comes from a destination the sandbox sent to, or from
// another port of such an address that the policy allows (a TFTP server
// answering from a new port, an EPICS or SNMP agent from another socket).
// Anything else is dropped. The resolver behind the virtual DNS address is
// answered from exactly its own address and port only.
//
// UDP does not go through gVisor's UDP endpoints: a datagram from the
// sandbox is written to the mapping's host socket right on the packet
// path, and a reply is framed here (IP and UDP headers) and written to the
// link. gVisor's endpoint, its receive queue and the goroutine hand-off to
// a reader cost about as much as the rest of a UDP round trip together.
//
// Replies are read on the stack's event loop (pollReady). mu guards fd
// against its close (no I/O reaches a reused descriptor), the peers, and
// the message and address memory the sends use (in the flow, not on the
// stack, so a send allocates nothing).
type udpFlow struct {
	st   *Stack
	key  flowKey
	last atomic.Int64 // UnixNano of the last datagram sent, or reply delivered

	mu        sync.Mutex
	pollFD    // the host socket (fd, -1 once closed) and its registration
	connected bool
	peers     map[netip.AddrPort]udpPeer // by host-side address
	addrs     map[netip.Addr]int32       // sent-to non-local peers per address
	lastDst   netip.AddrPort             // the sandbox's last destination (reports)
	msg       unix.Msghdr
	iov       [8]unix.Iovec
	sa        unix.RawSockaddrInet6 // room for either family's address
	// For Config.OnFlowEnd (flowhook.go): datagrams and payload bytes
	// sent for the sandbox and replies delivered to it; start is set
	// only with OnFlowEnd, before the mapping is filed.
	upN, upB, downN, downB uint64
	start                  time.Time
}

func (f *udpFlow) touch(t time.Time) { f.last.Store(t.UnixNano()) }

// close closes the mapping's host socket; the first close of a mapping
// that was filed reports its end (how: see FlowEnd) to Config.OnFlowEnd
// ("" for one that never was).
func (f *udpFlow) close(how string) {
	f.mu.Lock()
	report := false
	var end FlowEnd
	if f.fd >= 0 {
		f.st.poll.forget(&f.pollFD)
		unix.Close(f.fd)
		f.fd = -1
		f.st.udpPeers.Add(-int64(len(f.peers)))
		clear(f.peers)
		clear(f.addrs)
		if report = how != "" && !f.start.IsZero(); report {
			end = FlowEnd{Proto: netpolicy.ProtoUDP, Src: f.key.src, Dst: f.lastDst,
				Up: f.upB, Down: f.downB, UpPackets: f.upN, DownPackets: f.downN,
				Start: f.start, Duration: f.st.cfg.Now().Sub(f.start), How: how}
		}
	}
	f.mu.Unlock()
	if report {
		f.st.cfg.OnFlowEnd(end)
	}
}

// count adds a datagram of parts to the sent counts (mu held).
func (f *udpFlow) count(parts [][]byte) {
	f.upN++
	for _, b := range parts {
		f.upB += uint64(len(b))
	}
}

// send writes one datagram, in parts, from the sandbox to target (dst as
// the sandbox addressed it) without waiting: a full socket buffer drops
// it, as a congested network would. It reports false, sending nothing,
// when the mapping has not admitted that destination yet (or is closed).
func (f *udpFlow) send(dst, target netip.AddrPort, parts [][]byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd < 0 {
		return false
	}
	p, ok := f.peers[target]
	if !ok || p.denied || !p.sent || p.sandbox != dst || !f.currentLocked(target, p) {
		return false
	}
	f.lastDst = dst
	if f.connected {
		if _, err := rawWritev(f.fd, parts); err == nil {
			f.count(parts)
		}
		return true
	}
	iov := f.iov[:0]
	for _, b := range parts {
		if len(iov) == len(f.iov) {
			return true // never from the stack's own parsing (a few parts at most): dropped
		}
		iov = appendIovec(iov, b)
	}
	a := target.Addr()
	if a.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&f.sa))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], target.Port())
		f.msg.Namelen = unix.SizeofSockaddrInet4
	} else {
		f.sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&f.sa.Port))[:], target.Port())
		f.msg.Namelen = unix.SizeofSockaddrInet6
	}
	f.msg.Name = (*byte)(unsafe.Pointer(&f.sa))
	f.msg.Iov = nil
	f.msg.Iovlen = 0
	if len(iov) > 0 {
		f.msg.Iov = &iov[0]
		f.msg.SetIovlen(len(iov))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(f.fd), uintptr(unsafe.Pointer(&f.msg)), unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); e == 0 {
		f.count(parts)
	}
	return true
}

// admit lets the sandbox send to target (dst as it addressed it) through
// the mapping; the caller has decided the destination under the policy
// generation gen.
func (f *udpFlow) admit(dst, target netip.AddrPort, local bool, gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fd < 0 {
		return // closed (evicted meanwhile): sends nothing, remembers nothing
	}
	old, had := f.peers[target]
	if !had && (len(f.peers) >= maxUDPPeers || (len(f.peers) > 0 && f.st.udpPeers.Load() >= maxUDPPeersTotal)) {
		for k, p := range f.peers {
			f.forgetPeerLocked(k, p)
			break
		}
	}
	if !had {
		f.st.udpPeers.Add(1)
	}
	if had && old.sent && !old.local {
		f.addrs[target.Addr()]--
	}
	f.peers[target] = udpPeer{sandbox: dst, sent: true, local: local, gen: gen}
	if !local {
		f.addrs[target.Addr()]++
	}
	f.lastDst = dst
}

func (f *udpFlow) forgetPeerLocked(k netip.AddrPort, p udpPeer) {
	delete(f.peers, k)
	f.st.udpPeers.Add(-1)
	if p.sent && !p.local {
		if f.addrs[k.Addr()]--; f.addrs[k.Addr()] <= 0 {
			delete(f.addrs, k.Addr())
		}
	}
}

// currentLocked reports whether the peer k (p) still stands under the
// policy in force: decided under its generation, or decided again now.
// One the policy now refuses is forgotten: the sandbox's next datagram to
// it is decided as a new destination (refused, recorded), and its replies
// are dropped, as are those from other ports of its address unless the
// sandbox sent to another of them. A reply source that was decided
// (allowed or denied) is forgotten too, to be decided afresh. The
// resolver and host ports behind local addresses are host configuration,
// not policy. Called with mu.
func (f *udpFlow) currentLocked(k netip.AddrPort, p udpPeer) bool {
	st := f.st
	gen := st.cfg.Policy.Generation()
	if p.gen == gen || p.local {
		return true
	}
	ok := false
	switch {
	case !p.sent:
	case st.names != nil && st.names.InPool(p.sandbox.Addr()):
		// A name's address: decided as admission decides its target.
		ok = st.adm.TargetAllowed(netpolicy.ProtoUDP, k)
	default:
		ok = st.adm.Check(netpolicy.ProtoUDP, k).Action == admission.Dial
	}
	if ok {
		p.gen = gen
		f.peers[k] = p
		return true
	}
	f.forgetPeerLocked(k, p)
	return false
}

// connectedCurrentLocked is currentLocked for a connected mapping's peer
// (one, or another target of the same name since): false once none is
// left. Called with mu.
func (f *udpFlow) connectedCurrentLocked() bool {
	ok := false
	for k, p := range f.peers {
		if p.sent && !p.denied && f.currentLocked(k, p) {
			ok = true
		}
	}
	return ok
}

// replySource decides a datagram from the host-side address from: the
// address the sandbox sees it from, or false to drop it. Called with mu.
func (f *udpFlow) replySourceLocked(from netip.AddrPort) (netip.AddrPort, bool) {
	if p, ok := f.peers[from]; ok && f.currentLocked(from, p) {
		return p.sandbox, !p.denied
	}
	if f.addrs[from.Addr()] <= 0 {
		return netip.AddrPort{}, false // an address the sandbox never sent to
	}
	// Another port of an address the sandbox sent to: the policy decides
	// it as it would a datagram from the sandbox to it, once.
	gen := f.st.cfg.Policy.Generation()
	d := f.st.adm.Check(netpolicy.ProtoUDP, from)
	allowed := d.Action == admission.Dial
	if len(f.peers) >= maxUDPPeers || f.st.udpPeers.Load() >= maxUDPPeersTotal {
		return from, allowed // not remembered: decided again next time
	}
	f.peers[from] = udpPeer{sandbox: from, denied: !allowed, gen: gen}
	f.st.udpPeers.Add(1)
	if !allowed {
		f.st.cfg.Logf("userstack: udp reply from %s to %s dropped (%s)", from, f.key.src, d.Rule)
	}
	return from, allowed
}

// pollReady frames a datagram the host side received as a reply to the
// sandbox's socket, if the mapping's filter lets it through. A socket
// error the read does not clear ends the flow. One datagram a turn: the
// socket stays readable while more wait.
func (f *udpFlow) pollReady(events uint32) {
	st := f.st
	// A read buffer of the TCP relay's pool (sized for a datagram too),
	// not one of UDP's own held for the stack's life once a reply came:
	// a sandbox that uses both (DNS and TCP, most) holds one 64 KiB
	// buffer fewer.
	bp := readBuffers.Get().(*[]byte)
	defer readBuffers.Put(bp)
	buf := *bp
	f.mu.Lock()
	n, err := -1, error(unix.EBADF)
	var from netip.AddrPort
	ok := false
	switch {
	case f.fd < 0:
	case f.connected:
		n, err = rawRead(f.fd, buf[udpHeadroom:])
		from, ok = f.key.dst, f.connectedCurrentLocked() // the destination as the sandbox addressed it
	default:
		st.udpFromLen = unix.SizeofSockaddrAny
		var e syscall.Errno
		var r uintptr
		r, _, e = unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(f.fd), uintptr(unsafe.Pointer(&buf[udpHeadroom])), uintptr(len(buf)-udpHeadroom),
			unix.MSG_DONTWAIT, uintptr(unsafe.Pointer(&st.udpFrom)), uintptr(unsafe.Pointer(&st.udpFromLen)))
		if e != 0 {
			err = e
			break
		}
		n, err = int(r), nil
		if src, valid := sockaddrAddrPort(&st.udpFrom); valid {
			from, ok = f.replySourceLocked(src)
		}
	}
	if ok && err == nil {
		f.downN++
		f.downB += uint64(n)
	}
	f.mu.Unlock()
	switch {
	case (err == unix.EAGAIN || err == unix.EINTR) && events&unix.EPOLLERR != 0:
		// An error the read does not clear (one queued on a socket with
		// IP_RECVERR, which a Dialer may set) would be reported on every
		// turn: end the flow, as any error does; the next datagram
		// opens a new one.
		st.dropFlow(f.key, f, "error")
		return
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil:
		if f.connected {
			st.dropFlow(f.key, f, "error")
		}
		// An unconnected socket reports no peer's ICMP error; anything
		// else is not the mapping's end.
		return
	case !ok:
		return // filtered: not a reply the sandbox asked for
	}
	f.touch(st.cfg.Now())
	if err := st.writeUDP(buf, n, from, f.key.src); err != nil {
		st.cfg.Logf("userstack: udp reply to %s: %s", f.key.src, err)
	}
}

// sockaddrAddrPort reads an IPv4 or IPv6 socket address without
// allocating.
func sockaddrAddrPort(rsa *unix.RawSockaddrAny) (netip.AddrPort, bool) {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), true
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		a := netip.AddrFrom16(sa.Addr)
		if a.Is4In6() {
			return netip.AddrPort{}, false // a v6-only socket gets none
		}
		return netip.AddrPortFrom(a, port), true
	}
	return netip.AddrPort{}, false
}

// udpRoute returns where a datagram from the sandbox to dst, a
// destination its mapping admitted, goes on the host (admission's Route:
// a name's translation, the resolver or a host port for a local address)
// and its mapping's key; false when there is none.
func (st *Stack) udpRoute(key flowKey) (target netip.AddrPort, mk flowKey, ok bool) {
	target, _, ok = st.adm.Route(netpolicy.ProtoUDP, key.dst)
	if !ok {
		return netip.AddrPort{}, flowKey{}, false
	}
	return target, st.udpKey(key, target), true
}

// udpKey is the key of the mapping a datagram of key to target goes
// through: the sandbox socket's one per family (endpoint-independent), or
// key itself for a Dialer's connected conns.
func (st *Stack) udpKey(key flowKey, target netip.AddrPort) flowKey {
	if !st.eimUDP {
		return key
	}
	family := netip.IPv4Unspecified()
	if target.Addr().Is6() {
		family = netip.IPv6Unspecified()
	}
	return flowKey{src: key.src, dst: netip.AddrPortFrom(family, 0)}
}

// udpInput sends a datagram to a destination its mapping already admits
// at once and reports true; otherwise it reports false (the TUN's fast
// path then leaves the datagram to gVisor's path, handleUDP, which
// decides the destination).
func (st *Stack) udpInput(key flowKey, data [][]byte) bool {
	target, mk, ok := st.udpRoute(key)
	if !ok {
		return false
	}
	st.mu.Lock()
	f := st.flows[mk]
	st.mu.Unlock()
	if f == nil || !f.send(key.dst, target, data) {
		return false
	}
	f.touch(st.cfg.Now())
	return true
}

// handleUDP handles every UDP datagram from the sandbox that the TUN's
// fast path does not (and all of them on other links). Returning false
// makes gVisor answer with ICMP port unreachable.
func (st *Stack) handleUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	src := netip.AddrPortFrom(toAddr(id.RemoteAddress), id.RemotePort)
	key := flowKey{src: src, dst: dst}
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return true // drop: closing
	}
	var small [4][]byte
	data := payloadSlices(small[:0], pkt, pkt.Data().Size())
	if st.names != nil && dst.Port() == netpolicy.DNSPort && st.adm.IsLocal(dst.Addr()) {
		st.names.ServeUDP(src, dst, data) // the stack's own resolver (package names)
		return true
	}
	return st.sendUDP(key, data)
}

// sendUDP sends a datagram from the sandbox through its mapping, deciding
// a new destination first; false: refused (handleUDP's ICMP port
// unreachable). Also called off the packet loop, for a datagram held for
// the IPv6 gate (ready6.go).
func (st *Stack) sendUDP(key flowKey, data [][]byte) bool {
	if st.udpInput(key, data) {
		return true
	}
	f, target, gate, ok := st.newUDPFlow(key)
	switch {
	case !ok:
		return false
	case gate != nil:
		st.holdUDP(key, data, gate) // decided again once the gate opens
		return true
	case f == nil:
		return true // the dial failed after the policy allowed it: dropped
	}
	if f.send(key.dst, target, data) {
		f.touch(st.cfg.Now())
	}
	return true
}

// newUDPFlow decides a new destination of a sandbox socket and returns
// the mapping that now admits it (made, with its host socket, if the
// socket had none) and the host-side target. It reports false for a
// refused destination (recorded as a Block) or a failed dial: the sandbox
// then gets ICMP port unreachable. A nil flow with true means the
// datagram is dropped (closing, or a conn without a descriptor). A
// non-nil gate means the destination is an allowed IPv6 one that waits
// for the IPv6 gate (ready6.go): nothing was made, the datagram is held.
func (st *Stack) newUDPFlow(key flowKey) (*udpFlow, netip.AddrPort, <-chan struct{}, bool) {
	gen := st.cfg.Policy.Generation()                       // before the decision: a change meanwhile is decided again
	d := st.adm.Admit(netpolicy.ProtoUDP, key.src, key.dst) // package admission
	if d.Action == admission.Ask {
		// Approved, a gateway port becomes a host port (for a UDP port,
		// once is the session too: see the jail's approve).
		switch st.askUDP(key.src, key.dst, d.Name, d.HostPort, d.Rule) {
		case ask.Hold:
			return nil, netip.AddrPort{}, nil, true // dropped: the sandbox sends again
		case ask.Refuse:
			return nil, netip.AddrPort{}, nil, false
		}
		d = st.adm.Approved(netpolicy.ProtoUDP, key.src, key.dst, d)
	}
	switch d.Action {
	case admission.Refuse:
		st.record(netpolicy.ProtoUDP, key.dst, d)
		return nil, netip.AddrPort{}, nil, false
	case admission.Resolve:
		return nil, netip.AddrPort{}, nil, true // resolving: dropped
	case admission.Wait:
		return nil, netip.AddrPort{}, d.Gate, true
	case admission.LocalDNS:
		if !d.Target.IsValid() {
			return nil, netip.AddrPort{}, nil, true // the stack's own resolver: handleUDP's
		}
	}
	target, mk := d.Target, st.udpKey(key, d.Target)
	local := d.Action == admission.LocalDNS || d.Action == admission.HostPort
	rule := d.Rule // an address's: the policy's rule (for OnFlow)
	st.mu.Lock()
	f := st.flows[mk]
	st.mu.Unlock()
	if f != nil {
		f.admit(key.dst, target, local, gen)
		st.noteUDP(key.src, key.dst, target, local, rule)
		return f, target, nil, true
	}
	st.evict(st.makeRoom(1))
	fd, connected, err := st.openUDP(target)
	if err != nil {
		st.cfg.Logf("userstack: open udp to %s: %v", target, err)
		// A conn without a descriptor breaks the Dialer's contract: drop
		// the datagram rather than report the destination unreachable.
		return nil, target, nil, err == errNoDescriptor
	}
	f = &udpFlow{st: st, key: mk, pollFD: pollFD{fd: fd}, connected: connected,
		peers: map[netip.AddrPort]udpPeer{}, addrs: map[netip.Addr]int32{}}
	if st.cfg.OnFlowEnd != nil {
		f.start = st.cfg.Now()
	}
	f.admit(key.dst, target, local, gen)
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		f.close("")
		return nil, target, nil, true
	}
	if old := st.flows[mk]; old != nil {
		// Another datagram of the socket won the race: use its entry.
		st.mu.Unlock()
		f.close("")
		old.admit(key.dst, target, local, gen)
		st.noteUDP(key.src, key.dst, target, local, rule)
		return old, target, nil, true
	}
	// Room again: another flow may have come in while this one dialed.
	victims := st.makeRoomLocked(1)
	// Touched before it is visible, or the janitor could expire it before
	// its first datagram.
	f.touch(st.cfg.Now())
	st.flows[mk] = f
	st.mu.Unlock()
	st.evict(victims)
	st.noteUDP(key.src, key.dst, target, local, rule)
	f.mu.Lock()
	if f.fd >= 0 {
		if err := st.poll.set(&f.pollFD, unix.EPOLLIN, f); err != nil {
			f.mu.Unlock()
			st.cfg.Logf("userstack: udp %s: %v", target, err)
			st.dropFlow(mk, f, "error")
			return nil, target, nil, true
		}
	}
	f.mu.Unlock()
	return f, target, nil, true
}

// PacketListener is what a Dialer implements to give UDP mappings their
// host sockets itself (net.ListenConfig has the method): network is
// "udp4" or "udp6", address ":0". Its conns must implement syscall.Conn
// (a *net.UDPConn does). A Dialer without it gets a connected conn per
// sandbox socket and destination (DialContext "udp"): a host port per
// destination, and replies from that destination's address and port only.
type PacketListener interface {
	ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error)
}

// openUDP opens the host socket of a new mapping: an unconnected socket of
// target's family (the stack's own or a PacketListener's), whose first
// send binds it to one ephemeral port for its life; or, for a Dialer that
// is no PacketListener, a conn connected to target.
func (st *Stack) openUDP(target netip.AddrPort) (fd int, connected bool, err error) {
	v6 := target.Addr().Is6()
	if st.cfg.Dialer == nil {
		family := unix.AF_INET
		if v6 {
			family = unix.AF_INET6
		}
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, false, err
		}
		var sa unix.Sockaddr = &unix.SockaddrInet4{}
		if v6 {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
			sa = &unix.SockaddrInet6{}
		}
		// Take the host port now: when the host has none left, the
		// open fails here and the sandbox gets ICMP port unreachable at
		// once, as a connect of its own would fail, instead of every
		// datagram vanishing at sendto's implicit bind.
		if err := unix.Bind(fd, sa); err != nil {
			unix.Close(fd)
			return -1, false, err
		}
		return fd, false, nil
	}
	if pl, ok := st.cfg.Dialer.(PacketListener); ok {
		network := "udp4"
		if v6 {
			network = "udp6"
		}
		ctx, cancel := context.WithTimeout(st.ctx, st.cfg.DialTimeout)
		defer cancel()
		pc, err := pl.ListenPacket(ctx, network, ":0")
		if err != nil {
			return -1, false, err
		}
		defer pc.Close()
		sc, ok := pc.(syscall.Conn)
		if !ok {
			return -1, false, errNoDescriptor
		}
		fd, err := dupFD(sc)
		return fd, false, err
	}
	fd, err = st.dialConn("udp", target)
	return fd, true, err
}

// udpHeadroom is the room pollReady leaves for the IPv6 and UDP headers.
const udpHeadroom = header.IPv6MinimumSize + header.UDPMinimumSize

// writeUDP writes the n payload bytes at buf[udpHeadroom:] to the sandbox
// as a datagram from src to dst, framing it in the headroom.
func (st *Stack) writeUDP(buf []byte, n int, src, dst netip.AddrPort) error {
	payload := buf[udpHeadroom : udpHeadroom+n]
	udpLen := header.UDPMinimumSize + n
	v6 := src.Addr().Is6()
	ipLen := ipHeaderLen(v6)
	pktBytes := buf[udpHeadroom-header.UDPMinimumSize-ipLen : udpHeadroom+n]
	s, d := tcpAddr(src.Addr()), tcpAddr(dst.Addr())
	u := header.UDP(pktBytes[ipLen:])
	u.Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(udpLen)})
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, s, d, uint16(udpLen))
	xsum = checksum.Checksum(payload, xsum)
	// A sum that comes out as 0 is sent as 0xffff: 0 means "no checksum",
	// which IPv6 does not allow.
	if c := ^u.CalculateChecksum(xsum); c != 0 {
		u.SetChecksum(c)
	} else {
		u.SetChecksum(0xffff)
	}
	return st.writeIP(pktBytes, v6, header.UDPProtocolNumber, s, d)
}

// The UDP flow cap. Each mapping holds a host socket bound to an
// ephemeral port of its own, so a sandbox
// opening flows without end would take every ephemeral port of the host
// (issue 12). At MaxUDPFlows, a new flow evicts the least recently used
// one: its host socket closes, and a later datagram of it makes a new
// flow from a new host port. The victim is found by a scan when the table
// is full, not kept in an LRU list, so that a datagram of a known flow
// costs what it did (one atomic store of its time) and only a new flow
// over the cap pays (a few microseconds for the default cap).

// makeRoom takes the least recently used flows out of the table until n
// new ones fit under the cap, and returns them (to evict, outside st.mu).
func (st *Stack) makeRoom(n int) []*udpFlow {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.makeRoomLocked(n)
}

func (st *Stack) makeRoomLocked(n int) []*udpFlow {
	var victims []*udpFlow
	for len(st.flows) > 0 && len(st.flows)+n > st.cfg.MaxUDPFlows {
		var lru *udpFlow
		for _, f := range st.flows {
			if lru == nil || f.last.Load() < lru.last.Load() {
				lru = f
			}
		}
		delete(st.flows, lru.key)
		victims = append(victims, lru)
	}
	return victims
}

// evict closes flows makeRoom took out and reports each.
func (st *Stack) evict(victims []*udpFlow) {
	for _, f := range victims {
		f.close("evicted")
		f.mu.Lock()
		dst := f.lastDst
		f.mu.Unlock()
		rule := fmt.Sprintf("udp flow cap %d: least recently used flow from %s evicted", st.cfg.MaxUDPFlows, f.key.src)
		st.cfg.Logf("userstack: udp %s -> %s evicted (flow cap %d)", f.key.src, dst, st.cfg.MaxUDPFlows)
		st.recordEvict(netpolicy.Block{Proto: netpolicy.ProtoUDP, Dst: dst, Rule: rule})
	}
}

func (st *Stack) dropFlow(key flowKey, f *udpFlow, how string) {
	f.close(how)
	st.mu.Lock()
	if st.flows[key] == f {
		delete(st.flows, key)
	}
	st.mu.Unlock()
}

// ExpireIdle closes every UDP flow idle for at least the idle timeout and
// returns how many it closed. The janitor calls it periodically; tests
// call it after moving their clock.
func (st *Stack) ExpireIdle() int {
	now := st.cfg.Now().UnixNano()
	var idle []*udpFlow
	st.mu.Lock()
	for k, f := range st.flows {
		if now-f.last.Load() >= int64(st.cfg.UDPIdleTimeout) {
			idle = append(idle, f)
			delete(st.flows, k)
		}
	}
	st.mu.Unlock()
	for _, f := range idle {
		f.close("idle")
	}
	return len(idle)
}

// UDPFlows returns how many UDP NAT entries are live.
func (st *Stack) UDPFlows() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.flows)
}

func (st *Stack) janitor() {
	defer st.wg.Done()
	every := st.cfg.UDPIdleTimeout / 4
	if every < 100*time.Millisecond {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-t.C:
			st.ExpireIdle()
		}
	}
}
