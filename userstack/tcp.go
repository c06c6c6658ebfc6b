package userstack

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Theory of operation: the TCP relay.
//
// TCP is relayed, not terminated. gVisor's TCP endpoints are not used:
// each connection the sandbox opens is mapped segment by segment onto a
// host socket the relay dials for it. What the sandbox sends is written
// to that socket; what the socket reads is framed into segments to the
// sandbox. The relay keeps only the TCP state the sandbox's side needs
// (sequence numbers, both windows, and the host's data the sandbox has
// not acknowledged yet). Congestion control, RTT estimation and the
// retransmissions on the real path are the host kernel's business: the
// TUN hop is short and practically loss-free, so a fixed-floor timeout
// (go-back-N) and a fast retransmit of one segment on three duplicate
// ACKs are enough. Against gVisor's endpoints on the same path this
// about halves the CPU per round trip and per connection (no receive
// queue, no processor goroutine, no copy loop, no ACK per segment).
//
// A segment reaches tcpInput from the TUN's fast path, which takes only
// ordinary ones (see fastTCP), or through gVisor's IP layer (handleTCP),
// which validates the rest (fragments, extension headers) and drops what
// a non-loopback link must not carry. Neither is trusted further:
// tcpHeaderOK checks the header's length again.
//
// # Names and directions
//
// A flow is filed under its flowKey as the sandbox sent it: key.src is
// the sandbox's address and port, key.dst the destination it dialed.
// Segments the relay frames go the other way: from remoteAddr (key.dst's
// address, spoofed) to sandboxAddr (key.src's). "rcv" names the sandbox's
// data toward the host (the relay receives it), "snd" the host's data
// toward the sandbox (the relay sends it), as a TCP endpoint standing in
// for the remote end would name them.
//
// # A flow's life
//
//	SYN from the sandbox, policy allows   newTCP: flow filed, tcpDialing
//	  host connect completes              hostUp: SYN-ACK, tcpSynRcvd
//	  host connect fails                  RST, ICMP unreachable or
//	                                      silence (dialFailed), tcpClosed
//	sandbox ACKs the SYN-ACK              tcpEstablished
//	either side's FIN                     flagged (finFromSandbox, eofFromHost);
//	                                      the state stays established
//	both FINs passed on and acknowledged  maybeDone: tcpClosed
//	RST from the sandbox (exact seq),     tcpClosed (host socket closed,
//	host socket error, give-up on RTO     with a RST where it failed)
//
// tcpClosed is final: unlock tears the flow down (timers stopped, host
// socket closed, buffers released, table entry removed). A segment for a
// key with no flow gets a RST (rejectTCP), a SYN a new flow. There is no
// TIME-WAIT: a late retransmission of the sandbox's FIN meets no flow and
// is reset, which its kernel takes as the end it already saw.
//
// The half-closes are four flags (flowFlags): the sandbox's FIN accepted
// (finFromSandbox), then passed on as shutdown(SHUT_WR) once everything
// before it is written (finToHost); the host's EOF read (eofFromHost),
// then sent as a FIN once all its data is sent (finToSandbox). The flow
// ends when all four are set and the FIN is acknowledged.
//
// # Events
//
// Every event takes the flow's lock, acts, and leaves through unlock,
// which brings the host socket's epoll interest up to date (read while
// the sandbox's window has room and the memory budget allows; write while
// pend waits) and tears down a flow that closed.
//
//   - A segment from the sandbox (segment): RST and SYN checks (RFC 5961:
//     a RST ends the flow only at exactly rcvNxt, one elsewhere in the
//     window and any SYN get a challenge ACK), the handshake's ACK, the
//     acceptability of a bare segment (a keepalive or probe is answered
//     and dropped), the ACK and window (processAck; an ACK of what was
//     never sent drops the segment), then the data and FIN (processData):
//     data in order is written to the host socket at once, without
//     waiting (toHost); what the socket does not take is queued in pend.
//     Anything out of order is dropped with a duplicate ACK: nothing is
//     reassembled.
//   - The host socket readable (pollReady, readSome): read no more than
//     the sandbox's window and the memory budget allow, one segment per
//     read (at most the MSS), sent at once; EOF sends the FIN.
//   - The host socket writable: flush writes pend; once it is empty a
//     pending FIN is passed on and the window reopened.
//   - The host socket's error or hang-up: the next read or write meets
//     it; hostFailed resets the sandbox.
//   - The dial's end: connected (own sockets, on the loop) or dial (a
//     Dialer, on a worker).
//   - Memory given back (mem.go): flows held back send their reopened
//     window and read again.
//
// # Timers
//
// Two loop timers per flow (poll.go), both run on the event loop:
//
//   - ackTimer, the delayed ACK: a bare ACK waits tcpAckDelay for data to
//     ride on, unless tcpAckEvery bytes are unacknowledged.
//   - rtoTimer, one timer for four jobs by state: the dial's timeout
//     (tcpDialing, own sockets only); the SYN-ACK's retransmission
//     (tcpSynRcvd, tcpSynRetries times); the retransmission of host data
//     and FIN (go-back-N from sndUna, tcpRTOMin doubling to tcpRTOMax,
//     tcpMaxRetries timeouts without progress reset the flow); and the
//     zero-window probe (a bare ACK at sndUna-1, out of window on
//     purpose, so that the sandbox answers with its window; never given
//     up while the sandbox answers). The timer is lazy: progress moves
//     rtoFrom only, and the timer, when it runs out, re-arms for what is
//     left.
//
// There is no idle timer. An idle flow lives as long as both ends do: the
// host socket's keepalive (tcpKeepIdle, tcpKeepIntvl, tcpKeepCnt) finds a
// remote end that vanished and resets the sandbox; the sandbox's own
// keepalives are answered by the relay (a segment just below rcvNxt gets
// the current ACK) and never reach the host.
//
// # Invariants
//
// Sequence numbers (seqnum.Value, compared modulo 2^32):
//
//   - The sandbox's space: irs is its SYN; rcvNxt the next byte the relay
//     expects. Everything below rcvNxt was taken: written to the host
//     socket or queued in pend (an ACK says the relay has the byte, not
//     that the remote end does). rcvAcked is the last ACK number sent;
//     rcvAcked != rcvNxt means an ACK is owed (ackTimer).
//   - The relay's space: iss is its SYN-ACK's (random; tests fix it);
//     [sndUna, sndNxt) is in flight: in tcpSynRcvd exactly the SYN; in
//     tcpEstablished exactly the bytes of sent, plus one for the FIN once
//     finToSandbox until it is acknowledged. sent holds one chunk per
//     segment sent, front-trimmed by partial ACKs.
//   - The send window: sndWnd (bytes, already scaled) is taken only from
//     the newest segment (RFC 9293 3.10.7.4: sndWL1 and sndWL2 are the
//     sequence and ACK numbers of the segment it came from; an older one,
//     reordered, leaves it alone; an ACK of new data counts as newer, as
//     in Linux), and never from an ACK below sndUna. New data is sent
//     only while sndNxt - sndUna is below min(sndWnd, tcpSndBuf) (space);
//     a window the sandbox shrinks stops new data, and what is in flight
//     stays there.
//
// Buffering, and what bounds it:
//
//   - pend, the sandbox's data the host socket has not taken: at most
//     tcpRcvBuf per flow; the window advertised to the sandbox is what is
//     left of it, at most the flow's share of what is free of the memory
//     budget (rcvWnd, rounded down to the window scale).
//   - sent, the host's data the sandbox has not acknowledged: at most
//     min(sndWnd, tcpSndBuf) per flow; nothing is read from the host socket
//     beyond it, so the rest waits in the host kernel's receive buffer and
//     its window throttles the remote sender.
//   - Both are charged to the relay's memory budget (mem.go) before they
//     are held, and given back when they are let go.
//   - Nothing out of order is kept, in either direction.
//
// Who may touch a flow: every field but st, key, v6, remoteAddr and
// sandboxAddr (fixed when the flow is made) is guarded by mu. The code
// that takes it: the event loop (the TUN's input in production, host
// socket readiness, timers, the memory wake-up), a worker finishing a
// Dialer's dial, the goroutine that injects packets on a link other than
// the TUN (tests' channel endpoint) and Stack.Close. opening is also
// guarded by the stack's mu (set and cleared under both). Lock order:
// a flow's mu, then the stack's mu, never the other way. The host
// socket is read and written only under mu and only while the flow is
// not closed; unlock closes it under mu, so no I/O reaches a reused
// descriptor. Why a lock and not confinement to the loop: a Dialer's dial
// ends on a worker, gVisor's channel endpoint delivers on its caller's
// goroutine, and Close runs on its caller's; in production (the TUN, the
// stack's own sockets) everything but Close runs on the loop, and mu is
// never contended.
//
// # Deliberately absent
//
//   - SACK: not offered (the SYN-ACK carries no SACK-permitted), so the
//     sandbox sends no SACK blocks; one it sends anyway is ignored.
//   - Timestamps: not offered and ignored; RTT is not measured.
//   - Out-of-order reassembly: a gap gets a duplicate ACK and the
//     segment is dropped; the sandbox's fast retransmit fills it.
//   - Congestion control, Nagle, silly-window avoidance, path MTU
//     discovery, ECN: the host kernel does these on the real path.
//   - TIME-WAIT, and an idle timeout (see above).
//   - Simultaneous open and connections from the host to the sandbox: the
//     sandbox only connects out.
//   - A RST for a wrong ACK in SYN-RCVD (RFC 9293 answers one): it is
//     dropped, and the SYN-ACK's retransmission resynchronises.
//   - RFC 5961's ACK range check (section 5) and challenge ACK rate limit
//     (section 7): the only sender on the link is the sandbox, which can
//     reset or flood its own connections anyway.
//
// tcptest_test.go is the relay's harness in the manner of gVisor's TCP
// tests (fixed ISS, a fake retransmission clock, SYN options, a barrier);
// where the relay differs from a full TCP its tests say what it does and
// why. conformance_test.go scripts whole exchanges.
//
// Window scaling is present: offered (tcpWndShift) when the sandbox's SYN
// offers it, and the sandbox's scale (at most 14) applied to its windows.
// The MSS is the sandbox's (default tcpDefaultMSS) capped by the link's
// MTU. Urgent data is relayed both ways (see toHostUrgent, readSome).

