package userstack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TUN is a stack.LinkEndpoint on a TUN device opened with IFF_TUN and
// IFF_NO_PI (raw IP packets, no header). It is read on the stack's event
// loop (poller), and each packet is delivered to the stack right there.
// gVisor's fdbased endpoint instead waits in a blocking poll and hands each
// packet to a processor goroutine: two wake-ups where this has one, which
// is most of a request/response round trip on this path.
//
// With a virtio-net header (a TUN opened with IFF_VNET_HDR and offloads
// on), the TCP relay's segments leave their checksum to the kernel (the
// header carries the pseudo-header sum and a NEEDS_CSUM flag); what gVisor
// writes (ICMP) goes with an empty virtio-net header. On the way in, the
// kernel's partially checksummed and TSO super-packets are taken as they
// are.
type TUN struct {
	// fd is the device (non-blocking), -1 once closed. rw guards it: I/O
	// holds it shared, Close exclusively, so no read or write can reach a
	// descriptor number reused after the close.
	rw      sync.RWMutex
	fd      int
	mtu     atomic.Uint32
	vnet    int // virtio-net header length, 0 without one
	onError func(error)

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	onClose    func()
	poll       *poller // set by the stack before it attaches
	pfd        pollFD  // under mu
	rx         *tunRx  // the reader's buffers; the loop's only

	closed atomic.Bool
	bad    error // why the endpoint cannot start (NewTUN), reported at Attach

	// Set by the stack before it attaches: tcp takes ordinary TCP
	// segments straight from the reader, udp ordinary datagrams of
	// flows it knows (reporting false for the others). See fastIP.
	tcp func(*tcpIn)
	udp func(flowKey, [][]byte) bool
	// toStack, when set, names destinations whose packets go through
	// gVisor even when ordinary: replies to the stack's own connections
	// into the sandbox (publish.go).
	toStack func(netip.Addr) bool
}

// NewTUN returns an endpoint on the TUN device f. vnetHdrLen is the virtio-net header
// length the device was set up with (0: none; at most 16). onError, if
// set, hears a read error that was not caused by Close (the device went
// away), and the reason the endpoint cannot start (a bad header length,
// or f unusable).
//
// The endpoint keeps a non-blocking duplicate of f's descriptor, which
// Go's netpoller does not watch (the stack's event loop does); f stays the
// caller's, to close when it likes.
func NewTUN(f *os.File, mtu uint32, vnetHdrLen int, onError func(error)) *TUN {
	t := &TUN{fd: -1, vnet: vnetHdrLen, onError: onError}
	t.mtu.Store(mtu)
	fd, err := dupFD(f)
	switch {
	case err != nil:
		t.bad = fmt.Errorf("the egress TUN device: %w", err)
	case vnetHdrLen < 0 || vnetHdrLen > vnetHdrMax:
		unix.Close(fd)
		t.bad = fmt.Errorf("the egress TUN device: virtio-net header length %d, want 0 to %d", vnetHdrLen, vnetHdrMax)
		t.vnet = 0
	default:
		t.fd = fd
	}
	return t
}

