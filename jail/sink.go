package jail

import (
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack"
)

// SinkDevice is the jail's second TUN link: every blocked range is routed
// to it (routes.Config.Sink), so the kernel layer keeps blocked traffic
// away from the egress stack on its own. The sink's reader forwards
// nothing: it records each attempt and refuses it at once, a TCP RST or an
// ICMP unreachable, so the caller sees "connection refused" rather than a
// hang, and the block shows in the log and summary.
const SinkDevice = "blk0"

// sink reads and refuses what the kernel routes to the sink device.
// record takes each refusal: in the jail, the stack's RecordBlock
// (newSink), so that the sink's records share the stack's bounded,
// rate-limited queue; it never blocks.
type sink struct {
	dev    *os.File
	pol    *netpolicy.Policy
	record func(netpolicy.Block)
	// ask, in the ask mode, takes a TCP SYN first (jail.sinkAsk): true,
	// held or passed on, nothing to send.
	ask func(s *sink, proto netpolicy.Proto, pkt []byte, src, dst netip.AddrPort) bool
	// owner, when set, fills in the process behind a block from its
	// source (the sandbox's end) before the refusal is sent: once refused,
	// a TCP socket leaves the kernel's tables, and a short-lived client
	// may exit.
	owner func(b *netpolicy.Block, src netip.AddrPort)
}

func (s *sink) run() {
	// The buffer comes with the first packet: most sandboxes never send
	// one to a blocked range, and it would be held for their life. Until
	// then the reader waits for readability with a poll that reads
	// nothing.
	if !s.waitFirst() {
		return
	}
	buf := make([]byte, 65536)
	for {
		n, err := s.dev.Read(buf)
		if err != nil {
			return // closed with the jail
		}
		if reply := s.refuse(buf[:n]); reply != nil {
			_, _ = s.dev.Write(reply)
		}
	}
}

// waitFirst waits in Go's poller until the device has a packet (or an
// error) to read, and reports false if the device was closed meanwhile.
func (s *sink) waitFirst() bool {
	rc, err := s.dev.SyscallConn()
	if err != nil {
		return true // Read will tell
	}
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return n != 0 || (err != nil && err != unix.EINTR)
	})
	return err == nil
}

func addrOf(a tcpip.Address) netip.Addr {
	ad, _ := netip.AddrFromSlice(a.AsSlice())
	return ad.Unmap()
}

// refuse records the packet's flow and returns the refusal to send back,
// or nil (for what needs no answer: a RST, a non-echo ICMP message, a
// packet that does not parse).
func (s *sink) refuse(p []byte) []byte { return s.refuseAsk(p, true) }

// refusePlain is refuse without asking (a held SYN whose request was
// denied or expired).
func (s *sink) refusePlain(p []byte) []byte { return s.refuseAsk(p, false) }

func (s *sink) refuseAsk(p []byte, askOK bool) []byte {
	switch header.IPVersion(p) {
	case header.IPv4Version:
		ip := header.IPv4(p)
		if !ip.IsValid(len(p)) || ip.FragmentOffset() != 0 {
			return nil
		}
		return s.refuseTransport(p, ip.SourceAddress(), ip.DestinationAddress(), ip.TransportProtocol(), ip.Payload(), askOK)
	case header.IPv6Version:
		ip := header.IPv6(p)
		if !ip.IsValid(len(p)) {
			return nil
		}
		// Extension headers are not parsed: such a packet is only dropped.
		return s.refuseTransport(p, ip.SourceAddress(), ip.DestinationAddress(), tcpip.TransportProtocolNumber(ip.NextHeader()), ip.Payload(), askOK)
	}
	return nil
}

func (s *sink) note(proto netpolicy.Proto, src, dst netip.AddrPort) {
	rule, via := "blocked range", netip.Prefix{}
	if v := s.pol.Check(proto, dst); !v.Allowed {
		rule, via = v.Rule, v.ViaDefaultRoute()
	}
	b := netpolicy.Block{Proto: proto, Dst: dst, Rule: rule, ViaDefault: via}
	if s.owner != nil {
		s.owner(&b, src)
	}
	s.record(b)
}