const (
	// tcpWndShift is the window scale the stack offers.
	tcpWndShift = 7
	// tcpRcvBuf bounds the sandbox's data buffered per flow while the
	// host socket is full; the advertised window is what is left of it.
	tcpRcvBuf = 4 << 20
	// tcpSndBuf bounds the host's data in flight to the sandbox per flow.
	tcpSndBuf = 4 << 20
	// tcpAckDelay is how long a bare ACK waits for data to ride on, like
	// a kernel's delayed ACK (shorter: the event loop's timers have
	// millisecond resolution, epoll_wait's), unless tcpAckEvery bytes are
	// unacknowledged.
	tcpAckDelay = time.Millisecond
	tcpAckEvery = 64 << 10
	// Retransmission to the sandbox: the first timeout, its cap, and how
	// many timeouts in a row end the flow (the sandbox is gone).
	tcpRTOMin     = 200 * time.Millisecond
	tcpRTOMax     = 10 * time.Second
	tcpMaxRetries = 8
	// tcpDefaultMSS is TCP's default when a SYN carries no MSS option.
	tcpDefaultMSS = 536
	// tcpReadMax is the most one read from a host socket takes (one
	// segment); reads shorter than half of it are copied out of the
	// pooled buffer, so that data waiting for the sandbox's ACK never
	// pins more than twice its size (a sandbox can ask for small
	// segments with its MSS).
	tcpReadMax   = 64 << 10
	tcpCopyBelow = tcpReadMax / 2
	// tcpPendChunk is the least a buffer for sandbox data waiting for the
	// host socket holds: small segments share one, so that their count
	// does not multiply the memory their bytes take.
	tcpPendChunk = 16 << 10
	// tcpWndShort: a window the memory budget narrows below this waits
	// for memory to be given back, to be widened (mem.go).
	tcpWndShort = 64 << 10
	// tcpSynRetries bounds the SYN-ACK retransmissions to a sandbox that
	// never completes its handshake (the host socket is open meanwhile).
	tcpSynRetries = 5
	// maxIovecs is the kernel's limit on one writev (IOV_MAX).
	maxIovecs = 1024
	// The host sockets' keepalive, Go's net package's defaults: probes
	// after 15 s idle, every 15 s, 9 unanswered ones end the connection.
	tcpKeepIdle  = 15
	tcpKeepIntvl = 15
	tcpKeepCnt   = 9
)

