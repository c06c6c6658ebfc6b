package integration

import (
	"regexp"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// sigLines are a process's ignored and blocked signal masks, from
// /proc/self/status.
var sigLines = regexp.MustCompile(`(?m)^Sig(Ign|Blk):.*$`)

// The command starts with the signal dispositions and mask of a process
// started outside the sandbox, with the jail and without: the stages
// ignore some signals for themselves (the jail's holder ignores those
// that would end it), and none of that may reach the command, which
// would then, say, never die of ^C.
func TestJailCommandSignalDefaults(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		grep := []string{"grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status"}
		masks := func(r testutil.Result) string {
			t.Helper()
			if r.Code != 0 {
				t.Fatalf("%v", r)
			}
			return strings.Join(sigLines.FindAllString(r.Stdout, -1), "; ")
		}
		// Started as is, and started ignoring SIGHUP and SIGINT (as under
		// nohup, or a script's background job): ignored signals are
		// inherited across exec, and the command must inherit them through
		// the launcher as it would without it (the Go runtime of the
		// launcher, the holder and init would otherwise lose them).
		ignoring := []string{"/bin/sh", "-c", `trap "" HUP INT; exec "$0" "$@"`}
		for _, prefix := range [][]string{nil, ignoring} {
			cmdline := func(args ...string) []string { return append(append([]string{}, prefix...), args...) }
			outside := cmdline(grep...)
			want := masks(testutil.Run(t, l.jailCmd(uid, outside[0], outside[1:]...)))
			if !strings.Contains(want, "SigIgn") {
				t.Fatalf("control: no SigIgn line outside (%q)", want)
			}
			if prefix != nil && !strings.Contains(want, "SigIgn:\t0000000000000003") {
				t.Fatalf("control: the shell's trap did not leave SIGHUP and SIGINT ignored (%q)", want)
			}
			for _, net := range []string{"--net=jail", "--net=none"} {
				inside := cmdline(append([]string{bin, "run", net, "--"}, grep...)...)
				got := masks(testutil.Run(t, l.jailCmd(uid, inside[0], inside[1:]...)))
				if got != want {
					t.Errorf("%s, started by %q: the command's signal masks are %q, want those of a command outside: %q", net, prefix, got, want)
				}
			}
		}
	})
}

// A window size change on the host terminal reaches the command's pty
// while it runs (the launcher's pty master is non-blocking, in the
// runtime's poller; the resize must not depend on its blocking mode).
// In the default mode (the jail), in a lab network (`ip netns exec` execs
// the launcher in the same process: it is the terminal's foreground
// process, which the resize signals).
func TestTerminalResizeReachesCommand(t *testing.T) {
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
	// The loop is bounded so that a lost resize ends the test, with
	// "no-winch", instead of hanging it.
	script := `trap 'stty size; exit 0' WINCH; echo ready; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo no-winch`
	l := newLab(t)
	cmd := l.hostCmd(bin, "run", "--", "/bin/sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = credsWithSetsid(nil)
	testutil.CheckNetSafe(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var got strings.Builder
	buf := make([]byte, 4096)
	resized := false
	for {
		n, err := ptmx.Read(buf)
		got.Write(buf[:n])
		if !resized && strings.Contains(got.String(), "ready") {
			// TIOCSWINSZ on the host terminal sends SIGWINCH to the
			// launcher, its foreground process.
			if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 44, Cols: 123}); err != nil {
				t.Fatal(err)
			}
			resized = true
		}
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("launcher: %v, output %q", err, got.String())
	}
	if !strings.Contains(got.String(), "44 123") {
		t.Errorf("after the resize the command saw %q, want the size 44 123", got.String())
	}
}
