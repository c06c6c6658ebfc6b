package sandbox_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/sandbox"
)

// TestMain runs the stages first (the test binary is re-executed as them,
// like any embedding program), then the tests and examples. A test binary
// is built with cgo (always with -race), which cannot be its own stage:
// the stages then run from a static helper, as Spec.StageExe allows.
//
// As root, the test binary first re-executes itself in a network
// namespace of its own (nothing in it but a loopback that is down), and
// the tests run there: a jailed sandbox (TestCancelLeavesNothing) relays
// what it sends (and an IPv6 flow makes it ask the host's resolver for
// the NAT64 prefix), and nothing this package's
// tests start may reach the machine's network or resolver.
func TestMain(m *testing.M) {
	sandbox.Init()
	if os.Geteuid() == 0 {
		if code, ok := inOwnNetns(); ok {
			os.Exit(code)
		}
	}
	flag.Parse()
	os.Exit(run(m))
}

// isolated reports whether the tests run in a network namespace the test
// binary made (so a jailed sandbox may be started).
var isolated bool

// inOwnNetns re-executes the test binary, with the same arguments and
// standard streams, in a new network namespace (testutil.ReexecInOwnNetns),
// and returns its exit status (ok true). In the re-executed binary, or
// when the namespace cannot be made (then the tests that need it skip,
// or fail when privileged tests are required), it returns ok false: the
// caller runs the tests.
func inOwnNetns() (code int, ok bool) {
	if rerun, iso := testutil.RerunInOwnNetns(); rerun {
		isolated = iso
		return 0, false
	}
	cmd, err := testutil.ReexecInOwnNetns(os.Args[1:]...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "note:", err)
		return 0, false
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Pdeathsig is tied to the thread that starts the child: keep it.
	runtime.LockOSThread()
	// go test's -timeout is the child's own; a signal to this process is
	// passed on to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		signal.Stop(sigs)
		fmt.Fprintf(os.Stderr, "note: cannot re-execute the tests in a network namespace of their own (%v): the jailed ones do not run\n", err)
		return 0, false
	}
	go func() {
		for sig := range sigs {
			_ = cmd.Process.Signal(sig)
		}
	}()
	err = cmd.Wait()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "tests in their own network namespace:", err)
		return 1, true
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		fmt.Fprintln(os.Stderr, "tests in their own network namespace:", err)
		return 128 + int(ws.Signal()), true
	}
	return cmd.ProcessState.ExitCode(), true
}

func run(m *testing.M) int {
	if !sandbox.CanBeOwnStage() {
		dir, err := os.MkdirTemp(testutil.ScratchBase, "sandbox-stage-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		exe := filepath.Join(dir, "stagehelper")
		cmd := exec.Command("go", "build", "-trimpath", "-o", exe, "./internal/stagehelper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build the stage helper: %v\n%s", err, out)
			return 1
		}
		sandbox.SetDefaultStageExe(exe)
	}
	// The examples run real sandboxes and cannot skip themselves: where
	// none can be started (no user namespaces), run only the tests, which
	// skip or, when privileged tests are required (CI), fail.
	if !testutil.RequirePrivileged() {
		sb, err := sandbox.Start(context.Background(), sandbox.Spec{Command: []string{"/bin/true"}, Net: sandbox.NetNone})
		if err == nil {
			_, err = sb.Wait()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "note: cannot start a sandbox here (%v): the examples are not run\n", err)
			if flag.Lookup("test.run").Value.String() == "" {
				_ = flag.Set("test.run", "^Test")
			}
		}
	}
	return m.Run()
}