type tcpState uint8

const (
	tcpDialing     tcpState = iota // SYN seen, host dial in progress
	tcpSynRcvd                     // SYN-ACK sent
	tcpEstablished                 // handshake done (either side may have closed its half)
	tcpClosed                      // gone: nothing more is sent or relayed
)

// readBuffers recycles the 64 KiB buffers host data is read into.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, tcpReadMax); return &b }}

// tcpChunk is data sent to the sandbox and not yet acknowledged: exactly
// one segment's payload (front-trimmed by a partial ACK).
type tcpChunk struct {
	data   []byte
	pooled *[]byte // the read buffer data lives in, if pooled
	cost   int     // what it holds of the relay's memory budget
}

// tcpFlow is one relayed connection.
//
// Locking. The fields above mu are fixed before the flow is filed in the
// stack's table (under the stack's mu, which publishes them) and read
// without a lock. Every field below mu is guarded by mu, with two
// exceptions, each marked: opening (also under the stack's mu) and the
// loop timers' own bookkeeping (the poller's). Whoever acts on a flow
// takes mu and leaves through unlock: the event loop (the TUN's input,
// host socket readiness, timers, the memory wake-up), a worker ending a
// Dialer's dial, a goroutine injecting packets on another link (tests),
// and Stack.Close. The stack's mu may be taken under a flow's mu, never
// the other way round.
//
// The host socket is read and written with plain system calls on its
// descriptor, under mu, only while the flow is not closed, and closed
// under mu when the flow closes: no I/O reaches a reused descriptor. The
// event loop reads it while the sandbox's window has room, and writes
// what the sandbox sent that the socket did not take at once (pend).
type tcpFlow struct {
	// Fixed when the flow is made: no lock.
	st  *Stack
	key flowKey // src: the sandbox's end; dst: the destination it dialed
	v6  bool
	// The two ends' addresses, for framing: segments to the sandbox go
	// from remoteAddr (key.dst's address) to sandboxAddr (key.src's).
	remoteAddr, sandboxAddr tcpip.Address

	// Guarded by mu: everything from here on.
	mu    sync.Mutex
	state tcpState
	// pollFD: the host socket (fd, -1 before the dial) and its
	// registration on the event loop.
	pollFD
	flags flowFlags // what has happened to the flow (see flowFlags)
	// opening: counted in st.opening (dialing or SYN-RCVD). Guarded by
	// both mu and the stack's mu: set and cleared under both, read under
	// either. Not a bit of flags: those change under mu alone.
	opening bool

	// The sandbox's data, toward the host.
	irs      seqnum.Value
	rcvNxt   seqnum.Value
	rcvAcked seqnum.Value // the last ACK number sent
	rcvWnd   seqnum.Size  // the last window sent, in bytes
	rcvShift uint8        // our window scale (0 if the sandbox offered none)
	pend     [][]byte     // accepted and acknowledged, not yet written to the host
	pendLen  int          // held of the relay's memory budget
	rcvUp    seqnum.Value // one past the sandbox's urgent byte (BSD, as Linux sends), with urgFromSandbox

	// The host's data, toward the sandbox.
	iss      seqnum.Value
	sndUna   seqnum.Value
	sndNxt   seqnum.Value
	sndWnd   seqnum.Size  // the sandbox's window, in bytes
	sndWL1   seqnum.Value // the sequence number of the segment sndWnd came from (SND.WL1)
	sndWL2   seqnum.Value // and its ACK number (SND.WL2)
	sndShift uint8
	mss      int
	sent     []tcpChunk   // from sndUna on
	sndUp    seqnum.Value // one past the host's urgent byte, in the sandbox's sequence, with urgToSandbox
	dupAcks  int
	retries  int
	rto      time.Duration

	// The timers: armed and stopped under mu (ackTimerArmed and
	// rtoTimerArmed say which run); their heap position and deadline are
	// the poller's, under its own lock.
	ackTimer loopTimer
	rtoTimer loopTimer // the dial's timeout while dialing
	rtoFrom  time.Time // since when the oldest outstanding segment waits

	peek  *peekState // a flow to a name not dialed yet (peek.go)
	watch *flowWatch // a flow to a name dialed before its first message (peekwatch.go)
}

