package userstack

import (
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
)

// handleTCP receives the TCP segments gVisor's IP layer delivers (there
// are no gVisor TCP endpoints): the ones the TUN's fast path leaves to it
// (fragments, extension headers, unusual addresses), and every one on
// other links. It runs on the packet path and never blocks.
func (st *Stack) handleTCP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	h := header.TCP(pkt.TransportHeader().Slice())
	if !tcpHeaderOK(h) {
		return true // consumed: no RST for a malformed segment
	}
	var small [4][]byte
	n := pkt.Data().Size()
	st.tcpInput(&tcpIn{
		v6:          id.LocalAddress.BitLen() == 128,
		remoteAddr:  id.LocalAddress, // gVisor's "local" end is the destination
		sandboxAddr: id.RemoteAddress,
		key: flowKey{
			src: netip.AddrPortFrom(toAddr(id.RemoteAddress), id.RemotePort),
			dst: netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort),
		},
		h:    h,
		data: payloadSlices(small[:0], pkt, n),
		n:    n,
	})
	return true
}

// tcpInput takes a segment from the sandbox, from either path.
func (st *Stack) tcpInput(in *tcpIn) {
	if !tcpHeaderOK(in.h) {
		return // dropped unanswered, as a kernel drops a malformed segment
	}
	st.mu.Lock()
	f := st.tcp[in.key]
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return
	}
	if f == nil {
		st.newTCP(in)
		return
	}
	f.segment(in)
}

// tcpHeaderOK reports whether h is exactly one whole TCP header: its data
// offset at least the minimum header and equal to the header's length.
// Neither path hands on anything else: the fast path takes only such
// headers, and gVisor's parser, given a data offset below 5 words or past
// the segment's end, consumes the minimum header and leaves the offset as
// it was, which header.TCP's Options and Payload would then slice out of
// range (issue 15: a panic that took the launcher down).
func tcpHeaderOK(h header.TCP) bool {
	if len(h) < header.TCPMinimumSize {
		return false
	}
	off := int(h.DataOffset())
	return off >= header.TCPMinimumSize && off == len(h)
}

// ResetFor returns the sequence number, acknowledgement number and flags
// of the RST that answers seg (carrying n payload bytes) as a closed port
// does (RFC 9293 3.10.7.1); ok is false for a RST, which gets no answer.
// The jail's sink answers blocked segments with it too.
func ResetFor(seg header.TCP, n int) (seq, ack uint32, flags header.TCPFlags, ok bool) {
	in := seg.Flags()
	if in.Contains(header.TCPFlagRst) {
		return 0, 0, 0, false
	}
	if in.Contains(header.TCPFlagAck) {
		return seg.AckNumber(), 0, header.TCPFlagRst, true
	}
	ack = seg.SequenceNumber() + uint32(n)
	if in.Contains(header.TCPFlagSyn) {
		ack++
	}
	if in.Contains(header.TCPFlagFin) {
		ack++
	}
	return 0, ack, header.TCPFlagRst | header.TCPFlagAck, true
}

// rejectTCP answers a segment that belongs to no flow with a RST.
func (st *Stack) rejectTCP(in *tcpIn) {
	h := in.h
	seq, ack, out, ok := ResetFor(h, in.n)
	if !ok {
		return
	}
	seg := tcpSegment{v6: in.v6, src: in.remoteAddr, dst: in.sandboxAddr, srcPort: h.DestinationPort(), dstPort: h.SourcePort(), flags: out, seq: seqnum.Value(seq), ack: seqnum.Value(ack)}
	if err := st.writeTCP(&seg, nil); err != nil {
		st.cfg.Logf("userstack: tcp reset to %v: %v", in.key.src, err)
	}
}

