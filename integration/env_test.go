package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// With user namespaces switched off (max_user_namespaces = 0, set in a
// throwaway user namespace so the host is untouched), the launch fails
// before anything starts, and the message names the sysctl to fix. In
// the default mode (the jail), so in a lab network: were the launch to
// get further, nothing it sends would leave the test's namespaces.
func TestUserNamespacesUnavailable(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	l := newLab(t)
	cmd := l.hostCmd("unshare", "--user", "--map-root-user", "sh", "-c",
		"echo 0 > /proc/sys/user/max_user_namespaces && exec "+bin+" run -- true")
	r := testutil.Run(t, cmd)
	if r.Code != 125 || !strings.Contains(r.Stderr, "user.max_user_namespaces") || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("launch without user namespaces: %v; want 125 and one line naming user.max_user_namespaces", r)
	}
}

// In a mount namespace whose /proc is partly over-mounted (as container
// runtimes do, e.g. /dev/null over /proc/kcore), the kernel refuses a fresh procfs; the sandbox falls back
// to a read-only bind of /proc and says so in one warning line. The
// sandbox has the default network (the jail), so it runs in a lab network.
func TestProcFallback(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	masked := ""
	for _, f := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"} {
		if _, err := os.Stat(f); err == nil {
			masked = f
			break
		}
	}
	if masked == "" {
		t.Fatal("no /proc file of the kind container runtimes mask exists here")
	}
	l := newLab(t)
	cmd := l.hostCmd("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount --bind /dev/null "+masked+" && exec "+bin+" run -- sh -c 'touch /proc/x 2>/dev/null || echo read-only; test \"$(head -c 1 "+masked+" | wc -c)\" = 0 && echo masked-kept'")
	r := testutil.Run(t, cmd)
	if r.Code != 0 || !strings.Contains(r.Stderr, "warning: a fresh /proc was refused") || strings.Count(r.Stderr, "\n") != 1 {
		t.Fatalf("proc fallback: %v; want success and one warning", r)
	}
	if !strings.Contains(r.Stdout, "read-only") || !strings.Contains(r.Stdout, "masked-kept") {
		t.Errorf("fallback /proc: %q; want it read-only and the container's over-mount kept", r.Stdout)
	}
	// The warning names the remedy (an unmasked /proc), never seccomp.
	if !strings.Contains(r.Stderr, "; to fix: ") || !strings.Contains(r.Stderr, "/proc") || strings.Contains(r.Stderr, "seccomp") {
		t.Errorf("the fallback's warning names no remedy, or the wrong one: %q", r.Stderr)
	}
	// doctor names the degraded mode as a FIX line and exits 1.
	d := testutil.Run(t, exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", "mount --bind /dev/null "+masked+" && exec "+bin+" doctor"))
	if d.Code != 1 || !strings.Contains(d.Stdout, "FIX  a fresh /proc inside the sandbox: the sandbox falls back") || !strings.Contains(d.Stdout, "to fix: ") {
		t.Errorf("doctor in the /proc fallback: %v; want a FIX line naming it", d)
	}
}

// Under a terminal, the command gets its own pty with the host's window
// size, and the host terminal's settings are back as they were afterwards.
// In the default mode (the jail), in a lab network (`ip netns exec` execs
// the launcher in the same process: the session and terminal are its).
func TestTerminalSizeAndRestore(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 111}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	l := newLab(t)
	cmd := l.hostCmd(bin, "run", "--", "/bin/sh", "-c", "stty size; tty; stty -a | grep -o -- '-icanon' || echo cooked")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = credsWithSetsid(nil)
	testutil.CheckNetSafe(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := make(chan string)
	go func() { out <- readAll(ptmx) }()
	err = cmd.Wait()
	after, gerr := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	tty.Close()
	got := <-out
	if err != nil {
		t.Fatalf("launcher: %v, output %q", err, got)
	}
	if !strings.Contains(got, "33 111") {
		t.Errorf("window size inside: %q, want 33 111", got)
	}
	if !strings.Contains(got, "/dev/pts/") || !strings.Contains(got, "cooked") {
		t.Errorf("the command's terminal: %q, want its own pts in cooked mode", got)
	}
	if gerr != nil || after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("host terminal not restored: lflag %#x -> %#x, iflag %#x -> %#x (%v)", before.Lflag, after.Lflag, before.Iflag, after.Iflag, gerr)
	}
}
