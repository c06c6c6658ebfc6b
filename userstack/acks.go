package userstack

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// gVisor acknowledges every batch of segments it receives at once, with a
// bare ACK. For a request/response exchange that is one more packet written
// to the TUN per request, before the request is even relayed: the
// response, a few tens of microseconds later, carries the same
// acknowledgement. The TUN endpoint therefore holds bare ACKs back, like a
// kernel's delayed ACK:
//
//   - a later packet of the same flow (data, FIN or RST) carries a newer
//     acknowledgement and replaces the held one, which is dropped;
//   - a held ACK is written once the flow's acknowledgement has moved on by
//     ackEvery bytes (bulk transfers keep their ACK clock), when the data
//     it acknowledges has been relayed to the host (Flush: a sender waiting
//     for it under Nagle's algorithm waits no longer than the relay), or
//     when the link's flush timer fires (ackDelay, about a millisecond with
//     Go's timers);
//   - an ACK carrying SACK blocks (the sandbox's data arrived out of order)
//     is never held, and neither is a second ACK of the same number
//     (duplicate ACKs drive a sender's fast retransmit without SACK): the
//     held one is written first.
//
// The held copies are written in flow order: every packet of one flow
// passes through here in the order gVisor made it, under the flow's
// endpoint lock.
const (
	ackDelay = 500 * time.Microsecond
	ackEvery = 64 << 10
	// ackMaxLen bounds a bare ACK's copy: IPv6 40 + TCP 60, plus the
	// virtio-net header.
	ackMaxLen = vnetHdrMax + 40 + 60
)

// ackKey identifies a TCP flow leaving the stack.
type ackKey struct {
	src, dst     tcpip.Address
	sport, dport uint16
}

type heldAck struct {
	base uint32 // acknowledgement of the first ACK held since the last write
	ack  uint32 // acknowledgement of the ACK held now
	n    int
	buf  [ackMaxLen]byte // virtio-net header (if any) and packet
}

// ackHolder is a TUN endpoint's set of held ACKs.
type ackHolder struct {
	write func([]byte) error // writes one held packet to the device
	delay time.Duration      // ackDelay; tests stretch it and flush by hand

	held  atomic.Int32 // len(m): lets packets skip the lock when none is held
	mu    sync.Mutex
	m     map[ackKey]*heldAck
	free  []*heldAck
	timer *time.Timer
	armed bool
	done  bool
}

func newAckHolder(write func([]byte) error) *ackHolder {
	h := &ackHolder{write: write, delay: ackDelay, m: map[ackKey]*heldAck{}}
	h.timer = time.AfterFunc(time.Hour, h.flush)
	h.timer.Stop()
	return h
}

// tcpHeader returns the TCP header of an outbound TCP packet.
func tcpHeader(pkt *stack.PacketBuffer) (header.TCP, bool) {
	if pkt.TransportProtocolNumber != header.TCPProtocolNumber {
		return nil, false
	}
	tcp := header.TCP(pkt.TransportHeader().Slice())
	return tcp, len(tcp) >= header.TCPMinimumSize
}

// flowOf returns the flow of an outbound TCP packet with header tcp.
func flowOf(pkt *stack.PacketBuffer, tcp header.TCP) (ackKey, bool) {
	k := ackKey{sport: tcp.SourcePort(), dport: tcp.DestinationPort()}
	nh := pkt.NetworkHeader().Slice()
	switch {
	case pkt.NetworkProtocolNumber == header.IPv4ProtocolNumber && len(nh) >= header.IPv4MinimumSize:
		k.src, k.dst = header.IPv4(nh).SourceAddress(), header.IPv4(nh).DestinationAddress()
	case pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber && len(nh) >= header.IPv6MinimumSize:
		k.src, k.dst = header.IPv6(nh).SourceAddress(), header.IPv6(nh).DestinationAddress()
	default:
		return ackKey{}, false
	}
	return k, true
}

