package userstack

import (
	"context"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
)

// Pinger sends one ICMP echo request from the host to dst, carrying
// payload, and returns nil once the matching reply arrived. It must honour
// ctx's deadline. HostPinger is the production one.
type Pinger interface {
	Ping(ctx context.Context, dst netip.Addr, payload []byte) error
}

// pingTimeout bounds one proxied echo; maxPings bounds how many wait at
// once (a ping flood from the sandbox must not grow goroutines unbounded).
const (
	pingTimeout = 3 * time.Second
	maxPings    = 64
)

// echoRequest is what the stack needs to answer an echo on the sandbox's
// behalf.
type echoRequest struct {
	v6       bool
	src, dst netip.Addr // as sent by the sandbox
	id, seq  uint16
	payload  []byte
}

// handleICMP4 and handleICMP6 see ICMP packets no endpoint claimed. Echo
// requests to a local address (the gateway) are left to gVisor, which
// answers them. Echo requests to any other address are consumed here: a
// blocked destination is recorded and gets no answer; an allowed one is
// proxied through the Pinger (the host pings for real) and its reply is
// written back to the sandbox. Consuming matters for IPv6, where gVisor
// would otherwise answer echo for every address in promiscuous mode. Other
// ICMP types are left to gVisor.
func (st *Stack) handleICMP4(_ stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	h := pkt.TransportHeader().Slice()
	if len(h) < header.ICMPv4MinimumSize || header.ICMPv4(h).Type() != header.ICMPv4Echo {
		return false
	}
	ic := header.ICMPv4(h)
	req := echoRequest{src: toAddr(pkt.Network().SourceAddress()), dst: toAddr(pkt.Network().DestinationAddress()),
		id: ic.Ident(), seq: ic.Sequence(), payload: echoPayload(pkt, header.ICMPv4MinimumSize)}
	return st.echo(req)
}

func (st *Stack) handleICMP6(_ stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	h := pkt.TransportHeader().Slice()
	if len(h) < header.ICMPv6MinimumSize || header.ICMPv6(h).Type() != header.ICMPv6EchoRequest {
		return false
	}
	ic := header.ICMPv6(h)
	req := echoRequest{v6: true, src: toAddr(pkt.Network().SourceAddress()), dst: toAddr(pkt.Network().DestinationAddress()),
		id: ic.Ident(), seq: ic.Sequence(), payload: echoPayload(pkt, header.ICMPv6EchoMinimumSize)}
	return st.echo(req)
}

// echoPayload returns a copy of the echo's data after its header.
func echoPayload(pkt *stack.PacketBuffer, hdrLen int) []byte {
	th := pkt.TransportHeader().Slice()
	data := append([]byte(nil), th[min(hdrLen, len(th)):]...)
	return append(data, pkt.Data().AsRange().ToSlice()...)
}

func (st *Stack) echo(req echoRequest) (consumed bool) {
	ap := netip.AddrPortFrom(req.dst, 0)
	d := st.adm.Admit(netpolicy.ProtoICMP, netip.AddrPortFrom(req.src, 0), ap)
	switch d.Action {
	case admission.Local:
		return false // answered by gVisor
	case admission.Refuse:
		st.record(netpolicy.ProtoICMP, ap, d)
		return true
	}
	if st.cfg.Pinger == nil {
		return true
	}
	select {
	case st.pings <- struct{}{}:
	default:
		return true // too many in flight: drop, as a congested router would
	}
	gate := d.Gate // Wait: the IPv6 gate (ready6.go)
	if !st.goFlow(func() {
		defer st.wg.Done()
		defer func() { <-st.pings }()
		if gate != nil {
			if d := st.afterIPv6Gate(netpolicy.ProtoICMP, ap, gate); d.Action != admission.Dial {
				if st.ctx.Err() == nil {
					st.record(netpolicy.ProtoICMP, ap, d)
				}
				return // unanswered, as a lost echo
			}
		}
		ctx, cancel := context.WithTimeout(st.ctx, pingTimeout)
		defer cancel()
		if err := st.cfg.Pinger.Ping(ctx, req.dst, req.payload); err != nil {
			st.cfg.Logf("ping %s: %v", req.dst, err)
			return
		}
		st.writeEchoReply(req)
	}) {
		<-st.pings // closing
	}
	return true
}

// writeEchoReply sends the sandbox the reply its destination gave the host.
func (st *Stack) writeEchoReply(req echoRequest) {
	src, dst := tcpAddr(req.dst), tcpAddr(req.src)
	ipLen := ipHeaderLen(req.v6)
	var pkt []byte
	proto := header.ICMPv4ProtocolNumber
	if !req.v6 {
		pkt = make([]byte, ipLen+header.ICMPv4MinimumSize+len(req.payload))
		ic := header.ICMPv4(pkt[ipLen:])
		ic.SetType(header.ICMPv4EchoReply)
		ic.SetIdent(req.id)
		ic.SetSequence(req.seq)
		copy(ic.Payload(), req.payload)
		ic.SetChecksum(^checksum.Checksum(ic, 0))
	} else {
		proto = header.ICMPv6ProtocolNumber
		pkt = make([]byte, ipLen+header.ICMPv6EchoMinimumSize+len(req.payload))
		ic := header.ICMPv6(pkt[ipLen:])
		ic.SetType(header.ICMPv6EchoReply)
		ic.SetIdent(req.id)
		ic.SetSequence(req.seq)
		copy(ic[header.ICMPv6EchoMinimumSize:], req.payload)
		ic.SetChecksum(0)
		ic.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: ic, Src: src, Dst: dst}))
	}
	if err := st.writeIP(pkt, req.v6, proto, src, dst); err != nil {
		st.cfg.Logf("echo reply to %s: %v", req.src, err)
	}
}
