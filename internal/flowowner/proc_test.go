package flowowner

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeProc is a /proc of the test's own making: what a sandbox controls
// in its /proc is its processes' argv, working directories and
// descriptors, so a tree of plain directories, files and links stands in
// for it (FindSocket reads links, never follows them).
type fakeProc struct {
	t   *testing.T
	dir string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, dir: t.TempDir()}
}

// proc adds process pid with argv (NUL-joined as given), cwd, and fd
// links to each target.
func (p *fakeProc) proc(pid string, cmdline, cwd string, fds ...string) {
	d := filepath.Join(p.dir, pid)
	if err := os.MkdirAll(filepath.Join(d, "fd"), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if cmdline != "" {
		if err := os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmdline), 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	if cwd != "" {
		if err := os.Symlink(cwd, filepath.Join(d, "cwd")); err != nil {
			p.t.Fatal(err)
		}
	}
	for i, target := range fds {
		if err := os.Symlink(target, filepath.Join(d, "fd", strconv.Itoa(i))); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *fakeProc) open() int {
	fd, err := unix.Open(p.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// lower sets a scan bound for the test.
func lower(t *testing.T, v *int, to int) {
	old := *v
	*v = to
	t.Cleanup(func() { *v = old })
}

// The scan looks at maxPIDs processes and reads maxReadlink links at
// most, whatever the sandbox holds; only numeric entries are processes.
func TestFindSocketBounds(t *testing.T) {
	p := newFakeProc(t)
	for i := 1; i <= 6; i++ {
		p.proc(strconv.Itoa(i), "sh\x00", "/", "pipe:[1]", "pipe:[2]")
	}
	p.proc("7", "nc\x00-u\x00", "/w", "socket:[4242]")
	// Not processes: a leading zero or sign, a name.
	p.proc("07", "fake\x00", "/", "socket:[77]")
	p.proc("+8", "fake\x00", "/", "socket:[78]")
	p.proc("self", "fake\x00", "/", "socket:[79]")
	proc := p.open()

	if o, ok := FindSocket(proc, 4242, 0); !ok || o.PID != 7 || strings.Join(o.Argv, " ") != "nc -u" || o.Cwd != "/w" {
		t.Fatalf("FindSocket: %+v %v, want pid 7, nc -u in /w", o, ok)
	}
	for _, ino := range []uint32{77, 78, 79} {
		if o, ok := FindSocket(proc, ino, 0); ok {
			t.Errorf("socket %d found in a non-process entry: %+v", ino, o)
		}
	}
	t.Run("pids", func(t *testing.T) {
		lower(t, &maxPIDs, 6) // pid 7 is past the bound
		if o, ok := FindSocket(proc, 4242, 0); ok {
			t.Errorf("found %+v past maxPIDs", o)
		}
		// The hint is looked at whatever the bound.
		if o, ok := FindSocket(proc, 4242, 7); !ok || o.PID != 7 {
			t.Errorf("with the hint: %+v %v", o, ok)
		}
	})
	t.Run("links", func(t *testing.T) {
		lower(t, &maxReadlink, 11) // pids 1-6 hold 12 links before pid 7's
		if o, ok := FindSocket(proc, 4242, 0); ok {
			t.Errorf("found %+v past maxReadlink", o)
		}
		lower(t, &maxReadlink, 13)
		if _, ok := FindSocket(proc, 4242, 0); !ok {
			t.Error("not found within maxReadlink")
		}
	})
}

// What a process shows of itself is bounded and escaped, and a link put
// in place of its cmdline is not followed.
func TestDescribeHostile(t *testing.T) {
	p := newFakeProc(t)
	long := strings.Repeat("A", 3000)
	p.proc("1", long+"\x00\x1b]0;owned\x07\x00"+strings.Repeat("x\x00", 600), "/w")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host-secret\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.proc("2", "", "/tmp/\x1b[2J")
	if err := os.Symlink(secret, filepath.Join(p.dir, "2", "cmdline")); err != nil {
		t.Fatal(err)
	}
	proc := p.open()

	o := Describe(proc, 1)
	if len(o.Argv) == 0 || o.Argv[0] != strings.Repeat("A", maxArg)+"..." {
		t.Errorf("first argument %.40q..., want cut to %d bytes and marked", o.Argv, maxArg)
	}
	if len(o.Argv) < 2 || o.Argv[1] != `\x1b]0;owned\x07` {
		t.Errorf("second argument %q, want its escapes shown escaped", o.Argv)
	}
	total := 0
	for _, a := range o.Argv {
		total += len(a)
	}
	if len(o.Argv) > maxArgs+1 || total > maxCmdline+maxArgs*8 {
		t.Errorf("%d arguments, %d bytes: past the bounds", len(o.Argv), total)
	}
	o = Describe(proc, 2)
	if len(o.Argv) != 0 {
		t.Errorf("cmdline a link to a host file: read %q", o.Argv)
	}
	if o.Cwd != `/tmp/\x1b[2J` {
		t.Errorf("cwd %q, want it escaped", o.Cwd)
	}
}