// bareAck reports whether tcp is an ACK without data, flags or SACK blocks.
func bareAck(pkt *stack.PacketBuffer, tcp header.TCP) bool {
	if tcp.Flags() != header.TCPFlagAck || pkt.Data().Size() != 0 {
		return false
	}
	opts := tcp.Options()
	for i := 0; i < len(opts); {
		switch opts[i] {
		case header.TCPOptionEOL:
			return true
		case header.TCPOptionNOP:
			i++
			continue
		case header.TCPOptionSACK:
			return false
		}
		if i+1 >= len(opts) || opts[i+1] < 2 {
			return false // malformed: do not hold what we cannot read
		}
		i += int(opts[i+1])
	}
	return true
}

// offer is called for every outbound packet before it is written. It
// reports true when it took the packet (a held bare ACK); otherwise the
// caller writes the packet itself, and any ACK held for its flow has been
// dropped (the packet acknowledges as much or more).
func (h *ackHolder) offer(pkt *stack.PacketBuffer, vnet []byte) bool {
	tcp, ok := tcpHeader(pkt)
	if !ok {
		return false
	}
	bare := bareAck(pkt, tcp)
	if !bare && (h.held.Load() == 0 || !tcp.Flags().Intersects(header.TCPFlagAck|header.TCPFlagRst)) {
		return false // the common case: data, with nothing held to replace
	}
	k, ok := flowOf(pkt, tcp)
	if !ok {
		return false
	}
	if !bare {
		h.drop(k)
		return false
	}
	size := len(vnet) + pkt.Size()
	if size > ackMaxLen {
		h.drop(k) // not expected; never let an older ACK follow it
		return false
	}
	ack := tcp.AckNumber()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	a := h.m[k]
	if a != nil && int32(ack-a.base) >= ackEvery {
		// The flow's acknowledgement moved on far enough: this one goes
		// out now, and replaces the held one.
		h.forget(k, a)
		return false
	}
	if a != nil && ack == a.ack {
		// A duplicate (or a window update): both go out, in order.
		_ = h.write(a.buf[:a.n])
		h.forget(k, a)
		return false
	}
	if a == nil {
		if n := len(h.free); n > 0 {
			a, h.free = h.free[n-1], h.free[:n-1]
		} else {
			a = new(heldAck)
		}
		a.base = ack
		h.m[k] = a
		h.held.Store(int32(len(h.m)))
		if !h.armed {
			h.armed = true
			h.timer.Reset(h.delay)
		}
	}
	a.ack = ack
	a.n = copy(a.buf[:], vnet)
	for _, s := range pkt.AsSlices() {
		a.n += copy(a.buf[a.n:], s)
	}
	return true
}

// Flush writes the ACK held for the flow from src to dst, if any: the
// data it acknowledges has been relayed.
func (h *ackHolder) Flush(src, dst netip.AddrPort) {
	if h.held.Load() == 0 {
		return
	}
	k := ackKey{src: tcpAddr(src.Addr()), dst: tcpAddr(dst.Addr()), sport: src.Port(), dport: dst.Port()}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.m[k]; a != nil && !h.done {
		_ = h.write(a.buf[:a.n])
		h.forget(k, a)
	}
}

// drop forgets the ACK held for k, which a newer packet replaces.
func (h *ackHolder) drop(k ackKey) {
	h.mu.Lock()
	if a := h.m[k]; a != nil {
		h.forget(k, a)
	}
	h.mu.Unlock()
}

func (h *ackHolder) forget(k ackKey, a *heldAck) {
	delete(h.m, k)
	h.held.Store(int32(len(h.m)))
	h.free = append(h.free, a)
}

// flush writes every held ACK. It holds the lock while writing so that a
// packet of the same flow cannot overtake its ACK.
func (h *ackHolder) flush() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = false
	if h.done {
		return
	}
	for k, a := range h.m {
		_ = h.write(a.buf[:a.n]) // lost like any packet on a failing link
		h.forget(k, a)
	}
}

// close stops the timer and drops what is held.
func (h *ackHolder) close() {
	h.mu.Lock()
	h.done = true
	h.timer.Stop()
	clear(h.m)
	h.held.Store(0)
	h.mu.Unlock()
}