// dupFD returns a non-blocking duplicate of c's descriptor, which Go's
// netpoller does not watch. The duplicate shares the open file (and so
// sets its O_NONBLOCK).
func dupFD(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(d uintptr) { fd, derr = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// MTU implements stack.LinkEndpoint.
func (t *TUN) MTU() uint32 { return t.mtu.Load() }

// SetMTU implements stack.LinkEndpoint.
func (t *TUN) SetMTU(mtu uint32) { t.mtu.Store(mtu) }

// MaxHeaderLength implements stack.LinkEndpoint: IP packets, no link header.
func (*TUN) MaxHeaderLength() uint16 { return 0 }

// LinkAddress implements stack.LinkEndpoint: a TUN has none.
func (*TUN) LinkAddress() tcpip.LinkAddress { return "" }

// SetLinkAddress implements stack.LinkEndpoint.
func (*TUN) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint. The kernel hands the TUN
// packets it built itself, whose checksums need no second check.
func (*TUN) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload
}

// Attach implements stack.LinkEndpoint: the first attach starts reading
// (on the event loop of the stack the endpoint belongs to).
func (t *TUN) Attach(d stack.NetworkDispatcher) {
	t.mu.Lock()
	start := t.dispatcher == nil && d != nil && !t.closed.Load()
	t.dispatcher = d
	var err error
	switch {
	case !start:
	case t.poll == nil:
		err = errors.New("a TUN endpoint of the egress stack runs only under its New")
	case t.bad != nil:
		err = t.bad
	case t.fd < 0:
		err = os.ErrClosed
	default:
		t.rx = &tunRx{}
		t.pfd.fd = t.fd
		err = t.poll.set(&t.pfd, unix.EPOLLIN, t)
	}
	t.mu.Unlock()
	if err != nil {
		t.readFailed(err)
	}
}

// IsAttached implements stack.LinkEndpoint.
func (t *TUN) IsAttached() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.dispatcher != nil
}

// Wait implements stack.LinkEndpoint. Nothing to wait for: the reads run
// on the stack's event loop, which its Close waits for.
func (t *TUN) Wait() {}

// ARPHardwareType implements stack.LinkEndpoint.
func (*TUN) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }

// AddHeader implements stack.LinkEndpoint: there is no link header.
func (*TUN) AddHeader(*stack.PacketBuffer) {}

// ParseHeader implements stack.LinkEndpoint.
func (*TUN) ParseHeader(*stack.PacketBuffer) bool { return true }

// SetOnCloseAction implements stack.LinkEndpoint.
func (t *TUN) SetOnCloseAction(f func()) {
	t.mu.Lock()
	t.onClose = f
	t.mu.Unlock()
}

// Close implements stack.LinkEndpoint: it stops reading and closes the
// descriptor.
func (t *TUN) Close() {
	if !t.closed.CompareAndSwap(false, true) {
		return
	}
	t.mu.Lock()
	if t.poll != nil {
		t.poll.forget(&t.pfd)
	}
	f := t.onClose
	t.mu.Unlock()
	t.rw.Lock()
	if t.fd >= 0 {
		unix.Close(t.fd)
		t.fd = -1
	}
	t.rw.Unlock()
	if f != nil {
		f()
	}
}

// vnetNeedsCsum is the virtio-net header flag asking the kernel to
// complete a checksum (linux/virtio_net.h).
const vnetNeedsCsum = 1

// WritePackets implements stack.LinkWriter: one writev a packet, straight
// from the packet's own views (no copy into one buffer).
func (t *TUN) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	for _, pkt := range pkts.AsSlice() {
		if err := t.writePacket(pkt); err != nil {
			if n == 0 {
				return 0, &tcpip.ErrClosedForSend{}
			}
			break
		}
		n++
	}
	return n, nil
}

// writePacket writes the virtio-net header (if any) and the packet as one
// datagram, straight from the packet's views.
func (t *TUN) writePacket(pkt *stack.PacketBuffer) error {
	w := writers.Get().(*tunWrite)
	defer writers.Put(w)
	iov := w.iov[:0]
	if t.vnet > 0 {
		clear(w.vnet[:t.vnet]) // nothing for the kernel to do
		iov = appendIovec(iov, w.vnet[:t.vnet])
	}
	views, skip := pkt.AsViewList()
	for v := views.Front(); v != nil; v = v.Next() {
		b := v.AsSlice()
		if skip >= len(b) {
			skip -= len(b)
			continue
		}
		iov = appendIovec(iov, b[skip:])
		skip = 0
	}
	return t.writev(w, iov)
}

