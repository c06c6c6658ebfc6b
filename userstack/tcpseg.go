package userstack

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
)

// tcpSegment is a segment the stack frames itself, to the sandbox.
type tcpSegment struct {
	v6               bool
	src, dst         tcpip.Address
	srcPort, dstPort uint16
	flags            header.TCPFlags
	seq, ack         seqnum.Value
	wnd              uint16
	urg              uint16 // the urgent pointer (with TCPFlagUrg)
	// SYN-ACK options: the MSS when non-zero, with the window scale when
	// ws >= 0.
	mss uint16
	ws  int
}

// synOptionsLen is the room for MSS, NOP and window scale.
const synOptionsLen = 8

// writeTCP frames s with payload and writes it to the link (emit). When
// the TUN offloads checksums the kernel completes the TCP checksum (the
// header carries the pseudo-header sum).
func (st *Stack) writeTCP(s *tcpSegment, payload []byte) error {
	w := writers.Get().(*tunWrite)
	defer writers.Put(w)
	buf := &w.hdr
	ipLen := ipHeaderLen(s.v6)
	tcpLen := header.TCPMinimumSize
	if s.mss != 0 {
		tcpLen += synOptionsLen
	}
	hdr := buf[:ipLen+tcpLen]
	l4Len := tcpLen + len(payload)
	t := header.TCP(hdr[ipLen:])
	t.Encode(&header.TCPFields{
		SrcPort: s.srcPort, DstPort: s.dstPort, SeqNum: uint32(s.seq), AckNum: uint32(s.ack),
		DataOffset: uint8(tcpLen), Flags: s.flags, WindowSize: s.wnd, UrgentPointer: s.urg,
	})
	if s.mss != 0 {
		o := t[header.TCPMinimumSize:tcpLen]
		n := header.EncodeMSSOption(uint32(s.mss), o)
		if s.ws >= 0 {
			n += header.EncodeNOP(o[n:])
			n += header.EncodeWSOption(s.ws, o[n:])
		}
		for n < len(o) {
			n += header.EncodeNOP(o[n:])
		}
	}
	if err := encodeIP(hdr, s.v6, header.TCPProtocolNumber, l4Len, s.src, s.dst); err != nil {
		return err
	}
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, s.src, s.dst, uint16(l4Len))
	if tun, ok := st.ep.(*TUN); ok && tun.vnet > 0 {
		t.SetChecksum(xsum)
		return st.emit(w, hdr, s.v6, ipLen, payload, true)
	}
	xsum = checksum.Checksum(payload, checksum.Checksum(t, xsum))
	t.SetChecksum(^xsum)
	return st.emit(w, hdr, s.v6, ipLen, payload, false)
}
