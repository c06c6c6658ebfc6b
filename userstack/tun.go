package userstack

import (
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TUN is a stack.LinkEndpoint on a TUN device opened with IFF_TUN and
// IFF_NO_PI (raw IP packets, no header). Reads go through Go's netpoller
// and each packet is delivered to the stack on the reading goroutine.
// gVisor's fdbased endpoint instead waits in a blocking poll and hands each
// packet to a processor goroutine: two wake-ups where this has one, which
// is most of a request/response round trip on this path.
//
// With a virtio-net header (a TUN opened with IFF_VNET_HDR and offloads
// on), the endpoint declares host GSO: gVisor then leaves TCP checksums to
// the kernel (it writes only the pseudo-header sum and a NEEDS_CSUM header)
// and may hand over segments larger than the MTU, which the kernel passes
// through whole or splits itself. On the way in, the kernel's partially
// checksummed and TSO super-packets are taken as they are.
type TUN struct {
	f       *os.File // non-blocking, so that Read parks in the netpoller
	rc      syscall.RawConn
	mtu     atomic.Uint32
	vnet    int // virtio-net header length, 0 without one
	onError func(error)

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	onClose    func()

	closed atomic.Bool
	wg     sync.WaitGroup
	acks   *ackHolder
}

// NewTUN returns an endpoint on f, which must be a non-blocking TUN
// descriptor; the endpoint owns it. vnetHdrLen is the virtio-net header
// length the device was set up with (0: none). onError, if set, hears a read error
// that was not caused by Close (the device went away).
func NewTUN(f *os.File, mtu uint32, vnetHdrLen int, onError func(error)) *TUN {
	t := &TUN{f: f, vnet: vnetHdrLen, onError: onError}
	t.rc, _ = f.SyscallConn() // fails only for a closed file: every I/O then fails too
	t.mtu.Store(mtu)
	t.acks = newAckHolder(t.writeBytes)
	return t
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

// Attach implements stack.LinkEndpoint: the first attach starts reading.
func (t *TUN) Attach(d stack.NetworkDispatcher) {
	t.mu.Lock()
	start := t.dispatcher == nil && d != nil && !t.closed.Load()
	t.dispatcher = d
	t.mu.Unlock()
	if start {
		t.wg.Add(1)
		go t.read()
	}
}

// IsAttached implements stack.LinkEndpoint.
func (t *TUN) IsAttached() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.dispatcher != nil
}

// Wait implements stack.LinkEndpoint.
func (t *TUN) Wait() { t.wg.Wait() }

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

// Close implements stack.LinkEndpoint: it closes the descriptor, which ends
// the reader, and waits for it.
func (t *TUN) Close() {
	if !t.closed.CompareAndSwap(false, true) {
		return
	}
	t.f.Close() // first: a flush waiting on a full device then fails at once
	t.acks.close()
	t.wg.Wait()
	t.mu.RLock()
	f := t.onClose
	t.mu.RUnlock()
	if f != nil {
		f()
	}
}

// FlushAck writes the bare ACK held for the TCP flow from src to dst (the
// stack's side to the sandbox's), if one is held: the stack calls it once
// the data that ACK acknowledges has been relayed to the host.
func (t *TUN) FlushAck(src, dst netip.AddrPort) { t.acks.Flush(src, dst) }

// GSOMaxSize implements stack.GSOEndpoint.
func (t *TUN) GSOMaxSize() uint32 {
	if t.vnet == 0 {
		return 0
	}
	return 1<<16 - 1
}

// SupportedGSO implements stack.GSOEndpoint.
func (t *TUN) SupportedGSO() stack.SupportedGSO {
	if t.vnet == 0 {
		return stack.GSONotSupported
	}
	return stack.HostGSOSupported
}

// Virtio-net header fields (linux/virtio_net.h).
const (
	vnetNeedsCsum = 1
	vnetGSOTCPv4  = 1
	vnetGSOTCPv6  = 4
)

// vnetHeader lays out the virtio-net header for pkt, little-endian: the
// checksum the kernel must complete, and the segmentation it must do.
func vnetHeader(pkt *stack.PacketBuffer, hdr []byte) {
	clear(hdr)
	g := pkt.GSOOptions
	if g.Type == stack.GSONone {
		return
	}
	put16 := func(off int, v uint16) { hdr[off], hdr[off+1] = byte(v), byte(v>>8) }
	put16(2, uint16(pkt.HeaderSize()))
	if g.NeedsCsum {
		hdr[0] = vnetNeedsCsum
		put16(6, g.L3HdrLen)
		put16(8, g.CsumOffset)
	}
	if pkt.Data().Size() > int(g.MSS) {
		switch g.Type {
		case stack.GSOTCPv4:
			hdr[1] = vnetGSOTCPv4
		case stack.GSOTCPv6:
			hdr[1] = vnetGSOTCPv6
		}
		put16(4, g.MSS)
	}
}

// WritePackets implements stack.LinkWriter: one writev a packet, straight
// from the packet's own views (no copy into one buffer).
func (t *TUN) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	var hdr [vnetHdrMax]byte
	for _, pkt := range pkts.AsSlice() {
		if t.vnet > 0 {
			vnetHeader(pkt, hdr[:t.vnet])
		}
		if t.acks.offer(pkt, hdr[:t.vnet]) {
			n++ // held, or replaced by a later packet
			continue
		}
		if err := t.writePacket(hdr[:t.vnet], pkt); err != nil {
			if n == 0 {
				return 0, &tcpip.ErrClosedForSend{}
			}
			break
		}
		n++
	}
	return n, nil
}