// writeFramed writes a packet the stack framed itself: hdr (the IP header
// and the transport header at l4At) and payload, in one writev. With
// partial (TCP only), the TCP checksum field holds the pseudo-header sum
// and the kernel completes it (a virtio-net NEEDS_CSUM header).
//
// w, if not nil, is the caller's pooled write state (hdr may live in it).
func (t *TUN) writeFramed(w *tunWrite, hdr []byte, l4At int, payload []byte, partial bool) error {
	if w == nil {
		w = writers.Get().(*tunWrite)
		defer writers.Put(w)
	}
	iov := w.iov[:0]
	if t.vnet > 0 {
		v := w.vnet[:t.vnet]
		clear(v)
		if partial { // little-endian fields of struct virtio_net_hdr
			v[0] = vnetNeedsCsum
			binary.LittleEndian.PutUint16(v[2:], uint16(len(hdr)))
			binary.LittleEndian.PutUint16(v[6:], uint16(l4At))
			binary.LittleEndian.PutUint16(v[8:], header.TCPChecksumOffset)
		}
		iov = appendIovec(iov, v)
	}
	iov = appendIovec(iov, hdr)
	iov = appendIovec(iov, payload)
	return t.writev(w, iov)
}

func appendIovec(iov []unix.Iovec, b []byte) []unix.Iovec {
	if len(b) == 0 {
		return iov
	}
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return append(iov, v)
}

// tunWrite is one write's memory (its iovecs, a virtio-net header),
// pooled: built on the stack, they escaped to the heap, a few hundred
// bytes per packet.
type tunWrite struct {
	iov  [8]unix.Iovec
	vnet [vnetHdrMax]byte
	hdr  [header.IPv6MinimumSize + header.TCPMinimumSize + synOptionsLen]byte // a segment's headers (writeTCP)
}

var writers = sync.Pool{New: func() any { return &tunWrite{} }}

// tunFullWait bounds how long a write waits for room in a full device
// queue (a TUN device's never fills; a test's socket pair can) before the
// packet is dropped. The wait holds up the event loop, every flow with it:
// short.
const tunFullWait = 10 * time.Millisecond

// writev writes iov (in w's memory) as one datagram.
func (t *TUN) writev(w *tunWrite, iov []unix.Iovec) error {
	defer clear(iov) // hold on to no packet
	if len(iov) == 0 {
		return nil
	}
	t.rw.RLock()
	defer t.rw.RUnlock()
	if t.fd < 0 {
		return os.ErrClosed
	}
	_, err := rawWriteIovec(t.fd, iov)
	if err == unix.EAGAIN || err == unix.EINTR {
		pfd := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLOUT}}
		if _, perr := unix.Poll(pfd, int(tunFullWait/time.Millisecond)); perr == nil {
			_, err = rawWriteIovec(t.fd, iov)
		}
	}
	return err
}

// Inbound packets are read with readv into a small header buffer and a
// large pooled view. The split matters to gVisor: its IPv4 and IPv6
// receive paths take a second reference to the network header's view and
// then ask for the header again, which copies the whole chunk holding it
// (a 64 KiB copy and clear per super-packet when the packet sits in one
// chunk). With the headers in their own small chunk only that is copied.
const (
	// rxHeadLen holds the IP and TCP headers of any packet without IPv6
	// extension headers (IPv4 60 + TCP 60 at most).
	rxHeadLen = 128
	// rxBodyCap is the pooled view for the rest: with rxHeadLen it holds
	// the largest IP packet (65535 bytes).
	rxBodyCap = buffer.MaxChunkSize
	// rxCopyBelow: a body shorter than this is copied into a chunk of its
	// own size, so small segments waiting in a receive queue do not pin
	// 64 KiB each; the large view is then kept for the next read.
	rxCopyBelow = 16 << 10
	vnetHdrMax  = 16
)

// tunRx is the reader's state, kept between turns of the loop.
type tunRx struct {
	vnet   [vnetHdrMax]byte
	head   [rxHeadLen]byte
	body   *buffer.View
	in     tcpIn
	inData [2][]byte
	iov    [3][]byte
}

