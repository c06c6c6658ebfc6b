package integration

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// With stdin not a terminal and stdout the user's terminal, the command
// must not hold that terminal: a line the user types is not readable from
// its fd 1 (and is discarded when the sandbox ends).
func TestTerminalStdoutOnlyHidesKeystrokes(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		dir := testutil.MkdirFor(t, s.uid)
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		defer tty.Close()
		// Wait for the go file, then read fd 1 without blocking: without
		// the fix fd 1 is the host terminal, whose input queue then
		// holds the typed line.
		script := `echo ready >&2; while [ ! -e ` + dir + `/go ]; do sleep 0.02; done
exec 3<&1; got=$(dd iflag=nonblock bs=256 count=1 <&3 2>/dev/null | od -An -c | tr -d ' \n')
echo "read:[$got]" >&2; [ -t 1 ] && echo tty1 >&2; exit 0`
		cmd := s.cmd("--bind", dir, dir, "--", "/bin/sh", "-c", script)
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		cmd.Stdin, cmd.Stdout = null, tty
		errPipe, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = readAll(ptmx) }() // the terminal's output and echo
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := errPipe.Read(buf); err != nil || string(buf) != "ready\n" {
			t.Fatalf("sandbox said %q (%v)", buf, err)
		}
		if _, err := ptmx.Write([]byte("typed-secret\n")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/go", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		restb, _ := io.ReadAll(errPipe)
		rest := string(restb)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("launcher: %v; stderr %q", err, rest)
		}
		if strings.Contains(rest, "typed") || !strings.Contains(rest, "read:[]") {
			t.Errorf("the command read the user's keystrokes from fd 1: %q", rest)
		}
		if !strings.Contains(rest, "tty1") {
			t.Errorf("isatty(1) inside is false, want true: %q", rest)
		}
		// The command did not read the typed line (above); the launcher
		// discarded it when the sandbox ended (issue 28: an answer the
		// terminal gave to the command's output would sit there too, for
		// the host's shell to read as typed).
		if n, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCINQ); err != nil || n != 0 {
			t.Errorf("%d bytes (%v) left in the host terminal's input after the sandbox ended", n, err)
		}
	})
}

// With stdin and stdout terminals and stderr a file, stderr lands in the
// file as written (no CR), stdout stays a terminal; a redirected stdout
// gets no CRLF either.
func TestTerminalKeepsRedirectedStreams(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		dir := testutil.MkdirFor(t, s.uid)
		for _, c := range []struct {
			name    string
			ptyFds  []int
			fileFd  int
			script  string
			wantOut string // in the file
			wantTTY string // on the terminal
		}{
			{"stderr-file", []int{0, 1}, 2, `echo out; printf 'e1\ne2\n' >&2; [ -t 1 ] && echo tty1; [ -t 0 ] && echo tty0; [ -t 2 ] || echo notty2`, "e1\ne2\n", "tty1"},
			{"stdout-file", []int{0, 2}, 1, `printf 'o1\no2\n'; [ -t 2 ] && echo tty2 >&2; [ -t 1 ] || echo notty1 >&2`, "o1\no2\n", "tty2"},
		} {
			t.Run(c.name, func(t *testing.T) {
				ptmx, tty, err := pty.Open()
				if err != nil {
					t.Fatal(err)
				}
				defer ptmx.Close()
				file := filepath.Join(dir, c.name)
				f, err := os.Create(file)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd := s.cmd("--", "/bin/sh", "-c", c.script)
				std := []*os.File{tty, tty, tty}
				std[c.fileFd] = f
				cmd.Stdin, cmd.Stdout, cmd.Stderr = std[0], std[1], std[2]
				cmd.SysProcAttr = credsWithSetsid(cmd.SysProcAttr)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				tty.Close()
				out := readAll(ptmx)
				werr := cmd.Wait()
				got, _ := os.ReadFile(file)
				if werr != nil {
					t.Fatalf("launcher: %v; terminal %q, file %q", werr, out, got)
				}
				if string(got) != c.wantOut {
					t.Errorf("redirected fd %d holds %q, want %q", c.fileFd, got, c.wantOut)
				}
				if !strings.Contains(out, c.wantTTY) || !strings.Contains(out, "notty") {
					t.Errorf("terminal shows %q, want %q and the redirected fd not a tty", out, c.wantTTY)
				}
			})
		}
	})
}
