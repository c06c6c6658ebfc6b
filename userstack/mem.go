package userstack

// The relay's memory budget. A TCP flow holds memory two ways: data the
// sandbox sent that the host socket has not taken yet (pend), and data read
// from the host that the sandbox has not acknowledged yet (sent). Each is
// bounded per flow (tcpRcvBuf, tcpSndBuf), and all of it together by
// Config.MaxRelayMemory, so that many busy connections (or a sandbox that
// never acknowledges) cannot grow the launcher without end (issues 12 and
// 15: eight busy connections took about 75 MiB).
//
// The budget is a counter of bytes held, taken before memory is held and
// given back when it is let go; it never goes over. What is counted is
// the memory, not only the payload: a segment of host data waiting for
// the sandbox's ACK is charged its buffer and its slots in the flow's
// list (tcpChunkOverhead), so that a remote end trickling one byte per
// segment to a sandbox that never acknowledges cannot hold ~55 times the
// budget. Under pressure the
// relay narrows what it lets in instead of dropping what it took: the
// window advertised to the sandbox is at most what is free (a flow whose
// host socket keeps up is offered at least tcpWndFloor: what it sends
// mostly goes straight through, and what does not fit the budget is not
// acknowledged, so the sandbox sends it again), and a host socket is read
// only while the budget has room. As in a kernel under memory pressure,
// a budget held by slow connections narrows the others too. Flows held back
// wait on a list; memory given back wakes them on the event loop, where
// each sends its reopened window and reads its host socket again.
//
// Connections into the sandbox (published ports, publish.go) hold the
// same budget: inbound.ConnCost each (their gVisor buffers at their bound)
// from their dial until they are closed.

// DefaultMaxRelayMemory bounds the relay's buffers across all flows. Eight
// connections uploading to slow servers fill 4 MiB each: 32 MiB would not
// bind them, and the launcher's RSS (twice the buffers, with the Go heap's
// garbage) peaked at 75 MiB; with 16 MiB it peaked at about 53 MiB
// (integration's BenchmarkRelayMemory), the uploads as fast.
const DefaultMaxRelayMemory = 16 << 20

// memTake takes up to want bytes of the budget (fewer if fewer are free)
// and returns how many it took.
func (st *Stack) memTake(want int) int { return st.memTakeLeast(1, want) }

// memTakeLeast is memTake that takes nothing unless at least least bytes
// are free.
func (st *Stack) memTakeLeast(least, want int) int {
	if want <= 0 {
		return 0
	}
	for {
		used := st.memUsed.Load()
		n := min(int64(want), st.memBudget-used)
		if n <= 0 || n < int64(least) {
			return 0
		}
		if st.memUsed.CompareAndSwap(used, used+n) {
			for {
				peak := st.memPeak.Load()
				if used+n <= peak || st.memPeak.CompareAndSwap(peak, used+n) {
					break
				}
			}
			return int(n)
		}
	}
}

// memGive gives n bytes back, and wakes the flows waiting for memory.
func (st *Stack) memGive(n int) {
	if n <= 0 {
		return
	}
	st.memUsed.Add(-int64(n))
	if st.memWaiting.Load() {
		st.wakeMem()
	}
}

// memFree is what is left of the budget.
func (st *Stack) memFree() int { return int(st.memBudget - st.memUsed.Load()) }

func (st *Stack) wakeMem() {
	if st.memWakeArmed.CompareAndSwap(false, true) {
		st.poll.arm(&st.memWake, 0)
	}
}

// waitMem puts f (under f.mu) on the list of flows woken when memory is
// given back; free is what f saw free. Memory given back between that
// look and the registration wakes the list at once.
func (f *tcpFlow) waitMem(free int) {
	if f.has(waitingMem) {
		return
	}
	f.flags |= waitingMem
	st := f.st
	st.mu.Lock()
	st.memWaiters = append(st.memWaiters, f)
	st.mu.Unlock()
	st.memWaiting.Store(true)
	if st.memFree() > free {
		st.wakeMem()
	}
}

// timerFired runs the memory wake-up on the event loop: every waiting flow
// sends its window if it opened and reads its host socket if it may.
func (st *Stack) timerFired(*loopTimer) {
	st.memWakeArmed.Store(false)
	st.mu.Lock()
	waiters := st.memWaiters
	st.memWaiters, st.memSpare = st.memSpare, nil // no allocation a round
	st.memWaiting.Store(false)
	st.mu.Unlock()
	for _, f := range waiters {
		f.memWoken()
	}
	clear(waiters)
	st.mu.Lock()
	st.memSpare = waiters[:0]
	st.mu.Unlock()
}

func (f *tcpFlow) memWoken() {
	f.mu.Lock()
	defer f.unlock()
	f.flags &^= waitingMem
	if f.state != tcpEstablished {
		return
	}
	if w, short, free := f.windowLimit(); w>>f.rcvShift > f.rcvWnd>>f.rcvShift {
		f.sendAck() // the window reopened (still short: seg waits again)
	} else if short {
		f.waitMem(free)
	}
	if f.hostOpen() && f.fd >= 0 {
		// (A flow to a name still peeking has no host socket yet.)
		f.readSome()
	}
}

// RelayMemory returns the bytes the TCP relay holds now (both directions,
// all flows), and the most it held at once.
func (st *Stack) RelayMemory() (now, peak int64) {
	return st.memUsed.Load(), st.memPeak.Load()
}