// tunBurst bounds the packets one turn of the loop reads, so that host
// sockets get their turn under a flood from the sandbox.
const tunBurst = 64

// pollReady reads what the device has: a burst of large packets (bulk
// data), or up to the first small one, after which the loop's next
// epoll_wait says whether there is more (a read that finds the queue
// empty costs as much as that wait).
func (t *TUN) pollReady(uint32) {
	rx := t.rx
	for i := 0; i < tunBurst; i++ {
		if rx.body == nil {
			rx.body = buffer.NewViewSize(rxBodyCap)
		}
		rx.iov = [3][]byte{rx.vnet[:t.vnet], rx.head[:], rx.body.AsSlice()}
		if t.vnet == 0 {
			rx.iov[0] = nil
		}
		t.rw.RLock()
		n, err := -1, error(os.ErrClosed)
		if t.fd >= 0 {
			n, err = rawReadv(t.fd, rx.iov[:])
		}
		t.rw.RUnlock()
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return
		case err == nil && n == 0:
			err = io.EOF // a TUN never reads empty; a closed socket pair does
			fallthrough
		case err != nil:
			// The device went away: stop watching it (level-triggered,
			// an error would be reported on every turn).
			t.mu.Lock()
			t.poll.forget(&t.pfd)
			t.mu.Unlock()
			t.readFailed(err)
			return
		}
		n -= t.vnet
		if n <= 0 || n >= rxHeadLen+rxBodyCap {
			continue // runt, or possibly truncated: drop
		}
		t.deliver(rx, n)
		if n < rxSmall {
			return
		}
	}
}

// rxSmall: a packet shorter than this ends a burst (see pollReady).
const rxSmall = 1500

// deliver hands the n-byte packet in rx to the fast path or to gVisor.
func (t *TUN) deliver(rx *tunRx, n int) {
	head := rx.head[:min(n, rxHeadLen)]
	in := &rx.in
	in.data = rx.inData[:0]
	if t.tcp != nil && fastTCP(in, head, rx.body.AsSlice(), n) && (t.toStack == nil || !t.toStack(in.key.dst.Addr())) {
		t.tcp(in)
		return
	}
	if t.udp != nil {
		if key, data, ok := fastUDP(rx.inData[:0], head, rx.body.AsSlice(), n); ok && (t.toStack == nil || !t.toStack(key.dst.Addr())) && t.udp(key, data) {
			return
		}
	}
	var proto tcpip.NetworkProtocolNumber
	switch header.IPVersion(head) {
	case header.IPv4Version:
		proto = header.IPv4ProtocolNumber
	case header.IPv6Version:
		proto = header.IPv6ProtocolNumber
	default:
		return
	}
	// A TSO super-packet or a partial checksum is taken as it is:
	// gVisor accepts large segments, and skips the checksum check
	// (CapabilityRXChecksumOffload).
	payload := buffer.MakeWithData(head)
	if rest := n - rxHeadLen; rest > 0 {
		if rest < rxCopyBelow {
			payload.Append(buffer.NewViewWithData(rx.body.AsSlice()[:rest]))
		} else {
			rx.body.CapLength(rest)
			payload.Append(rx.body)
			rx.body = nil
		}
	}
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: payload})
	t.mu.RLock()
	d := t.dispatcher
	t.mu.RUnlock()
	if d != nil {
		d.DeliverNetworkPacket(proto, pkt)
	}
	pkt.DecRef()
}

// The fast path: ordinary TCP segments and UDP datagrams of known flows
// go from the reader straight to the relay. Ordinary: unicast addresses
// that are not loopback, link-local or IPv4-mapped, no IPv4 fragment, no
// IPv6 extension header. Everything else goes through gVisor's IP layer,
// which reassembles, validates and drops what a non-loopback link must
// not carry, and then to the same relay (its transport handlers): the
// packet itself is not trusted any further either way. What this skips
// for the common case is gVisor's receive path (route and address
// lookups, packet buffer bookkeeping): a fifth of the proxy's CPU in a
// request/response round trip. Checksums are not verified on either path:
// the sandbox's kernel made these packets.

