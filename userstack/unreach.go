package userstack

import (
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// tcpUnreachable answers f's SYN (under f.mu, still dialing) with an ICMP
// destination unreachable from the destination's address, as a router on
// the way would: host unreachable (IPv6: address unreachable), or network
// unreachable (IPv6: no route) with netUnreach. It quotes what a kernel
// matches the error to its connecting socket by: an IP header from the
// sandbox to the destination and the SYN's ports and sequence number.
func (st *Stack) tcpUnreachable(f *tcpFlow, netUnreach bool) {
	const quoteTCP = 8 // ports and sequence number
	sandbox, dst := f.sandboxAddr, f.remoteAddr
	var quote [header.IPv6MinimumSize + quoteTCP]byte
	q := quote[:ipHeaderLen(f.v6)+quoteTCP]
	// The quoted IP header says the segment was a bare TCP header long.
	if err := encodeIP(q, f.v6, header.TCPProtocolNumber, header.TCPMinimumSize, sandbox, dst); err != nil {
		return
	}
	t := q[ipHeaderLen(f.v6):]
	t[0], t[1] = byte(f.key.src.Port()>>8), byte(f.key.src.Port())
	t[2], t[3] = byte(f.key.dst.Port()>>8), byte(f.key.dst.Port())
	t[4], t[5], t[6], t[7] = byte(f.irs>>24), byte(f.irs>>16), byte(f.irs>>8), byte(f.irs)

	if f.v6 {
		pkt, tb := NewIPPacket(true, header.ICMPv6ProtocolNumber, header.ICMPv6DstUnreachableMinimumSize+len(q), dst, sandbox)
		ic := header.ICMPv6(tb)
		ic.SetType(header.ICMPv6DstUnreachable)
		ic.SetCode(header.ICMPv6AddressUnreachable)
		if netUnreach {
			ic.SetCode(header.ICMPv6NetworkUnreachable)
		}
		copy(tb[header.ICMPv6DstUnreachableMinimumSize:], q)
		ic.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: ic, Src: dst, Dst: sandbox}))
		st.sendICMP(pkt, true)
		return
	}
	pkt, tb := NewIPPacket(false, header.ICMPv4ProtocolNumber, header.ICMPv4MinimumSize+len(q), dst, sandbox)
	ic := header.ICMPv4(tb)
	ic.SetType(header.ICMPv4DstUnreachable)
	ic.SetCode(header.ICMPv4HostUnreachable)
	if netUnreach {
		ic.SetCode(header.ICMPv4NetUnreachable)
	}
	copy(tb[header.ICMPv4MinimumSize:], q)
	ic.SetChecksum(^checksum.Checksum(tb, 0))
	st.sendICMP(pkt, false)
}

func (st *Stack) sendICMP(pkt []byte, v6 bool) {
	if err := st.emit(nil, pkt, v6, ipHeaderLen(v6), nil, false); err != nil {
		st.cfg.Logf("userstack: icmp unreachable: %v", err)
	}
}
