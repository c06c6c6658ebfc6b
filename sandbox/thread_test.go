package sandbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/sandbox"
)

// A sandbox outlives the thread of the goroutine that started it. An
// embedding program may start one from a goroutine locked to its thread
// (to enter a network namespace first, say) and let that goroutine end,
// which ends the thread. The stages' parent-death signal follows the
// thread that started them, not the process: started from that thread,
// the sandbox was killed (exit 137) as soon as the goroutine returned.
func TestStartFromEndingThread(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	type started struct {
		sb    *sandbox.Sandbox
		err   error
		tid   int
		retry bool
	}
	var s started
	for try := 0; try < 10; try++ {
		ch := make(chan started)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			tid := syscall.Gettid()
			if tid == os.Getpid() {
				// The main thread is never ended (the runtime parks
				// it): it would prove nothing. Try from another.
				ch <- started{retry: true}
				return
			}
			sb, err := sandbox.Start(context.Background(), sandbox.Spec{
				Command: []string{"/bin/sh", "-c", "echo ready; sleep 1; echo alive"},
				Net:     sandbox.NetNone,
				Stdout:  w,
			})
			ch <- started{sb: sb, err: err, tid: tid}
		}()
		if s = <-ch; !s.retry {
			break
		}
	}
	w.Close()
	if s.retry {
		t.Fatal("every goroutine ran on the main thread")
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	br := bufio.NewReader(r)
	if line, _ := br.ReadString('\n'); line != "ready\n" {
		t.Fatalf("sandbox said %q", line)
	}
	// The starting goroutine has returned, and its thread has ended.
	for i := 0; ; i++ {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", s.tid)); err != nil {
			break
		}
		if i == 100 {
			t.Fatalf("the starting goroutine's thread %d is still there: the test proves nothing", s.tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	line, _ := br.ReadString('\n')
	code, err := s.sb.Wait()
	if line != "alive\n" || code != 0 || err != nil {
		t.Errorf("after the starting thread ended: said %q, exit %d, %v; want alive, 0", line, code, err)
	}
}
