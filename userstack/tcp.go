package userstack

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
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
//	  (over Config.MaxFlows: RST, recorded; to a name: resolved first,
//	  no allowed address: RST, recorded; peek.go)
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
//     ride on, unless tcpAckEvery bytes are unacknowledged; any segment
//     sent carries the ACK and stops the timer.
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
//
// # Files
//
// tcp.go holds this comment, the flow's types, flags and constants, and
// its life (unlock, interest, maybeDone, closeTCP); tcp_input.go the
// segments from the sandbox (handleTCP, tcpInput, newTCP, segment,
// processAck, processData); tcp_output.go the segments to the sandbox
// (sendData, sendFin, retransmit, the window, sendAck, sendReset);
// tcp_host.go the host side (the dial, pollReady, toHost,
// flush, readSome, hostFailed); tcp_timers.go the delayed-ACK and
// retransmission timers.

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
	// tcpChunkOverhead is what a chunk of sent costs the memory budget
	// beyond its bytes: its slot in sent (up to four per chunk: append
	// doubles the slice, dropAcked halves it only below a quarter) and
	// the smallest allocation; a copied chunk's buffer is charged a
	// quarter over its length for the allocator's rounding (copiedCost).
	// Charged by bytes alone, a remote end trickling a byte per segment
	// to a sandbox that never acknowledges held ~55 bytes for each one
	// charged.
	tcpChunkOverhead = 4*int(unsafe.Sizeof(tcpChunk{})) + 8
	// tcpPooledCost is what a chunk in a pooled read buffer costs.
	tcpPooledCost = readBufferLen + tcpChunkOverhead
	// tcpReadLeast is the least of the budget a read takes: a byte's
	// chunk.
	tcpReadLeast = tcpChunkOverhead + 2
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

// readBuffers recycles the 64 KiB buffers host data is read into: a TCP
// flow's (of which it uses tcpReadMax) and a UDP reply's (a datagram of
// up to 65,535 bytes after udpHeadroom).
var readBuffers = sync.Pool{New: func() any { b := make([]byte, readBufferLen); return &b }}

const readBufferLen = max(tcpReadMax, udpHeadroom+65535)

// copiedCost is what a chunk of n bytes copied out of a read buffer
// costs the memory budget (see tcpChunkOverhead).
func copiedCost(n int) int { return n + n/4 + tcpChunkOverhead }

// copiedMax is the most a read may take to be copied out within grant
// (copiedCost's inverse, rounded down).
func copiedMax(grant int) int { return (grant - tcpChunkOverhead) * 4 / 5 }

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

	peek  *peekState // a flow to a name whose first bytes are not decided yet (peek.go)
	watch *flowWatch // a flow to a name let through before its first message (peekwatch.go)

	// For Config.OnFlowEnd (flowhook.go): the payload taken from the
	// sandbox (up, less what is left in pend at the end) and read from the
	// host (down, less what is left unacknowledged in sent); start and
	// name are set only with OnFlowEnd (before the flow is filed);
	// endHow, when set, says how it ended.
	up, down uint64
	start    time.Time
	name     string
	endHow   string
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

// openDone takes the flow out of the count of flows opening (called with
// mu): it is established. A flow that closes first leaves the count when it is torn down (unlock).
func (f *tcpFlow) openDone() {
	if !f.opening {
		return
	}
	f.st.mu.Lock()
	f.st.opening--
	f.opening = false
	f.st.mu.Unlock()
}

// maxSegment is the largest TCP payload that fits the link's MTU.
func (st *Stack) maxSegment(v6 bool) int {
	return int(st.ep.MTU()) - ipHeaderLen(v6) - header.TCPMinimumSize
}

// tcpISS picks an initial sequence number: Config's default (tests fix
// theirs through Config.tcpISS).
func tcpISS() uint32 { return rand.Uint32() }

func (c *tcpChunk) release() {
	if c.pooled != nil {
		readBuffers.Put(c.pooled)
	}
	*c = tcpChunk{}
}

// maybeDone ends a flow both sides have closed and acknowledged.
func (f *tcpFlow) maybeDone() {
	if f.state == tcpEstablished && f.has(finFromSandbox) && f.has(finToHost) && !f.has(pendWaiting) &&
		f.has(finToSandbox) && f.sndUna == f.sndNxt && !f.hostOpen() {
		f.state = tcpClosed
	}
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
	if f.peek != nil {
		f.peek.stop()
	}
	var end FlowEnd
	report := !f.start.IsZero()
	if report {
		end = f.tcpEnd() // before sent and pend are let go
	}
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
	if report {
		st.cfg.OnFlowEnd(end)
	}
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
			// To hear of an error or the host's first data (which waits
			// for the handshake's end); as established asks, so that the
			// handshake's end changes nothing here (an epoll_ctl less
			// per connection).
			ev = unix.EPOLLIN | unix.EPOLLPRI
		}
	case tcpEstablished:
		if f.hostOpen() && f.space() > 0 {
			if free := f.st.memFree(); free >= tcpReadLeast {
				ev |= unix.EPOLLIN | unix.EPOLLPRI
			} else {
				f.waitMem(free) // read again once memory is given back
			}
		}
		if f.has(pendWaiting) && f.peek == nil {
			ev |= unix.EPOLLOUT // not while the first bytes are looked at (peek.go)
		}
	}
	return ev
}

// closeTCP ends every flow (the stack is closing); nothing is sent.
func (st *Stack) closeTCP(flows map[flowKey]*tcpFlow) {
	for _, f := range flows {
		f.mu.Lock()
		if f.state != tcpClosed {
			f.endHow = "stack closed"
		}
		f.state = tcpClosed
		f.unlock()
	}
}
