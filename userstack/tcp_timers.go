package userstack

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

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
		f.endHow = "timeout"
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