// writePacket writes prefix (the virtio-net header, if any) and the packet
// as one datagram, straight from the packet's views.
func (t *TUN) writePacket(prefix []byte, pkt *stack.PacketBuffer) error {
	var small [8]unix.Iovec
	iov := appendIovec(small[:0], prefix)
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
	return t.writev(iov)
}

// writeBytes writes one packet (with its virtio-net header, if any).
func (t *TUN) writeBytes(b []byte) error {
	var one [1]unix.Iovec
	return t.writev(appendIovec(one[:0], b))
}

func appendIovec(iov []unix.Iovec, b []byte) []unix.Iovec {
	if len(b) == 0 {
		return iov
	}
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return append(iov, v)
}

// writev writes iov as one datagram; a full queue waits in the netpoller.
func (t *TUN) writev(iov []unix.Iovec) error {
	if t.rc == nil {
		return os.ErrClosed
	}
	if len(iov) == 0 {
		return nil
	}
	var werr error
	err := t.rc.Write(func(fd uintptr) bool {
		werr = nil
		if _, _, e := unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov))); e != 0 {
			werr = e
		}
		return werr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return werr
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

func (t *TUN) read() {
	defer t.wg.Done()
	var vnet [vnetHdrMax]byte
	var head [rxHeadLen]byte
	var body *buffer.View
	defer func() {
		if body != nil {
			body.Release()
		}
	}()
	if t.rc == nil {
		t.readFailed(os.ErrClosed)
		return
	}
	for {
		if body == nil {
			body = buffer.NewViewSize(rxBodyCap)
		}
		iov := [3][]byte{vnet[:t.vnet], head[:], body.AsSlice()}
		if t.vnet == 0 {
			iov[0] = nil
		}
		var n int
		var rerr error
		err := t.rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Readv(int(fd), iov[:])
			return rerr != unix.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			t.readFailed(err)
			return
		}
		n -= t.vnet
		if n <= 0 || n >= rxHeadLen+rxBodyCap {
			continue // runt, or possibly truncated: drop
		}
		var proto tcpip.NetworkProtocolNumber
		switch header.IPVersion(head[:min(n, rxHeadLen)]) {
		case header.IPv4Version:
			proto = header.IPv4ProtocolNumber
		case header.IPv6Version:
			proto = header.IPv6ProtocolNumber
		default:
			continue
		}
		// A TSO super-packet or a partial checksum is taken as it is:
		// gVisor accepts large segments, and skips the checksum check
		// (CapabilityRXChecksumOffload).
		payload := buffer.MakeWithData(head[:min(n, rxHeadLen)])
		if rest := n - rxHeadLen; rest > 0 {
			if rest < rxCopyBelow {
				payload.Append(buffer.NewViewWithData(body.AsSlice()[:rest]))
			} else {
				body.CapLength(rest)
				payload.Append(body)
				body = nil
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
}

func (t *TUN) readFailed(err error) {
	if !t.closed.Load() && t.onError != nil {
		t.onError(err)
	}
}