func (s *sink) refuseTransport(pkt []byte, src, dst tcpip.Address, proto tcpip.TransportProtocolNumber, payload []byte, askOK bool) []byte {
	v6 := dst.Len() == 16
	switch proto {
	case header.TCPProtocolNumber:
		if len(payload) < header.TCPMinimumSize {
			return nil
		}
		tcp := header.TCP(payload)
		if off := int(tcp.DataOffset()); off < header.TCPMinimumSize || off > len(payload) {
			return nil // malformed: its payload length cannot be trusted
		}
		if tcp.Flags().Contains(header.TCPFlagRst) {
			return nil
		}
		if tcp.Flags().Contains(header.TCPFlagSyn) && !tcp.Flags().Contains(header.TCPFlagAck) {
			if askOK && s.ask != nil && s.ask(s, netpolicy.ProtoTCP, pkt, netip.AddrPortFrom(addrOf(src), tcp.SourcePort()), netip.AddrPortFrom(addrOf(dst), tcp.DestinationPort())) {
				return nil // held (the ask mode)
			}
			s.note(netpolicy.ProtoTCP, netip.AddrPortFrom(addrOf(src), tcp.SourcePort()), netip.AddrPortFrom(addrOf(dst), tcp.DestinationPort()))
		}
		return tcpReset(src, dst, tcp, v6)
	case header.UDPProtocolNumber:
		if len(payload) < header.UDPMinimumSize {
			return nil
		}
		u := header.UDP(payload)
		if askOK && s.ask != nil && s.ask(s, netpolicy.ProtoUDP, pkt, netip.AddrPortFrom(addrOf(src), u.SourcePort()), netip.AddrPortFrom(addrOf(dst), u.DestinationPort())) {
			return nil // held (the ask mode): the sender sends again
		}
		s.note(netpolicy.ProtoUDP, netip.AddrPortFrom(addrOf(src), u.SourcePort()), netip.AddrPortFrom(addrOf(dst), u.DestinationPort()))
		if v6 {
			return icmp6Unreachable(pkt, src, dst, header.ICMPv6PortUnreachable)
		}
		return icmp4Unreachable(pkt, src, dst, header.ICMPv4PortUnreachable)
	case header.ICMPv4ProtocolNumber:
		if len(payload) < header.ICMPv4MinimumSize || header.ICMPv4(payload).Type() != header.ICMPv4Echo {
			return nil
		}
		s.note(netpolicy.ProtoICMP, netip.AddrPort{}, netip.AddrPortFrom(addrOf(dst), 0))
		return icmp4Unreachable(pkt, src, dst, header.ICMPv4HostProhibited)
	case header.ICMPv6ProtocolNumber:
		if len(payload) < header.ICMPv6MinimumSize || header.ICMPv6(payload).Type() != header.ICMPv6EchoRequest {
			return nil
		}
		s.note(netpolicy.ProtoICMP, netip.AddrPort{}, netip.AddrPortFrom(addrOf(dst), 0))
		return icmp6Unreachable(pkt, src, dst, header.ICMPv6Prohibited)
	}
	return nil
}

// tcpReset answers seg (sent from src to dst) with a RST, as RFC 9293
// says a closed port does.
func tcpReset(src, dst tcpip.Address, seg header.TCP, v6 bool) []byte {
	seq, ack, flags, ok := userstack.ResetFor(seg, len(seg.Payload()))
	if !ok {
		return nil
	}
	pkt, tb := userstack.NewIPPacket(v6, header.TCPProtocolNumber, header.TCPMinimumSize, dst, src)
	tcp := header.TCP(tb)
	tcp.Encode(&header.TCPFields{SrcPort: seg.DestinationPort(), DstPort: seg.SourcePort(), DataOffset: header.TCPMinimumSize, SeqNum: seq, AckNum: ack, Flags: flags})
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, dst, src, uint16(len(tb)))
	tcp.SetChecksum(^tcp.CalculateChecksum(xsum))
	return pkt
}

// icmp4Unreachable answers orig with a destination-unreachable message of
// the given code, quoting orig's header and first 8 payload bytes.
func icmp4Unreachable(orig []byte, src, dst tcpip.Address, code header.ICMPv4Code) []byte {
	ip := header.IPv4(orig)
	quote := orig[:min(len(orig), int(ip.HeaderLength())+8)]
	pkt, tb := userstack.NewIPPacket(false, header.ICMPv4ProtocolNumber, header.ICMPv4MinimumSize+len(quote), dst, src)
	ic := header.ICMPv4(tb)
	ic.SetType(header.ICMPv4DstUnreachable)
	ic.SetCode(code)
	copy(tb[header.ICMPv4MinimumSize:], quote)
	ic.SetChecksum(^checksum.Checksum(tb, 0))
	return pkt
}

// icmp6Unreachable is icmp4Unreachable for IPv6 (RFC 4443: quote as much
// of the packet as fits the minimum MTU).
func icmp6Unreachable(orig []byte, src, dst tcpip.Address, code header.ICMPv6Code) []byte {
	quote := orig[:min(len(orig), header.IPv6MinimumMTU-header.IPv6MinimumSize-header.ICMPv6DstUnreachableMinimumSize)]
	pkt, tb := userstack.NewIPPacket(true, header.ICMPv6ProtocolNumber, header.ICMPv6DstUnreachableMinimumSize+len(quote), dst, src)
	ic := header.ICMPv6(tb)
	ic.SetType(header.ICMPv6DstUnreachable)
	ic.SetCode(code)
	copy(tb[header.ICMPv6DstUnreachableMinimumSize:], quote)
	ic.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{
		Header: ic[:header.ICMPv6DstUnreachableMinimumSize], Src: dst, Dst: src,
		PayloadCsum: checksum.Checksum(quote, 0), PayloadLen: len(quote),
	}))
	return pkt
}
