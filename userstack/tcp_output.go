package userstack

import (
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
)

// space is how much more the sandbox's window and the send buffer take.
func (f *tcpFlow) space() int {
	inflight := f.sndUna.Size(f.sndNxt)
	lim := min(f.sndWnd, tcpSndBuf)
	if inflight >= lim {
		return 0
	}
	return int(lim - inflight)
}

// sendData sends a chunk of host data as one segment and keeps it until
// it is acknowledged.
func (f *tcpFlow) sendData(c tcpChunk) {
	seg := f.seg(header.TCPFlagAck|header.TCPFlagPsh, f.sndNxt)
	if f.sndUna == f.sndNxt || !f.has(rtoTimerArmed) {
		f.startRTO()
	}
	f.sent = append(f.sent, c)
	f.sndNxt.UpdateForward(seqnum.Size(len(c.data)))
	f.write(&seg, c.data)
}

// sendFin sends the host's FIN once all its data is sent.
func (f *tcpFlow) sendFin() {
	if f.has(finToSandbox) {
		return
	}
	f.flags |= finToSandbox
	seg := f.seg(header.TCPFlagAck|header.TCPFlagFin, f.sndNxt)
	if f.sndUna == f.sndNxt || !f.has(rtoTimerArmed) {
		f.startRTO()
	}
	f.sndNxt++
	f.write(&seg, nil)
}

// retransmit resends from sndUna: one segment, or everything outstanding
// (go-back-N), the FIN included.
func (f *tcpFlow) retransmit(one bool) {
	if f.state == tcpSynRcvd {
		f.sendSynAck()
		return
	}
	seq := f.sndUna
	for _, c := range f.sent {
		seg := f.seg(header.TCPFlagAck|header.TCPFlagPsh, seq)
		f.write(&seg, c.data)
		seq.UpdateForward(seqnum.Size(len(c.data)))
		if one {
			return
		}
	}
	if f.has(finToSandbox) && seq != f.sndNxt {
		seg := f.seg(header.TCPFlagAck|header.TCPFlagFin, seq)
		f.write(&seg, nil)
	}
}

// window is the receive window to advertise, in bytes.
func (f *tcpFlow) window() seqnum.Size {
	w, _, _ := f.windowLimit()
	return w
}

// windowLimit is window, and whether the relay's memory budget narrowed
// it to a window worth widening later (below tcpWndShort). Each flow is
// offered at most its share of what is free of the budget (split evenly
// among the live flows), so that the windows open at any one time seldom
// promise more than is free: what arrives beyond what toHost can be
// granted is not acknowledged, and the sandbox then sends it again only
// after its retransmission timeout.
//
// free is what it saw free of the budget (for waitMem).
func (f *tcpFlow) windowLimit() (w seqnum.Size, short bool, free int) {
	w = min(seqnum.Size(f.rcvRoom()), 0xffff<<f.rcvShift)
	free = f.st.memFree()
	share := free / max(1, int(f.st.tcpLive.Load()))
	if share < int(w) { // in int: a budget past 4 GiB does not fit a uint32
		return seqnum.Size(max(share, 0)), share < tcpWndShort, free
	}
	return w, false, free
}

// seg starts a segment from the flow's destination to the sandbox,
// acknowledging everything received so far.
func (f *tcpFlow) seg(flags header.TCPFlags, seq seqnum.Value) tcpSegment {
	w, short, free := f.windowLimit()
	if short {
		f.waitMem(free) // a window update once memory is given back
	}
	f.rcvWnd = w >> f.rcvShift << f.rcvShift
	s := tcpSegment{
		v6: f.v6, src: f.remoteAddr, dst: f.sandboxAddr, srcPort: f.key.dst.Port(), dstPort: f.key.src.Port(),
		flags: flags, seq: seq, ack: f.rcvNxt, wnd: uint16(f.rcvWnd >> f.rcvShift),
	}
	if f.has(urgToSandbox) {
		// Every segment before the urgent pointer carries it (RFC 9293
		// 3.8.5), retransmissions included, until it is acknowledged.
		switch {
		case !f.sndUna.LessThan(f.sndUp):
			f.flags &^= urgToSandbox
		case seq.LessThan(f.sndUp) && seq.Size(f.sndUp) <= 0xffff:
			s.flags |= header.TCPFlagUrg
			s.urg = uint16(seq.Size(f.sndUp))
		}
	}
	return s
}

// write sends seg; every segment carries the current ACK, so a delayed
// one is no longer due, and its timer stops. Left armed, it woke the
// loop for nothing once a millisecond on a request/response flow (the
// reply had carried the ACK), and when it ran out while a later request
// waited for its reply it sent a bare ACK before the reply could carry
// it: on the 1-byte round trip a wake-up every few round trips and a
// write and a TUN packet for about one in four.
func (f *tcpFlow) write(seg *tcpSegment, payload []byte) {
	f.rcvAcked = f.rcvNxt
	if f.has(ackTimerArmed) {
		f.flags &^= ackTimerArmed
		f.st.poll.stop(&f.ackTimer)
	}
	if err := f.st.writeTCP(seg, payload); err != nil {
		// A full or closed device: retransmission covers the first,
		// the flow's end the second.
		f.st.cfg.Logf("userstack: tcp segment to %s: %v", f.key.src, err)
	}
}

func (f *tcpFlow) sendAck() {
	if f.state == tcpDialing || f.state == tcpClosed {
		return
	}
	seg := f.seg(header.TCPFlagAck, f.sndNxt)
	f.write(&seg, nil)
}

func (f *tcpFlow) sendSynAck() {
	seg := f.seg(header.TCPFlagSyn|header.TCPFlagAck, f.iss)
	seg.wnd = uint16(min(f.window(), 0xffff)) // a SYN's window is never scaled
	seg.mss = uint16(f.st.maxSegment(f.v6))
	seg.ws = -1
	if f.rcvShift > 0 {
		seg.ws = int(f.rcvShift)
	}
	f.write(&seg, nil)
}

// sendReset resets the sandbox's side.
func (f *tcpFlow) sendReset() {
	seg := f.seg(header.TCPFlagRst|header.TCPFlagAck, f.sndNxt)
	if f.state == tcpDialing {
		seg.seq = 0
	}
	f.write(&seg, nil)
}