// fastIP parses the IP header of an ordinary packet read into head (n
// bytes in all, head holding the first of them).
func fastIP(head []byte, n int) (v6 bool, proto uint8, ipLen, total int, src, dst netip.Addr, ok bool) {
	switch header.IPVersion(head) {
	case header.IPv4Version:
		if len(head) < header.IPv4MinimumSize {
			return
		}
		ip := header.IPv4(head)
		if ip.More() || ip.FragmentOffset() != 0 {
			return
		}
		proto, ipLen, total = ip.Protocol(), int(ip.HeaderLength()), int(ip.TotalLength())
		src, dst = netip.AddrFrom4([4]byte(head[12:16])), netip.AddrFrom4([4]byte(head[16:20]))
	case header.IPv6Version:
		if len(head) < header.IPv6MinimumSize {
			return
		}
		v6 = true
		proto, ipLen, total = header.IPv6(head).NextHeader(), header.IPv6MinimumSize, header.IPv6MinimumSize+int(header.IPv6(head).PayloadLength())
		src, dst = netip.AddrFrom16([16]byte(head[8:24])), netip.AddrFrom16([16]byte(head[24:40]))
	default:
		return
	}
	ok = ipLen >= header.IPv4MinimumSize && ipLen <= total && total <= n && ordinary(src) && ordinary(dst)
	return
}

// appendPayload appends the slices holding bytes [from, total) of a packet
// read into head and body.
func appendPayload(dst [][]byte, head, body []byte, from, total int) [][]byte {
	return cutSlices(dst, [][]byte{head, body}, from, total-from)
}

// fastTCP parses an ordinary TCP segment into in, and reports whether it
// did.
func fastTCP(in *tcpIn, head, body []byte, n int) bool {
	v6, proto, ipLen, total, src, dst, ok := fastIP(head, n)
	if !ok || proto != uint8(header.TCPProtocolNumber) || ipLen+header.TCPMinimumSize > min(total, len(head)) {
		return false
	}
	h := header.TCP(head[ipLen:])
	tcpLen := int(h.DataOffset())
	if tcpLen < header.TCPMinimumSize || ipLen+tcpLen > min(total, len(head)) {
		return false
	}
	in.v6 = v6
	in.remoteAddr, in.sandboxAddr = tcpAddr(dst), tcpAddr(src)
	in.h = h[:tcpLen]
	in.key = flowKey{src: netip.AddrPortFrom(src, h.SourcePort()), dst: netip.AddrPortFrom(dst, h.DestinationPort())}
	in.n = total - ipLen - tcpLen
	in.data = appendPayload(in.data, head, body, ipLen+tcpLen, total)
	return true
}

// fastUDP parses an ordinary UDP datagram: its flow and its payload
// (appended to data).
func fastUDP(data [][]byte, head, body []byte, n int) (flowKey, [][]byte, bool) {
	_, proto, ipLen, total, src, dst, ok := fastIP(head, n)
	if !ok || proto != uint8(header.UDPProtocolNumber) || ipLen+header.UDPMinimumSize > min(total, len(head)) {
		return flowKey{}, data, false
	}
	u := header.UDP(head[ipLen:])
	if int(u.Length()) != total-ipLen {
		return flowKey{}, data, false
	}
	key := flowKey{src: netip.AddrPortFrom(src, u.SourcePort()), dst: netip.AddrPortFrom(dst, u.DestinationPort())}
	return key, appendPayload(data, head, body, ipLen+header.UDPMinimumSize, total), true
}

// ordinary is an address the fast path takes.
func ordinary(a netip.Addr) bool { return a.IsGlobalUnicast() && !a.Is4In6() }

func (t *TUN) readFailed(err error) {
	if !t.closed.Load() && t.onError != nil {
		t.onError(err)
	}
}