// flowFlags are what has happened to a flow beyond its state: the
// half-closes each way, urgent data each way, the timers armed, and the
// conditions the event loop waits on. A typed bit set, so that a flow
// prints readably (String) in logs and test failures.
type flowFlags uint16

const (
	// The sandbox's data, toward the host.
	finFromSandbox flowFlags = 1 << iota // the sandbox's FIN is accepted (rcvNxt counts it)
	finToHost                            // passed on: the host socket's sending side is shut (SHUT_WR)
	pendWaiting                          // pend waits for room in the host socket
	urgFromSandbox                       // the sandbox sent urgent data: rcvUp is its pointer
	// The host's data, toward the sandbox.
	eofFromHost    // the host socket read its end
	finToSandbox   // the host's FIN is sent (sndNxt counts it)
	urgFromHost    // the host socket has urgent data not yet read (EPOLLPRI)
	urgToSandbox   // segments before sndUp carry URG
	hostSpokeFirst // the host's data came before the sandbox's handshake ended
	// Timers and waits.
	ackTimerArmed // the delayed ACK is due
	rtoTimerArmed // the retransmission (or probe, SYN-ACK, dial) timer runs
	waitingMem    // on the stack's list of flows waiting for memory (mem.go)
	// The end.
	resetHost // close the host socket with a RST (SO_LINGER 0)
	tornDown  // torn down: timers stopped, table entry removed
)

var flowFlagNames = [...]string{
	"FIN_FROM_SANDBOX", "FIN_TO_HOST", "PEND_WAITING", "URG_FROM_SANDBOX",
	"EOF_FROM_HOST", "FIN_TO_SANDBOX", "URG_FROM_HOST", "URG_TO_SANDBOX", "HOST_SPOKE_FIRST",
	"ACK_TIMER", "RTO_TIMER", "WAITING_MEM",
	"RESET_HOST", "TORN_DOWN",
}

// String names the flags set, "|"-separated ("-" for none).
func (fl flowFlags) String() string {
	if fl == 0 {
		return "-"
	}
	var b []byte
	for i, name := range flowFlagNames {
		if fl&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, name...)
		}
	}
	if rest := fl &^ (1<<len(flowFlagNames) - 1); rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = fmt.Appendf(b, "%#x", uint16(rest))
	}
	return string(b)
}

// has reports whether every flag of fl is set.
func (f *tcpFlow) has(fl flowFlags) bool { return f.flags&fl == fl }

func (s tcpState) String() string {
	switch s {
	case tcpDialing:
		return "DIALING"
	case tcpSynRcvd:
		return "SYN_RCVD"
	case tcpEstablished:
		return "ESTABLISHED"
	case tcpClosed:
		return "CLOSED"
	}
	return fmt.Sprintf("tcpState(%d)", uint8(s))
}

// String describes f (under f.mu) for logs and tests: its ends, state,
// flags and sequence numbers relative to the initial ones.
func (f *tcpFlow) String() string {
	return fmt.Sprintf("%s -> %s %s [%s] rcv %d+%d wnd %d, snd %d..%d wnd %d",
		f.key.src, f.key.dst, f.state, f.flags,
		f.irs.Add(1).Size(f.rcvNxt), f.pendLen, f.rcvWnd,
		f.iss.Add(1).Size(f.sndUna), f.iss.Add(1).Size(f.sndNxt), f.sndWnd)
}

// tcpIn is a segment from the sandbox.
type tcpIn struct {
	v6          bool
	remoteAddr  tcpip.Address // the destination the sandbox addressed
	sandboxAddr tcpip.Address // the sandbox's address
	key         flowKey
	h           header.TCP // with its options
	data        [][]byte   // the payload
	n           int        // its length
}

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
	var nf *nameFlow // the domain allowlist's (names.go)
	target, ok := netip.AddrPort{}, true
	if st.names != nil {
		nf, ok = st.names.admit(netpolicy.ProtoTCP, key.dst)
		ok = !ok
	}
	if ok && nf == nil {
		target, ok = st.tcpTarget(key.dst)
	}
	if !ok {
		st.rejectTCP(in) // "connection refused" at once
		return
	}
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
	st.mu.Lock()
	switch {
	case st.closed:
		st.mu.Unlock()
		return
	case st.tcp[key] != nil:
		st.mu.Unlock() // a retransmitted SYN raced the first
		return
	case st.opening >= st.cfg.MaxInFlight:
		st.mu.Unlock() // dropped: the sandbox retries the SYN
		return
	}
	st.tcp[key] = f
	st.tcpLive.Add(1)
	st.opening++
	f.opening = true
	if nf != nil {
		st.mu.Unlock()
		f.startName(nf) // the SYN answered at once (peek.go)
		return
	}
	if st.cfg.Dialer == nil {
		st.mu.Unlock()
		f.connect(target)
		return
	}
	st.wg.Add(1)
	st.mu.Unlock()
	st.work.Go(func() { f.dial(target) })
}

// goFlow runs fn, which calls st.wg.Done when it returns, on a worker; it
// reports false when the stack is closing.
func (st *Stack) goFlow(fn func()) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.wg.Add(1)
	st.work.Go(fn)
	return true
}

// maxSegment is the largest TCP payload that fits the link's MTU.
func (st *Stack) maxSegment(v6 bool) int {
	return int(st.ep.MTU()) - ipHeaderLen(v6) - header.TCPMinimumSize
}

