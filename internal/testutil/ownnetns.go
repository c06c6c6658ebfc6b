package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A test binary re-executes itself in a network namespace of its own when
// what it tests must send packets or configure interfaces: the sandbox
// package's TestMain runs all its tests so, userstack one test. The re-run
// is marked by this variable, whose value is the namespace the parent ran
// in; the re-run compares it with its own to know it is isolated.
const ownNetnsEnv = "CLAUDE_SANDBOX_TEST_NETNS_PARENT"

// ReexecInOwnNetns returns a command that runs this test binary again,
// with args (test flags; os.Args[0] as its name), in a new network
// namespace (nothing in it but a loopback that is down), marked so that
// the re-run's RerunInOwnNetns reports it. The command is SIGKILLed if
// the thread that starts it ends: call runtime.LockOSThread on the
// goroutine that starts and waits for it. Its standard streams and
// environment (the mark added) are the caller's to complete.
func ReexecInOwnNetns(args ...string) (*exec.Cmd, error) {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("the test's network namespace: %w", err)
	}
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), ownNetnsEnv+"="+self)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// RunTestInOwnNetns is the parent's side of a test that runs its body in
// a network namespace of its own: it runs the test named name again
// (ReexecInOwnNetns, bounded by timeout) and fails t unless the re-run
// passed. The test's re-run (RerunInOwnNetns) runs the body.
func RunTestInOwnNetns(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	cmd, err := ReexecInOwnNetns("-test.run=^"+name+"$", "-test.v", "-test.count=1", "-test.timeout="+timeout.String())
	if err != nil {
		t.Fatal(err)
	}
	// The child dies with this thread (Pdeathsig): keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("in its own network namespace: %v\n%s", err, out)
	}
}

// RerunInOwnNetns reports whether this process is a re-run that
// ReexecInOwnNetns started (rerun) and, if so, whether its network
// namespace is another than its parent's (isolated; a test that
// configures the network must refuse to when it is not). The first call
// takes the mark out of the environment, so that nothing the re-run
// starts takes itself for one; later calls give the same answer.
func RerunInOwnNetns() (rerun, isolated bool) {
	return rerunInOwnNetns()
}

var rerunInOwnNetns = sync.OnceValues(func() (rerun, isolated bool) {
	parent := os.Getenv(ownNetnsEnv)
	if parent == "" {
		return false, false
	}
	os.Unsetenv(ownNetnsEnv)
	self, err := os.Readlink("/proc/self/ns/net")
	return true, err == nil && parent != self
})
