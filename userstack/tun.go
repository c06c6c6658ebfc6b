package userstack

import (
	"os"
	"sync"
	"sync/atomic"

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
	mtu     atomic.Uint32
	vnet    int // virtio-net header length, 0 without one
	onError func(error)

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	onClose    func()

	closed atomic.Bool
	wg     sync.WaitGroup
}

// NewTUN returns an endpoint on f, which must be a non-blocking TUN
// descriptor; the endpoint owns it. vnetHdrLen is the virtio-net header
// length the device was set up with (0: none). onError, if set, hears a read error
// that was not caused by Close (the device went away).
func NewTUN(f *os.File, mtu uint32, vnetHdrLen int, onError func(error)) *TUN {
	t := &TUN{f: f, vnet: vnetHdrLen, onError: onError}
	t.mtu.Store(mtu)
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
	t.f.Close()
	t.wg.Wait()
	t.mu.RLock()
	f := t.onClose
	t.mu.RUnlock()
	if f != nil {
		f()
	}
}

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

// WritePackets implements stack.LinkWriter: one write a packet.
func (t *TUN) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	var hdr [16]byte
	for _, pkt := range pkts.AsSlice() {
		v := pkt.ToView()
		var err error
		if t.vnet > 0 {
			vnetHeader(pkt, hdr[:t.vnet])
			err = t.writev(hdr[:t.vnet], v.AsSlice())
		} else {
			_, err = t.f.Write(v.AsSlice())
		}
		v.Release()
		if err != nil {
			if n == 0 {
				return 0, &tcpip.ErrClosedForSend{}
			}
			break
		}
		n++
	}
	return n, nil
}

func (t *TUN) read() {
	defer t.wg.Done()
	buf := make([]byte, 1<<17)
	for {
		n, err := t.f.Read(buf)
		if err != nil {
			if !t.closed.Load() && t.onError != nil {
				t.onError(err)
			}
			return
		}
		if n < t.vnet {
			continue
		}
		// A TSO super-packet or a partial checksum is taken as it is:
		// gVisor accepts large segments, and skips the checksum check
		// (CapabilityRXChecksumOffload).
		pktBytes := buf[t.vnet:n]
		var proto tcpip.NetworkProtocolNumber
		switch header.IPVersion(pktBytes) {
		case header.IPv4Version:
			proto = header.IPv4ProtocolNumber
		case header.IPv6Version:
			proto = header.IPv6ProtocolNumber
		default:
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(pktBytes)})
		t.mu.RLock()
		d := t.dispatcher
		t.mu.RUnlock()
		if d != nil {
			d.DeliverNetworkPacket(proto, pkt)
		}
		pkt.DecRef()
	}
}

// writev writes header and payload as one packet without copying them
// together; a full queue waits in the netpoller.
func (t *TUN) writev(header, payload []byte) error {
	rc, err := t.f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		_, werr = unix.Writev(int(fd), [][]byte{header, payload})
		return werr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return werr
}
