package userstack

import (
	"os"
	"sync"
	"sync/atomic"

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
// Not for GSO/TSO: packets are at most one MTU. An IFF_VNET_HDR endpoint
// passing super-packets through whole is the next step for bulk throughput.
type TUN struct {
	f       *os.File // non-blocking, so that Read parks in the netpoller
	mtu     atomic.Uint32
	onError func(error)

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	onClose    func()

	closed atomic.Bool
	wg     sync.WaitGroup
}

// NewTUN returns an endpoint on f, which must be a non-blocking TUN
// descriptor; the endpoint owns it. onError, if set, hears a read error
// that was not caused by Close (the device went away).
func NewTUN(f *os.File, mtu uint32, onError func(error)) *TUN {
	t := &TUN{f: f, onError: onError}
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

// WritePackets implements stack.LinkWriter: one write a packet.
func (t *TUN) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	for _, pkt := range pkts.AsSlice() {
		v := pkt.ToView()
		_, err := t.f.Write(v.AsSlice())
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
	buf := make([]byte, 1<<16)
	for {
		n, err := t.f.Read(buf)
		if err != nil {
			if !t.closed.Load() && t.onError != nil {
				t.onError(err)
			}
			return
		}
		var proto tcpip.NetworkProtocolNumber
		switch header.IPVersion(buf[:n]) {
		case header.IPv4Version:
			proto = header.IPv4ProtocolNumber
		case header.IPv6Version:
			proto = header.IPv6ProtocolNumber
		default:
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(buf[:n])})
		t.mu.RLock()
		d := t.dispatcher
		t.mu.RUnlock()
		if d != nil {
			d.DeliverNetworkPacket(proto, pkt)
		}
		pkt.DecRef()
	}
}