// tcpTarget returns where a connection to dst goes: the upstream resolver
// for port 53 of a local address, dst itself when the policy allows it. It
// records a Block for a refused destination.
func (st *Stack) tcpTarget(dst netip.AddrPort) (netip.AddrPort, bool) {
	if st.isLocal(dst.Addr()) {
		if dst.Port() == netpolicy.DNSPort {
			return st.upstream()
		}
		if t, ok := st.hostPortTarget(netpolicy.ProtoTCP, dst); ok {
			return t, true
		}
		st.block(netpolicy.ProtoTCP, dst, "local address, not a DNS port")
		return netip.AddrPort{}, false
	}
	if v := st.check(netpolicy.ProtoTCP, dst); !v.Allowed {
		st.block(netpolicy.ProtoTCP, dst, v.Rule)
		return netip.AddrPort{}, false
	}
	return dst, true
}

// connect opens the host side with a non-blocking connect, which the
// event loop sees complete (pollReady); only then is the SYN answered, so
// that a refused or unreachable destination gives the sandbox a RST
// instead of an accepted connection that then closes.
func (f *tcpFlow) connect(target netip.AddrPort) {
	fd, err := dialSocket(unix.SOCK_STREAM, target)
	f.mu.Lock()
	defer f.unlock()
	if err != nil {
		f.dialFailed(err)
		return
	}
	f.fd = fd
	if f.state != tcpDialing {
		f.state = tcpClosed // closed meanwhile: unlock closes fd
		return
	}
	f.armRTO(f.st.cfg.DialTimeout)
}

// connected takes the outcome of the non-blocking connect.
func (f *tcpFlow) connected() {
	n, err := unix.GetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err == nil && n != 0 {
		err = syscall.Errno(n)
	}
	if err != nil {
		f.dialFailed(err)
		return
	}
	f.stopRTO()
	f.hostUp()
}

// dialFailed passes the outcome of a failed host-side connect on to the
// sandbox as the destination's network would (issue 15): refused, a RST
// (ECONNREFUSED); unreachable, an ICMP destination unreachable, which a
// connecting kernel takes as fatal (EHOSTUNREACH, ENETUNREACH); timed
// out, nothing: the flow ends silently, and the sandbox's own SYN
// retries time out as they would (ETIMEDOUT), each retry after the flow
// ended trying the destination again. Any other failure (no local port,
// a Dialer's own error) is refused with a RST.
func (f *tcpFlow) dialFailed(err error) {
	if f.state != tcpDialing {
		return // reset or closed meanwhile
	}
	f.st.cfg.Logf("userstack: dial tcp %s: %v", f.key.dst, err)
	switch {
	case errors.Is(err, errDialTimeout) || errors.Is(err, unix.ETIMEDOUT) || errors.Is(err, context.DeadlineExceeded):
	case errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.EHOSTDOWN):
		f.st.tcpUnreachable(f, false)
	case errors.Is(err, unix.ENETUNREACH):
		f.st.tcpUnreachable(f, true)
	default:
		f.sendReset()
	}
	f.state = tcpClosed
}

// dial opens the host side through the configured Dialer (on a worker:
// it may block), then goes on as connected does.
func (f *tcpFlow) dial(target netip.AddrPort) {
	st := f.st
	defer st.wg.Done()
	fd, err := st.dialConn("tcp", target)
	f.mu.Lock()
	defer f.unlock()
	if err != nil {
		f.dialFailed(err)
		return
	}
	f.fd = fd // closed by unlock if the flow is
	if f.state != tcpDialing || st.ctx.Err() != nil {
		// Reset by the sandbox, or the stack is closing, while dialing.
		f.state = tcpClosed
		return
	}
	f.hostUp()
}

// hostUp answers the SYN once the host side is connected.
func (f *tcpFlow) hostUp() {
	// Urgent data stays in the stream, in its place (reads stop at its
	// mark, which SIOCATMARK tells): readSome marks it for the sandbox.
	_ = unix.SetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_OOBINLINE, 1)
	f.iss = seqnum.Value(f.st.cfg.tcpISS())
	f.sndUna, f.sndNxt = f.iss, f.iss.Add(1)
	f.state = tcpSynRcvd
	f.sendSynAck()
	f.startRTO()
}

// tcpISS picks an initial sequence number: Config's default (tests fix
// theirs through Config.tcpISS).
func tcpISS() uint32 { return rand.Uint32() }

// errDialTimeout: the stack's own connect took longer than DialTimeout.
var errDialTimeout = errors.New("timed out")

// dialConn dials target through the configured Dialer, with the dial
// timeout, and takes the conn's descriptor over (see detachConn).
func (st *Stack) dialConn(network string, target netip.AddrPort) (int, error) {
	ctx, cancel := context.WithTimeout(st.ctx, st.cfg.DialTimeout)
	defer cancel()
	out, err := st.cfg.Dialer.DialContext(ctx, network, target.String())
	if err != nil {
		return -1, err
	}
	return detachConn(out)
}

// errNoDescriptor: the Dialer's contract is a conn with a descriptor.
var errNoDescriptor = errors.New("the dialed conn has no descriptor (Dialer must return a syscall.Conn)")

// detachConn takes c's descriptor over: a duplicate (see dupFD), with c
// closed, which takes it out of Go's netpoller.
func detachConn(c net.Conn) (int, error) {
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errNoDescriptor
	}
	return dupFD(sc)
}