// newTCP decides a segment for which there is no flow: a SYN starts one
// (policy check, then the dial in the background), anything else is reset.
func (st *Stack) newTCP(in *tcpIn) {
	h, key := in.h, in.key
	if h.Flags()&(header.TCPFlagSyn|header.TCPFlagAck|header.TCPFlagRst|header.TCPFlagFin) != header.TCPFlagSyn {
		st.rejectTCP(in)
		return
	}
	d := st.adm.Admit(netpolicy.ProtoTCP, key.src, key.dst) // package admission
	if d.Action == admission.Ask {
		if !st.askTCP(in, d.Name, d.HostPort, d.Rule) {
			return // held, or refused
		}
		d = st.adm.Approved(netpolicy.ProtoTCP, key.src, key.dst, d)
	}
	if d.Action == admission.Refuse {
		st.record(netpolicy.ProtoTCP, key.dst, d)
		st.rejectTCP(in) // "connection refused" at once
		return
	}
	// An allowed IPv6 destination may wait for the IPv6 gate (ready6.go):
	// on a worker, as a Dialer's dial does (Wait). A name's flow (Inspect)
	// is dialed by peek.go; the stack's own resolver (LocalDNS without a
	// target) is served by package names.
	named := d.Action == admission.Inspect
	ownDNS := d.Action == admission.LocalDNS && !d.Target.IsValid()
	opts := header.ParseSynOptions(h.Options(), false)
	f := &tcpFlow{
		st:          st,
		key:         key,
		v6:          in.v6,
		remoteAddr:  in.remoteAddr,
		sandboxAddr: in.sandboxAddr,
		pollFD:      pollFD{fd: -1},
		irs:         seqnum.Value(h.SequenceNumber()),
		rcvNxt:      seqnum.Value(h.SequenceNumber()).Add(1),
		rto:         tcpRTOMin,
	}
	f.ackTimer = newLoopTimer(f)
	f.rtoTimer = newLoopTimer(f)
	f.rcvAcked = f.rcvNxt
	if opts.WS >= 0 {
		f.sndShift = uint8(min(opts.WS, 14))
		f.rcvShift = tcpWndShift
	}
	f.sndWnd = seqnum.Size(h.WindowSize()) // a SYN's window is never scaled
	f.mss = int(opts.MSS)
	if f.mss == 0 {
		f.mss = tcpDefaultMSS
	}
	f.mss = min(f.mss, st.maxSegment(f.v6))
	if named {
		f.peek = newPeek(f, d.Name)
	}
	if st.cfg.OnFlowEnd != nil {
		f.start = st.cfg.Now()
		f.name = d.Name
	}
	st.mu.Lock()
	switch {
	case st.closed:
		st.mu.Unlock()
		return
	case st.tcp[key] != nil:
		st.mu.Unlock() // a retransmitted SYN raced the first
		return
	case len(st.tcp) >= st.cfg.MaxFlows:
		// Every flow holds a host socket: refused, as a blocked
		// destination is, not dropped (waiting would not help while the
		// sandbox keeps its connections open).
		n := len(st.tcp)
		st.mu.Unlock()
		st.blockName(netpolicy.ProtoTCP, key.dst, d.Name, fmt.Sprintf("too many TCP connections open at once (%d: the egress relay's cap, from the launcher's descriptor limit)", n))
		st.rejectTCP(in)
		return
	case st.opening >= st.cfg.MaxInFlight:
		st.mu.Unlock() // dropped: the sandbox retries the SYN
		return
	}
	st.tcp[key] = f
	st.tcpLive.Add(1)
	st.opening++
	f.opening = true
	if named || ownDNS {
		st.mu.Unlock()
		st.noteTCP(key, d)
		f.startName(d) // resolved and dialed; the SYN answered by the dial (peek.go)
		return
	}
	if st.cfg.Dialer == nil && d.Gate == nil {
		st.mu.Unlock()
		st.noteTCP(key, d)
		f.connect(d.Target)
		return
	}
	st.wg.Add(1)
	st.mu.Unlock()
	st.noteTCP(key, d)
	st.work.Go(func() { f.dial(d.Target, d.Gate) })
}

