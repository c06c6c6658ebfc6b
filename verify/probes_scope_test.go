package verify

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// P60 (signalScopeProbe) says ESCAPED where a thread outside a
// Landlock signal scope can be signalled (this test process's own
// threads, no domain), and BLOCKED from a thread that entered a domain
// scoping signals, towards a process outside it (the test's, from a child).
func TestSignalScopeProbe(t *testing.T) {
	if os.Getenv("VERIFY_TEST_SCOPED_PARENT") != "" {
		scopedChild()
		return
	}
	if !landlockScopes() {
		t.Skip("the kernel has no Landlock scopes (ABI 6, Linux 6.12)")
	}
	runtime.LockOSThread() // a second thread for sure
	defer runtime.UnlockOSThread()
	done := make(chan struct{})
	defer close(done)
	go func() { runtime.LockOSThread(); <-done }()
	if st, ev := signalScopeProbe(&Env{InitPID: os.Getpid()}); st != Escaped {
		t.Errorf("threads outside any domain: %s %s", st, ev)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalScopeProbe$")
	cmd.Env = append(os.Environ(), fmt.Sprint("VERIFY_TEST_SCOPED_PARENT=", os.Getpid()))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "status: "+string(Blocked)) {
		t.Errorf("from inside a signal scope, towards the test's process:\n%s", out)
	}
}

// scopedChild enters a Landlock domain scoping signals on its thread and
// runs the probe against its parent, outside the domain.
func scopedChild() {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("no_new_privs:", err)
		os.Exit(1)
	}
	attr := unix.LandlockRulesetAttr{Scoped: unix.LANDLOCK_SCOPE_SIGNAL}
	size := unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		fmt.Println("ruleset:", e)
		os.Exit(1)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		fmt.Println("restrict:", e)
		os.Exit(1)
	}
	st, ev := signalScopeProbe(&Env{InitPID: os.Getppid()})
	fmt.Printf("status: %s %s\n", st, ev)
	os.Exit(0)
}
