package nsexec

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// A stage's parent is the thread that started it, not the launcher's
// process: the kernel sends a parent-death signal (which the stages arm:
// the sandbox must not outlive its launcher) when that thread ends, even
// if the rest of the process lives on. Go ends a thread when a goroutine
// locked to it returns, so a program that starts a sandbox from such a
// goroutine (to enter a network namespace first, say) would have the
// sandbox killed as soon as that goroutine returned.
//
// onLastingThread runs start on a thread that lives as long as the
// process: the main thread when the caller is on it (the runtime never
// ends the main thread; it parks it instead), else a thread kept for
// this alone, started once per process and parked between starts.
func onLastingThread(start func() error) error {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		defer runtime.UnlockOSThread()
		return start()
	}
	runtime.UnlockOSThread()
	starter.once.Do(func() {
		starter.reqs = make(chan func())
		go func() {
			// Locked and never returning: this thread is never ended.
			runtime.LockOSThread()
			for f := range starter.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	starter.reqs <- func() { errc <- start() }
	return <-errc
}

var starter struct {
	once sync.Once
	reqs chan func()
}