// dialSocket opens a non-blocking socket of type typ connected (or, for
// TCP, connecting) to to.
func dialSocket(typ int, to netip.AddrPort) (int, error) {
	a := to.Addr().Unmap()
	var sa unix.Sockaddr
	family := unix.AF_INET
	if a.Is4() {
		sa = &unix.SockaddrInet4{Port: int(to.Port()), Addr: a.As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(to.Port()), Addr: a.As16()}
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if typ == unix.SOCK_STREAM {
		// As Go's net package does: each segment the sandbox sends
		// leaves at once (the sandbox's own stack already batched), and
		// keepalives find a remote end that vanished (or a NAT that
		// forgot the connection) on an idle connection, which then ends
		// with a RST to the sandbox. The sandbox's own keepalives stop
		// at the relay, which answers them.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, tcpKeepIdle)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, tcpKeepIntvl)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, tcpKeepCnt)
	}
	if err := unix.Connect(fd, sa); err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pollReady runs on the event loop when the host socket is ready.
func (f *tcpFlow) pollReady(events uint32) {
	f.mu.Lock()
	defer f.unlock()
	switch f.state {
	case tcpClosed:
		return
	case tcpDialing:
		f.connected()
		return
	case tcpSynRcvd:
		if events&unix.EPOLLERR != 0 {
			n, _ := unix.GetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_ERROR)
			f.hostFailed(syscall.Errno(n))
			return
		}
		f.flags |= hostSpokeFirst // read once the sandbox completes its handshake
		return
	}
	if f.has(pendWaiting) && events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		f.flush()
	}
	if events&unix.EPOLLPRI != 0 {
		f.flags |= urgFromHost
	}
	if f.hostOpen() && events&(unix.EPOLLIN|unix.EPOLLPRI|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		f.readSome()
	}
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
		f.st.mu.Lock()
		f.st.opening--
		f.st.mu.Unlock()
		f.opening = false
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
	}
}

func (c *tcpChunk) release() {
	if c.pooled != nil {
		readBuffers.Put(c.pooled)
	}
	*c = tcpChunk{}
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

// toHost writes take bytes of the segment's payload, from skip on, to the
// host socket without waiting; what does not fit is copied to pend and
// written when the socket has room (flush), as far as the relay's memory
// budget allows. It returns how many bytes it took, and false when the
// flow failed.
func (f *tcpFlow) toHost(data [][]byte, skip, take int) (int, bool) {
	var small [4][]byte
	parts := cutSlices(small[:0], data, skip, take)
	if !f.has(pendWaiting) {
		n, err := rawWritev(f.fd, parts)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			n = 0
		case err != nil:
			f.hostFailed(err)
			return 0, false
		}
		parts = trimFront(parts, n)
	}
	rest := 0
	for _, p := range parts {
		rest += len(p)
	}
	if rest == 0 {
		return take, true
	}
	grant := f.st.memTake(rest)
	took := take - rest + grant
	parts = truncParts(parts, grant)
	if len(parts) == 0 {
		return took, true
	}
	for _, p := range parts {
		f.pendLen += len(p)
		if k := len(f.pend) - 1; k >= 0 && cap(f.pend[k])-len(f.pend[k]) >= len(p) {
			f.pend[k] = append(f.pend[k], p...)
			continue
		}
		f.pend = append(f.pend, append(make([]byte, 0, max(len(p), tcpPendChunk)), p...))
	}
	f.flags |= pendWaiting
	return took, true
}

// toHostUrgent is toHost for data that holds the sandbox's urgent byte:
// the bytes before it are written, then the byte with MSG_OOB (so the
// host kernel sends it with an urgent pointer, and the server reads it
// with recv(MSG_OOB) or at its mark, SIGURG raised), then the rest. When
// the bytes before it could not all go to the socket at once (it is full)
// the byte goes in line, in its place: urgent data may not overtake the
// data before it.
func (f *tcpFlow) toHostUrgent(data [][]byte, skip, take int) (int, bool) {
	at := int(f.rcvNxt.Size(f.rcvUp - 1))
	f.flags &^= urgFromSandbox
	took, ok := f.toHost(data, skip, at)
	if !ok || took < at || f.has(pendWaiting) {
		if ok && took == at {
			more, ok := f.toHost(data, skip+at, take-at)
			return took + more, ok
		}
		return took, ok
	}
	var one [1]byte
	var small [4][]byte
	copy(one[:], cutSlices(small[:0], data, skip+at, 1)[0])
	if n, err := unix.SendmsgN(f.fd, one[:], nil, nil, unix.MSG_OOB|unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL); err != nil || n != 1 {
		more, ok := f.toHost(data, skip+at, take-at) // in line
		return took + more, ok
	}
	took++
	if rest := take - at - 1; rest > 0 {
		more, ok := f.toHost(data, skip+at+1, rest)
		return took + more, ok
	}
	return took, true
}

// truncParts keeps the first n bytes of parts.
func truncParts(parts [][]byte, n int) [][]byte {
	for i, p := range parts {
		if n <= len(p) {
			parts[i] = p[:n]
			if n == 0 {
				i--
			}
			clear(parts[i+1:])
			return parts[:i+1]
		}
		n -= len(p)
	}
	return parts
}

// payloadSlices appends the slices holding the n bytes of pkt's payload.
func payloadSlices(dst [][]byte, pkt *stack.PacketBuffer, n int) [][]byte {
	return cutSlices(dst, pkt.AsSlices(), pkt.HeaderSize(), n)
}

// cutSlices appends the slices of src that hold take bytes from skip on.
func cutSlices(dst, src [][]byte, skip, take int) [][]byte {
	for _, s := range src {
		if take == 0 {
			break
		}
		if skip >= len(s) {
			skip -= len(s)
			continue
		}
		s = s[skip:]
		skip = 0
		if len(s) > take {
			s = s[:take]
		}
		dst = append(dst, s)
		take -= len(s)
	}
	return dst
}

