package integration

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// What the command writes: text and colour that must arrive, then a
// cursor position query (DSR), a clipboard write (OSC 52), a DECRQSS and a
// title report, each of which makes a terminal answer into its input or
// touches its clipboard; "end" last.
const answerScript = `printf 'visible \033[31mred\033[m'; printf '\033[6n'; printf '\033]52;c;aGVsbG8=\007'; printf '\033P$qm\033\\'; printf '\033[21t'; printf ' end\n'`

// openRawPty opens a pty whose slave (the host terminal of the test) does
// no echo and no line editing, so its input queue holds exactly what the
// "terminal" (the master) typed into it.
func openRawPty(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ECHO | unix.ICANON | unix.ISIG
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return ptmx, tty
}

// pending types s into the host terminal, as a late answer or a keystroke,
// and waits until its input queue holds it.
func pending(t *testing.T, ptmx, tty *os.File, s string) {
	t.Helper()
	if _, err := ptmx.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	for inputQueued(t, tty) < len(s) {
		time.Sleep(5 * time.Millisecond) // the pty's flip buffer is pushed by a kernel worker
	}
}

func inputQueued(t *testing.T, tty *os.File) int {
	t.Helper()
	n, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readUntil reads the terminal's side until want has arrived.
func readUntil(t *testing.T, ptmx *os.File, want string) string {
	t.Helper()
	var got strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), want) {
		n, err := ptmx.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("the terminal got %q, then %v, before %q", got.String(), err, want)
		}
	}
	return got.String()
}

// Issue 28: with stdin not a terminal and stdout (and stderr) the host
// terminal, what would make the terminal answer into its input (read by
// the host's shell after the sandbox ends) or write its clipboard never
// reaches it, and what the terminal holds unread in its input when the
// sandbox ends is discarded. Fails without the fix: the terminal receives
// ESC[6n, the OSC 52 and the DECRQSS as written, and "pending-answer" is
// left for the shell.
func TestTerminalOutputOnlyGetsNoQueries(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		ptmx, tty := openRawPty(t)
		pending(t, ptmx, tty, "pending-answer")
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		cmd := s.cmd("--", "/bin/sh", "-c", answerScript)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = null, tty, tty
		if err := cmd.Run(); err != nil {
			t.Fatalf("launcher: %v", err)
		}
		out := readUntil(t, ptmx, " end")
		if !strings.Contains(out, "visible \x1b[31mred\x1b[m end") {
			t.Errorf("the text and its colour did not arrive as written: %q", out)
		}
		for _, bad := range []string{"\x1b[6n", "\x1b]52", "\x1bP", "\x1b[21t"} {
			if strings.Contains(out, bad) {
				t.Errorf("the host terminal received %q: %q", bad, out)
			}
		}
		if n := inputQueued(t, tty); n != 0 {
			t.Errorf("%d bytes left in the host terminal's input after the sandbox ended", n)
		}
	})
}

// When the terminal is also the command's input, its answers come back to
// the command (queries pass) and the clipboard follows --osc52: denied by
// default, passed with allow.
func TestTerminalInteractiveClipboard(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		for _, c := range []struct {
			opts      []string
			clipboard bool
		}{{nil, false}, {[]string{"--osc52=deny"}, false}, {[]string{"--osc52", "allow"}, true}} {
			ptmx, tty := openRawPty(t)
			cmd := s.cmd(append(c.opts, "--", "/bin/sh", "-c", answerScript)...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			cmd.SysProcAttr = credsWithSetsid(cmd.SysProcAttr)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			out := readUntil(t, ptmx, " end")
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%q: launcher: %v", c.opts, err)
			}
			if !strings.Contains(out, "\x1b[6n") || !strings.Contains(out, "\x1bP$qm") {
				t.Errorf("%q: the queries did not reach the terminal, whose answers go back to the command: %q", c.opts, out)
			}
			if got := strings.Contains(out, "\x1b]52;c;aGVsbG8="); got != c.clipboard {
				t.Errorf("%q: OSC 52 reached the terminal: %v, want %v (%q)", c.opts, got, c.clipboard, out)
			}
			if strings.Contains(out, "\x1b[21t") {
				t.Errorf("%q: the title report reached the terminal: %q", c.opts, out)
			}
		}
	})
}
