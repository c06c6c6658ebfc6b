package userstack

import (
	"sync"
	"sync/atomic"
	"time"
)

// workerIdle is how long a worker waits for more work before it exits.
const workerIdle = 5 * time.Second

// workers runs functions on reused goroutines. Every flow needs a few
// goroutines (the dial and handshake, then a copy loop each way), and their
// call chains through gVisor are deep: a fresh goroutine starts with a
// small stack and copies it as it grows, which measured 7% of the CPU under
// connection churn. A worker keeps the stack it grew for the next flow.
type workers struct {
	work    chan func()
	done    <-chan struct{} // closed when the stack closes: idle workers exit
	wg      *sync.WaitGroup // counts the workers themselves
	idle    atomic.Int32
	started atomic.Int32 // goroutines ever started
}

func newWorkers(done <-chan struct{}, wg *sync.WaitGroup) *workers {
	return &workers{work: make(chan func()), done: done, wg: wg}
}

// Go runs f on an idle worker, or on a new one when none is idle.
func (w *workers) Go(f func()) {
	select {
	case w.work <- f:
		return
	default:
	}
	w.wg.Add(1)
	w.started.Add(1)
	go w.loop(f)
}

func (w *workers) loop(f func()) {
	defer w.wg.Done()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		f = nil
		t.Reset(workerIdle)
		w.idle.Add(1)
		select {
		case f = <-w.work:
			w.idle.Add(-1)
		case <-t.C:
			w.idle.Add(-1)
			return
		case <-w.done:
			w.idle.Add(-1)
			return
		}
	}
}

// Idle reports how many workers wait for work.
func (w *workers) Idle() int { return int(w.idle.Load()) }