// trimFront drops n bytes from the front of parts (letting go of the
// slices it passes).
func trimFront(parts [][]byte, n int) [][]byte {
	for len(parts) > 0 && n >= len(parts[0]) {
		n -= len(parts[0])
		parts[0] = nil
		parts = parts[1:]
	}
	if n > 0 {
		parts[0] = parts[0][n:]
	}
	return parts
}

// flush writes pend to the host socket as far as it has room, and once
// all is written passes on a FIN and reopens the window it had narrowed.
func (f *tcpFlow) flush() {
	for f.state != tcpClosed && len(f.pend) > 0 {
		n, err := rawWritev(f.fd, f.pend[:min(len(f.pend), maxIovecs)])
		if err == unix.EAGAIN || err == unix.EINTR {
			return // the loop calls again when there is room
		}
		if err != nil {
			f.hostFailed(err)
			break
		}
		f.pendLen -= n
		f.st.memGive(n)
		f.pend = trimFront(f.pend, n)
	}
	f.st.memGive(f.pendLen) // what a failed host socket will never take
	f.pend, f.pendLen = nil, 0
	f.flags &^= pendWaiting
	if f.state != tcpClosed {
		f.shutHost()
		// The window reopens: say so if it had closed below half.
		if f.rcvNxt != f.rcvAcked || f.rcvWnd < tcpRcvBuf/2 {
			f.sendAck()
		}
		f.maybeDone()
	}
}

// shutHost passes the sandbox's FIN on once everything before it is
// written.
func (f *tcpFlow) shutHost() {
	if !f.has(finFromSandbox) || f.has(finToHost) || f.has(pendWaiting) {
		return
	}
	f.flags |= finToHost
	if err := unix.Shutdown(f.fd, unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
		f.hostFailed(err)
	}
}

// hostBurst bounds the reads of one socket in one turn of the loop.
const hostBurst = 16

