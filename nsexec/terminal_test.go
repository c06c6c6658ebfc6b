package nsexec

import (
	"os"
	"reflect"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Which fds get the pty, whether keystrokes are relayed, where output goes
// and whether the pty translates newlines, for each mix of terminal and
// non-terminal stdio.
func TestNewTerminal(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	ptmx2, tty2, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx2.Close()
	defer tty2.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if newTerminal(r, w, w, false) != nil {
		t.Error("no terminal among the fds, yet a pty")
	}
	for _, c := range []struct {
		name          string
		in, out, err  *os.File
		fds           []int
		input, opost  bool
		outIsTerminal bool
		interactive   bool // the terminal written to is the one read from
	}{
		{"all terminals", tty, tty, tty, []int{0, 1, 2}, true, true, true, true},
		{"stdin a pipe, stdout the terminal", r, tty, w, []int{1}, false, false, true, false},
		{"stdin a pipe, stderr the terminal", r, w, tty, []int{2}, false, false, true, false},
		{"stderr redirected", tty, tty, w, []int{0, 1}, true, true, true, true},
		{"only stdin a terminal", tty, w, w, []int{0}, true, true, true, true},
		{"stdout another terminal", tty2, tty, tty, []int{0, 1, 2}, true, true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			term := newTerminal(c.in, c.out, c.err, true)
			if term == nil {
				t.Fatal("no pty")
			}
			if !reflect.DeepEqual(term.fds, c.fds) || term.input != c.input {
				t.Errorf("fds %v input %v, want %v %v", term.fds, term.input, c.fds, c.input)
			}
			if d, ok := term.out.w.(*dropOnError); !ok || d.w != tty {
				t.Errorf("the pty's output does not go to the host terminal")
			}
			if term.out.f.interactive != c.interactive || term.out.f.clipboard != c.interactive {
				t.Errorf("filter interactive %v clipboard %v, want %v", term.out.f.interactive, term.out.f.clipboard, c.interactive)
			}
			_, tio := term.state()
			if tio == nil || (tio.Oflag&unix.OPOST != 0) != c.opost {
				t.Errorf("pty OPOST %v, want %v", tio != nil && tio.Oflag&unix.OPOST != 0, c.opost)
			}
		})
	}
}

// A terminal that refuses the pty's output does not stop the draining.
func TestDropOnError(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	d := &dropOnError{w: w}
	for i := 0; i < 2; i++ {
		if n, err := d.Write([]byte("abc")); n != 3 || err != nil {
			t.Errorf("write %d: %d, %v; want 3, nil", i, n, err)
		}
	}
	r.Close()
}