// segment handles a segment of an existing flow.
func (f *tcpFlow) segment(in *tcpIn) {
	h := in.h
	flags := h.Flags()
	seq := seqnum.Value(h.SequenceNumber())
	f.mu.Lock()
	defer f.unlock()
	switch f.state {
	case tcpClosed:
		return
	case tcpDialing:
		if flags.Contains(header.TCPFlagRst) {
			f.state = tcpClosed // the dial's result is closed when it comes
		}
		return // a retransmitted SYN: the answer comes when the dial does
	}
	if flags.Contains(header.TCPFlagRst) {
		// RFC 5961 3.2: a reset ends the flow only at exactly the next
		// sequence number; elsewhere in the window it gets a challenge
		// ACK (a genuine sender answers it with a reset at the right
		// number; a blind attacker cannot see it), and outside the
		// window it is dropped.
		switch {
		case seq == f.rcvNxt:
			f.flags |= resetHost
			f.state = tcpClosed
			f.endHow = "reset by the sandbox"
		case seq.InWindow(f.rcvNxt, f.window()):
			f.sendAck()
		}
		return
	}
	if flags.Contains(header.TCPFlagSyn) {
		if f.state == tcpSynRcvd && seq == f.irs && !flags.Contains(header.TCPFlagAck) {
			f.sendSynAck() // our SYN-ACK was lost
			return
		}
		f.sendAck() // challenge ACK (RFC 5961 4.2)
		return
	}
	if !flags.Contains(header.TCPFlagAck) {
		return
	}
	ack := seqnum.Value(h.AckNumber())
	if f.state == tcpSynRcvd {
		if ack != f.iss.Add(1) {
			return
		}
		f.state = tcpEstablished
		f.openDone()
		f.sndUna = ack
		f.retries, f.rto = 0, tcpRTOMin
		f.sndWnd = seqnum.Size(h.WindowSize()) << f.sndShift
		f.sndWL1, f.sndWL2 = seq, ack
		if f.peek != nil {
			f.peekEstablished()
		}
	}
	if in.n == 0 && !flags.Contains(header.TCPFlagFin) && seq.LessThan(f.rcvNxt) {
		// Not acceptable (RFC 9293 3.10.7.4): a keepalive or a zero
		// window probe, answered with the current ACK and window and
		// dropped before its ACK is looked at (a keepalive is no
		// duplicate ACK, its window no news). A bare segment past the
		// window is still taken for its ACK: the relay's window can
		// shrink under memory pressure (mem.go), and a sender's ACKs
		// from beyond the new edge must not be lost.
		f.sendAck()
		return
	}
	if !f.processAck(seq, ack, seqnum.Size(h.WindowSize())<<f.sndShift, in.n == 0 && !flags.Contains(header.TCPFlagFin)) {
		return
	}
	n := in.n
	if flags.Contains(header.TCPFlagUrg) && h.UrgentPointer() != 0 {
		// RFC 9293 3.10.7.4: the urgent pointer only moves forward.
		if up := seq.Add(seqnum.Size(h.UrgentPointer())); !f.has(urgFromSandbox) || f.rcvUp.LessThan(up) {
			if f.rcvNxt.LessThan(up) {
				f.flags |= urgFromSandbox
				f.rcvUp = up
			}
		}
	}
	switch {
	case f.state == tcpClosed:
	case n > 0 || flags.Contains(header.TCPFlagFin):
		f.processData(seq, in.data, n, flags.Contains(header.TCPFlagFin))
		if f.peek != nil {
			f.peekData()
		}
	case seq != f.rcvNxt:
		// In the window past a gap: a duplicate ACK (nothing past the
		// gap is kept).
		f.sendAck()
	}
	if f.has(hostSpokeFirst) && f.hostOpen() {
		// The host spoke first (a greeting, a banner) and its data waits
		// in the socket: send it now rather than a turn of the loop later.
		f.flags &^= hostSpokeFirst
		f.readSome()
	}
	f.maybeDone()
}

