// Package testutil holds the helpers the project's tests share: skips for
// tests that need root, user namespaces or a TUN device, and builders that
// compile the project's binaries once and run them as root or as an
// unprivileged uid from a root test.
//
// A privileged test that skips is not a pass. When CLAUDE_SANDBOX_REQUIRE_PRIVILEGED=1
// (the project's test command sets it; CI runs as root), every "needs"
// helper fails the test instead of skipping it, so a CI run can never
// count a skipped privileged test as green.
//
// Not for production code: nothing here is imported outside _test files.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// ScratchBase is where tests put files that must be visible inside a
// sandbox: not /tmp, which the sandbox replaces with an empty tmpfs (a
// file there would be "hidden" whether or not a mask worked).
const ScratchBase = "/var/tmp"

// Nobody is the unprivileged uid (and gid) rootless tests run as.
const Nobody = 65534

// RequirePrivileged reports whether skips must become failures.
func RequirePrivileged() bool { return os.Getenv("CLAUDE_SANDBOX_REQUIRE_PRIVILEGED") == "1" }

func skipOrFail(t testing.TB, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if RequirePrivileged() {
		t.Fatalf("required privileged test cannot run: %s", msg)
	}
	t.Skip(msg)
}

// NeedsRoot skips (or, when privileged tests are required, fails) unless
// the test runs as root.
func NeedsRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root")
	}
}

var userNSErr = sync.OnceValue(func() error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	return cmd.Run()
})

// NeedsUserNS skips unless this process can create a user namespace.
func NeedsUserNS(t testing.TB) {
	t.Helper()
	if err := userNSErr(); err != nil {
		skipOrFail(t, "needs user namespaces: %v", err)
	}
}

// NeedsTUN skips unless /dev/net/tun can be opened.
func NeedsTUN(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		skipOrFail(t, "needs /dev/net/tun: %v", err)
		return
	}
	f.Close()
}

// RepoRoot returns the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	binMu   sync.Mutex
	binDir  string
	binDone = map[string]string{}
)

// Build compiles the package at pkg (relative to the repo root, e.g.
// "./cmd/claude-sandbox") as a static binary, once per test process, into
// a world-readable directory so unprivileged uids can run it too.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binDone[pkg]; ok {
		return p
	}
	if binDir == "" {
		d, err := os.MkdirTemp(ScratchBase, "claude-sandbox-test-bin-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		binDir = d
	}
	out := filepath.Join(binDir, filepath.Base(pkg))
	// The same flags as the shipped binary: stripped, which also starts
	// faster (less to map).
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg}
	if dir := CoverDir(); dir != "" && pkg == "./cmd/claude-sandbox" {
		args = []string{"build", "-trimpath", "-cover", "-covermode=atomic", "-coverpkg=" + CoverPkgs, "-tags=coverrun",
			"-ldflags=-s -w -X=github.com/claude-sandbox/claude-sandbox/internal/covrun.Dir=" + dir, "-o", out, pkg}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
	binDone[pkg] = out
	return out
}

// CoverDir is CLAUDE_SANDBOX_COVERDIR: when set (scripts/test.sh's
// coverage run), Build compiles claude-sandbox with -cover for CoverPkgs,
// its stages included (internal/covrun, nsexec's cover_linux.go), writing
// into that directory, which must be writable by every uid the tests run
// it as.
func CoverDir() string { return os.Getenv("CLAUDE_SANDBOX_COVERDIR") }

// CoverPkgs are the packages a coverage build measures.
const CoverPkgs = "github.com/claude-sandbox/claude-sandbox/mounts,github.com/claude-sandbox/claude-sandbox/nsexec,github.com/claude-sandbox/claude-sandbox/cmd/claude-sandbox,github.com/claude-sandbox/claude-sandbox/internal/..."

// Cleanup removes the built binaries; call it from TestMain after m.Run.
func Cleanup() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// Result is what a finished command left behind.
type Result struct {
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// As returns a command that runs argv as uid (and the same gid), with env
// as its whole environment. uid 0 runs as the test's own root.
func As(uid int, env []string, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	}
	return cmd
}

// Run runs cmd to the end and collects its output and exit status. It
// refuses (fails the test) a command that would start the egress jail on
// the machine's network (CheckNetSafe).
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	CheckNetSafe(t, cmd)
	var out, errb bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &errb
	}
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Code = 128 + int(ws.Signal())
		}
	default:
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return r
}

// MkdirFor creates a fresh directory owned by uid, world-traversable, for
// a test that runs a command as uid.
func MkdirFor(t testing.TB, uid int) string {
	t.Helper()
	d, err := os.MkdirTemp(ScratchBase, "claude-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, uid, uid); err != nil {
		t.Fatal(err)
	}
	return d
}

// InNetns runs f on a thread switched into the network namespace
// /run/netns/name (made by `ip netns add`), then switches back. Sockets f
// creates stay in that namespace. f must not start goroutines that expect
// to run there.
func InNetns(name string, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return err
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread cannot get back: a test must stop right here.
		panic("cannot return to the test's network namespace: " + err.Error())
	}
	return ferr
}
