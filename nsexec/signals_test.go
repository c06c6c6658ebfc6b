package nsexec

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func sigHandler(t *testing.T, sig int) uintptr {
	t.Helper()
	var cur kernelSigaction
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&cur)), 8, 0, 0); e != 0 {
		t.Fatalf("read signal %d's action: %v", sig, e)
	}
	return cur.handler
}

func setSigHandler(sig int, h uintptr) {
	act := kernelSigaction{handler: h}
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}

// ignoreUnhandled leaves no signal whose default ends the process at that
// default (the runtime's gaps, 32 and 34 today, are what a command inside
// could otherwise end init with), and touches neither a signal the
// runtime handles nor one whose default does not end the process. The
// integration test (TestPID1SurvivesSignals) sees a gap only about one
// launch in ten; this looks at the dispositions themselves.
func TestIgnoreUnhandledLeavesNoFatalDefault(t *testing.T) {
	before := map[int]uintptr{}
	for sig := 1; sig <= 64; sig++ {
		before[sig] = sigHandler(t, sig)
	}
	t.Cleanup(func() {
		for sig, h := range before {
			if h == sigDFL && sigHandler(t, sig) == sigIGN {
				setSigHandler(sig, sigDFL)
			}
		}
	})
	gaps := 0
	for sig, h := range before {
		if h == sigDFL && defaultEndsProcess(sig) {
			gaps++
		}
	}
	if gaps == 0 {
		t.Skip("this runtime leaves no fatal signal at its default")
	}
	ignoreUnhandled()
	for sig := 1; sig <= 64; sig++ {
		h := sigHandler(t, sig)
		switch {
		case before[sig] == sigDFL && defaultEndsProcess(sig):
			if h != sigIGN {
				t.Errorf("signal %d: still at its default, which ends init", sig)
			}
		case h != before[sig]:
			t.Errorf("signal %d: action changed from %#x to %#x", sig, before[sig], h)
		}
	}
}