// processAck takes the sandbox's acknowledgement and window. It reports
// false for a segment that acknowledges what was never sent, which is
// answered with an ACK and dropped, data and all (RFC 9293 3.10.7.4).
func (f *tcpFlow) processAck(seq, ack seqnum.Value, wnd seqnum.Size, bare bool) bool {
	if f.sndNxt.LessThan(ack) {
		f.sendAck() // acknowledges what was never sent
		return false
	}
	old, advanced := ack.LessThan(f.sndUna), f.sndUna.LessThan(ack)
	switch {
	case f.sndUna.LessThan(ack):
		f.dropAcked(f.sndUna.Size(ack))
		f.sndUna = ack
		f.dupAcks, f.retries, f.rto = 0, 0, tcpRTOMin
		if f.sndUna != f.sndNxt {
			f.startRTO() // progress: the rest waits from now
		}
	case ack == f.sndUna && bare && f.sndUna != f.sndNxt && wnd == f.sndWnd:
		f.dupAcks++
		if f.dupAcks == 3 {
			f.retransmit(true) // fast retransmit
		}
	}
	if wnd == 0 && f.sndWnd == 0 {
		// An answer to a window probe: the sandbox is there, it just
		// does not read. Probing goes on (backing off) for as long as it
		// answers, as Linux's does.
		f.retries = 0
	}
	// RFC 9293 3.10.7.4: the window is taken from an ACK of sndUna or
	// later, and only from a segment no older than the one it was last
	// taken from (SND.WL1, SND.WL2): an old segment the sandbox's
	// network reordered carries an old window, and must not shrink (or
	// widen) the current one. As in Linux, an ACK of new data counts as
	// newer too, so that a segment from far ahead (past the window)
	// cannot hold the window still.
	if old || !(advanced || f.sndWL1.LessThan(seq) || (seq == f.sndWL1 && !ack.LessThan(f.sndWL2))) {
		return true
	}
	f.sndWnd, f.sndWL1, f.sndWL2 = wnd, seq, ack // a wider window: unlock reads the host again
	if wnd == 0 && f.sndUna == f.sndNxt && f.hostOpen() && !f.has(rtoTimerArmed) {
		f.startRTO() // a window probe, if the sandbox's update is lost
	}
	return true
}

// dropAcked releases n acknowledged bytes (the FIN's sequence number
// included, when it is acknowledged) from the front of sent.
func (f *tcpFlow) dropAcked(n seqnum.Size) {
	i := 0
	for ; i < len(f.sent) && n > 0; i++ {
		c := &f.sent[i]
		if seqnum.Size(len(c.data)) > n {
			c.data = c.data[n:]
			break
		}
		n -= seqnum.Size(len(c.data))
		f.st.memGive(c.cost)
		c.release()
	}
	if i > 0 {
		k := copy(f.sent, f.sent[i:])
		clear(f.sent[k:])
		f.sent = f.sent[:k]
		if cap(f.sent) > 256 && 4*k < cap(f.sent) {
			// Each chunk is charged four slots (tcpChunkOverhead):
			// a slice that many small chunks grew does not stay
			// that large once they are acknowledged.
			f.sent = append(make([]tcpChunk, 0, 2*k), f.sent...)
		}
	}
}

// processData takes the payload (and FIN) of an in-window segment: in
// order, it goes to the host; a gap or a duplicate is answered with an
// immediate ACK (the sandbox's fast retransmit fills gaps; nothing out of
// order is kept).
func (f *tcpFlow) processData(seq seqnum.Value, data [][]byte, n int, fin bool) {
	skip := 0
	if seq.LessThan(f.rcvNxt) {
		old := int(seq.Size(f.rcvNxt))
		if old > n || (old == n && !fin) {
			f.sendAck() // entirely old: a retransmission we already have
			return
		}
		skip = old
	} else if seq != f.rcvNxt {
		f.sendAck() // a gap: duplicate ACK
		return
	}
	if f.has(finFromSandbox) {
		f.sendAck()
		return
	}
	take := n - skip
	if room := f.rcvRoom(); take > room {
		take, fin = room, false // beyond the window: dropped
	}
	if take > 0 && f.watch != nil && !f.watchData(data, skip, take) {
		return
	}
	if take > 0 {
		var took int
		var ok bool
		if f.has(urgFromSandbox) && f.rcvNxt.Size(f.rcvUp-1) < seqnum.Size(take) {
			took, ok = f.toHostUrgent(data, skip, take)
		} else {
			took, ok = f.toHost(data, skip, take)
		}
		if !ok {
			return
		}
		f.rcvNxt.UpdateForward(seqnum.Size(took))
		f.up += uint64(took)
		if f.watch != nil {
			f.watchTook(took)
		}
		if took < take {
			// The relay's memory budget is spent: the rest is not
			// acknowledged (the sandbox sends it again), and the window
			// this ACK carries is what is left.
			f.sendAck()
			return
		}
	}
	if fin {
		f.rcvNxt++
		f.flags |= finFromSandbox
		f.shutHost()
		if f.has(finToSandbox) {
			f.sendAck() // the last segment of the flow
		} else {
			f.armAck() // the host's FIN, if it follows soon, carries it
		}
		return
	}
	if f.rcvAcked.Size(f.rcvNxt) >= tcpAckEvery {
		f.sendAck()
		return
	}
	f.armAck()
}
