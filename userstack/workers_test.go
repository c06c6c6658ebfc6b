package userstack

import (
	"sync"
	"testing"
	"time"
)

// A worker that finished takes the next function instead of a new
// goroutine being started, and every worker ends when the pool is done.
func TestWorkersReuseAndEnd(t *testing.T) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	w := newWorkers(done, &wg)
	ran := make(chan int, 10)
	w.Go(func() { ran <- 1 })
	<-ran
	waitIdle(t, w, 1)
	for i := 2; i <= 5; i++ {
		w.Go(func() { ran <- i })
		if got := <-ran; got != i {
			t.Fatalf("ran %d, want %d", got, i)
		}
		waitIdle(t, w, 1)
	}
	if n := w.started.Load(); n != 1 {
		t.Errorf("%d goroutines for five sequential functions, want 1 reused worker", n)
	}
	// Two at once need two workers.
	block := make(chan struct{})
	w.Go(func() { <-block })
	w.Go(func() { <-block })
	close(block)
	waitIdle(t, w, 2)
	if n := w.started.Load(); n != 2 {
		t.Errorf("%d goroutines started, want 2", n)
	}
	close(done)
	wg.Wait()
	if n := w.Idle(); n != 0 {
		t.Errorf("%d idle workers after done", n)
	}
}

func waitIdle(t *testing.T, w *workers, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); w.Idle() != n; time.Sleep(time.Millisecond) { // failsafe only
		if time.Now().After(deadline) {
			t.Fatalf("idle workers %d, want %d", w.Idle(), n)
		}
	}
}
