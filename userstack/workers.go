package userstack

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// workerIdle is how long a worker waits for more work before it exits.
const workerIdle = 5 * time.Second

// workers runs functions on reused goroutines: the dials of a configured
// Dialer (which may block) and the proxied pings. A fresh goroutine starts
// with a small stack and copies it as it grows, a cost paid again for
// every flow under connection churn; a worker keeps the stack it grew for
// the next function.
//
// An idle worker is on the idle list, and a function is handed to one
// only by taking it off the list (under mu) and putting the function in
// its channel, which has room for one: a worker that is listed always
// gets the next function, and one that leaves takes itself off first.
type workers struct {
	mu      sync.Mutex
	idle    []*worker
	done    <-chan struct{} // closed when the stack closes: idle workers exit
	wg      *sync.WaitGroup // counts the workers themselves
	started atomic.Int32    // goroutines ever started
}

type worker struct{ work chan func() }

func newWorkers(done <-chan struct{}, wg *sync.WaitGroup) *workers {
	return &workers{done: done, wg: wg}
}

// Go runs f on an idle worker, or on a new one when none is idle.
func (w *workers) Go(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		wk := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		wk.work <- f // room for one: never blocks
		return
	}
	w.mu.Unlock()
	w.wg.Add(1)
	w.started.Add(1)
	go w.loop(&worker{work: make(chan func(), 1)}, f)
}

func (w *workers) loop(wk *worker, f func()) {
	defer w.wg.Done()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		f = nil
		t.Reset(workerIdle)
		w.mu.Lock()
		w.idle = append(w.idle, wk)
		w.mu.Unlock()
		select {
		case f = <-wk.work:
			continue
		case <-t.C:
		case <-w.done:
		}
		w.mu.Lock()
		if i := slices.Index(w.idle, wk); i >= 0 {
			w.idle = slices.Delete(w.idle, i, i+1)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		f = <-wk.work // taken off the list by Go: its function is coming
	}
}

// Idle reports how many workers wait for work.
func (w *workers) Idle() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.idle)
}