// readSome reads the host socket as far as the sandbox's window allows
// and sends what it reads. A read shorter than asked ends the turn: the
// socket is drained, and whatever comes next (an EOF already queued
// behind the data, too) keeps it readable for the loop's next wait.
func (f *tcpFlow) readSome() {
	for i := 0; i < hostBurst; i++ {
		room := min(f.space(), f.mss, tcpReadMax)
		if room == 0 {
			return // the window closed: unlock narrows the interest
		}
		// What the read may cost of the memory budget, taken before it:
		// a pooled buffer whole, or (short of that) a read small enough
		// to be copied out.
		grant := f.st.memTake(tcpReadMax)
		if grant == 0 {
			f.waitMem(0)
			return // unlock narrows the interest
		}
		if grant < tcpReadMax {
			room = min(room, grant, tcpCopyBelow-1)
		}
		urgent := false
		if f.has(urgFromHost) {
			// A read stops short of the mark: at it, the first byte
			// read is the urgent one.
			if at, err := unix.IoctlGetInt(f.fd, unix.SIOCATMARK); err == nil && at == 1 {
				urgent = true
				f.flags &^= urgFromHost
			}
		}
		buf := readBuffers.Get().(*[]byte)
		n, err := rawRead(f.fd, (*buf)[:room])
		if urgent && err == nil && n > 0 {
			f.flags |= urgToSandbox
			f.sndUp = f.sndNxt.Add(1)
		}
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			readBuffers.Put(buf)
			f.st.memGive(grant)
			return
		case err != nil:
			readBuffers.Put(buf)
			f.st.memGive(grant)
			f.hostFailed(err)
			return
		case n == 0:
			readBuffers.Put(buf)
			f.st.memGive(grant)
			f.flags |= eofFromHost
			f.sendFin()
			f.maybeDone()
			return
		}
		c := tcpChunk{data: (*buf)[:n], pooled: buf, cost: tcpReadMax}
		if n < tcpCopyBelow {
			c = tcpChunk{data: append([]byte(nil), (*buf)[:n]...), cost: n}
			readBuffers.Put(buf)
		}
		f.st.memGive(grant - c.cost)
		f.sendData(c)
		if n < room {
			return
		}
	}
}

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
// one is no longer due.
func (f *tcpFlow) write(seg *tcpSegment, payload []byte) {
	f.rcvAcked = f.rcvNxt
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

// hostFailed ends the flow after a host socket error: the sandbox gets a
// RST, as it would from the remote end.
func (f *tcpFlow) hostFailed(err error) {
	if f.state == tcpClosed {
		return
	}
	f.st.cfg.Logf("userstack: tcp %v: host side: %v", f, err)
	f.sendReset()
	f.flags |= resetHost
	f.state = tcpClosed
}

// hostOpen reports whether the host side is still read: established, and
// no EOF from the host yet.
func (f *tcpFlow) hostOpen() bool { return f.state == tcpEstablished && !f.has(eofFromHost) }

// maybeDone ends a flow both sides have closed and acknowledged.
func (f *tcpFlow) maybeDone() {
	if f.state == tcpEstablished && f.has(finFromSandbox) && f.has(finToHost) && !f.has(pendWaiting) &&
		f.has(finToSandbox) && f.sndUna == f.sndNxt && !f.hostOpen() {
		f.state = tcpClosed
	}
}

// Timers. Both run on the event loop and take mu.

func (f *tcpFlow) timerFired(t *loopTimer) {
	if t == &f.ackTimer {
		f.onAckTimer()
		return
	}
	f.onRTO()
}

func (f *tcpFlow) armAck() {
	if f.has(ackTimerArmed) {
		return
	}
	f.flags |= ackTimerArmed
	f.st.poll.arm(&f.ackTimer, tcpAckDelay)
}

func (f *tcpFlow) onAckTimer() {
	f.mu.Lock()
	defer f.unlock()
	f.flags &^= ackTimerArmed
	if f.rcvAcked != f.rcvNxt {
		f.sendAck()
	}
}

// The retransmission timer is lazy: progress only moves rtoFrom, and the
// timer, once armed, runs out and then looks at what is outstanding.
// Re-arming a timer for every segment cost more than a tenth of the
// relay's CPU per round trip.

// startRTO starts the wait of what is outstanding now.
func (f *tcpFlow) startRTO() {
	f.rtoFrom = f.st.cfg.tcpClock()
	if !f.has(rtoTimerArmed) {
		f.armRTO(f.rto)
	}
}

func (f *tcpFlow) armRTO(d time.Duration) {
	f.st.poll.arm(&f.rtoTimer, d)
	f.flags |= rtoTimerArmed
}

func (f *tcpFlow) stopRTO() {
	if f.has(rtoTimerArmed) {
		f.st.poll.stop(&f.rtoTimer)
		f.flags &^= rtoTimerArmed
	}
}

// onRTO retransmits everything outstanding, or probes a zero window, and
// gives the flow up after tcpMaxRetries timeouts without progress.
func (f *tcpFlow) onRTO() {
	f.mu.Lock()
	defer f.unlock()
	if !f.has(rtoTimerArmed) {
		return // stopped after it was due
	}
	f.flags &^= rtoTimerArmed
	if f.state == tcpDialing {
		f.dialFailed(errDialTimeout)
		return
	}
	if f.state != tcpSynRcvd && f.state != tcpEstablished {
		return
	}
	probe := f.state == tcpEstablished && f.sndUna == f.sndNxt
	if probe && (f.space() > 0 || !f.hostOpen()) {
		return // nothing outstanding, no window to probe
	}
	if left := f.rto - f.st.cfg.tcpClock().Sub(f.rtoFrom); left > 0 {
		f.armRTO(left) // progress since the timer was armed
		return
	}
	f.retries++
	if f.retries > tcpMaxRetries || (f.state == tcpSynRcvd && f.retries > tcpSynRetries) {
		f.st.cfg.Logf("userstack: tcp %v: the sandbox stopped acknowledging", f)
		f.sendReset()
		f.flags |= resetHost
		f.state = tcpClosed
		return
	}
	f.rto = min(2*f.rto, tcpRTOMax)
	if probe {
		// Out of window on purpose: the sandbox answers with an ACK that
		// carries its current window.
		seg := f.seg(header.TCPFlagAck, f.sndUna-1)
		f.write(&seg, nil)
	} else {
		f.retransmit(false)
	}
	f.rtoFrom = f.st.cfg.tcpClock()
	f.armRTO(f.rto)
}

// unlock releases mu. Before, a live flow's interest in its host socket is
// brought up to date (every change of state that moves it passes here),
// and a flow that just closed is torn down: timers stopped, host socket
// closed; then its table entry is removed.
func (f *tcpFlow) unlock() {
	if f.state != tcpClosed {
		if err := f.st.poll.set(&f.pollFD, f.interest(), f); err != nil {
			f.hostFailed(err)
		}
	}
	if f.state == tcpClosed && f.fd >= 0 {
		// Also a dial's socket that arrives after the flow closed.
		if f.has(resetHost) {
			_ = unix.SetsockoptLinger(f.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		}
		f.st.poll.forget(&f.pollFD)
		unix.Close(f.fd)
		f.fd = -1
	}
	if f.state != tcpClosed || f.has(tornDown) {
		f.mu.Unlock()
		return
	}
	f.flags |= tornDown
	f.st.poll.stop(&f.ackTimer)
	f.stopRTO()
	for i := range f.sent {
		f.st.memGive(f.sent[i].cost)
		f.sent[i].release()
	}
	f.st.memGive(f.pendLen)
	f.sent, f.pend, f.pendLen = nil, nil, 0
	f.endWatch()
	f.mu.Unlock()
	st := f.st
	st.mu.Lock()
	if st.tcp[f.key] == f {
		delete(st.tcp, f.key)
		st.tcpLive.Add(-1)
	}
	if f.opening {
		st.opening--
	}
	st.mu.Unlock()
}

// interest is what the flow waits for on its host socket: the connect's
// end; data while the sandbox's window has room; room while pend waits.
func (f *tcpFlow) interest() uint32 {
	if f.fd < 0 {
		return 0
	}
	var ev uint32
	switch f.state {
	case tcpDialing:
		ev = unix.EPOLLOUT
	case tcpSynRcvd:
		if !f.has(hostSpokeFirst) {
			ev = unix.EPOLLIN // just to hear of an error: data waits
		}
	case tcpEstablished:
		if f.hostOpen() && f.space() > 0 {
			if f.st.memFree() > 0 {
				ev |= unix.EPOLLIN | unix.EPOLLPRI
			} else {
				f.waitMem(0) // read again once memory is given back
			}
		}
		if f.has(pendWaiting) {
			ev |= unix.EPOLLOUT
		}
	}
	return ev
}

// closeTCP ends every flow (the stack is closing); nothing is sent.
func (st *Stack) closeTCP(flows map[flowKey]*tcpFlow) {
	for _, f := range flows {
		f.mu.Lock()
		f.state = tcpClosed
		f.unlock()
	}
}
