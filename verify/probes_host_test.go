package verify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// P40 sees a terminal that is not a pty of the sandbox's devpts: here the
// fixture's /dev/pts is a plain directory, so the test's pty (from the
// host's devpts) is foreign, as the user's terminal would be inside.
func TestHostTerminalProbe(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	fixture := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fixture, "dev/pts"), 0o755); err != nil {
		t.Fatal(err)
	}
	fd := int(tty.Fd())
	if st, ev := hostTerminalProbe(&Env{Root: fixture}, []int{fd}); st != Escaped {
		t.Errorf("a host terminal on the fds: %s %s, want ESCAPED", st, ev)
	}
	// The same pty judged against its own devpts is the sandbox's.
	if st, ev := hostTerminalProbe(&Env{}, []int{fd}); st != Blocked || !strings.Contains(ev, "own devpts") {
		t.Errorf("a pty of the devpts at /dev/pts: %s %s, want BLOCKED", st, ev)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if st, ev := hostTerminalProbe(&Env{Root: fixture}, []int{int(r.Fd()), int(w.Fd())}); st != Blocked {
		t.Errorf("no terminal at all: %s %s, want BLOCKED", st, ev)
	}
}

// P41 connects to a socket under /run and to one that only /proc/net/unix
// names; a socket masked by a plain file, or one whose peer is inside the
// sandbox, is no escape.
func TestHostSocketProbe(t *testing.T) {
	outside := func(int) bool { return true }
	fixture := t.TempDir()
	for _, d := range []string{"run/sub", "srv", "proc/net"} {
		if err := os.MkdirAll(filepath.Join(fixture, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	listen := func(p string) net.Listener {
		l, err := net.Listen("unix", filepath.Join(fixture, p))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	e := &Env{Root: fixture}
	if st, ev := hostSocketProbe(e, outside); st != Blocked {
		t.Errorf("no sockets: %s %s, want BLOCKED", st, ev)
	}
	l := listen("run/sub/x.sock")
	if st, ev := hostSocketProbe(e, outside); st != Escaped || !strings.Contains(ev, "x.sock") {
		t.Errorf("a host socket under /run: %s %s, want ESCAPED", st, ev)
	}
	// Its peer in this PID namespace: the sandbox's own socket.
	if st, ev := hostSocketProbe(e, peerOutside); st != Blocked {
		t.Errorf("a socket whose listener is in this PID namespace: %s %s, want BLOCKED", st, ev)
	}
	l.Close()
	os.Remove(filepath.Join(fixture, "run/sub/x.sock"))
	if err := os.WriteFile(filepath.Join(fixture, "run/sub/x.sock"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if st, ev := hostSocketProbe(e, outside); st != Blocked {
		t.Errorf("a masked socket: %s %s, want BLOCKED", st, ev)
	}
	listen("srv/s.sock")
	listing := "Num       RefCount Protocol Flags    Type St Inode Path\n" +
		"0000000000000000: 00000002 00000000 00010000 0001 01 21000 /srv/s.sock\n"
	if err := os.WriteFile(filepath.Join(fixture, "proc/net/unix"), []byte(listing), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, ev := hostSocketProbe(e, outside); st != Escaped || !strings.Contains(ev, "s.sock") {
		t.Errorf("a listed host socket outside /run: %s %s, want ESCAPED", st, ev)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	if got := mounts.UnescapeMountinfo(`/srv/a\040b.sock`); got != "/srv/a b.sock" {
		t.Errorf("unescape = %q", got)
	}
}

// P28: a socket under /tmp whose listener is a process of the sandbox
// (Claude Code binds some in its own /tmp) is no escape; one whose
// listener is outside is.
func TestSessionSocketProbe(t *testing.T) {
	fixture := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fixture, "tmp/claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Env{Root: fixture}
	if st, ev := sessionSocketProbe(e, peerOutside); st != Blocked {
		t.Errorf("no sockets: %s %s, want BLOCKED", st, ev)
	}
	l, err := net.Listen("unix", filepath.Join(fixture, "tmp/claude/ide.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if st, ev := sessionSocketProbe(e, peerOutside); st != Blocked || !strings.Contains(ev, "1 the sandbox's own") {
		t.Errorf("a socket whose listener is in this PID namespace: %s %s, want BLOCKED", st, ev)
	}
	if st, ev := sessionSocketProbe(e, func(int) bool { return true }); st != Escaped || !strings.Contains(ev, "ide.sock") {
		t.Errorf("a socket whose listener is outside: %s %s, want ESCAPED", st, ev)
	}
}

// P54 reports ESCAPED where a set-user-ID bit holds on a file owned by
// host root (this test, run as root outside any sandbox), BLOCKED
// otherwise, and removes its file.
func TestSetIDProbe(t *testing.T) {
	ws := t.TempDir()
	st, ev := setIDProbe(&Env{Workspace: ws})
	want := Blocked
	if h, known := hostUID(&Env{}, 0); os.Geteuid() == 0 && (!known || h == 0) {
		want = Escaped
	}
	if st != want {
		t.Errorf("P54 as uid %d: %s %s, want %s", os.Geteuid(), st, ev, want)
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Errorf("P54 left %v behind", ents)
	}
	if st, _ := setIDProbe(&Env{}); st != Skip {
		t.Errorf("P54 without a workspace: %s, want SKIP", st)
	}
}

// P54 reads the whole chain of uid maps, as the launcher decides who is
// host root: under rootless Podman the container's uid 0 (the sandbox's,
// mapped 0 to 0 one level up) is the rootless user on the host, so a
// set-user-ID file of uid 0 in the workspace is no escape. The launcher
// records the levels above (CallerUIDMapEnv); a chain whose top maps 0 to
// 0 is still host root.
func TestSetIDProbeUIDMapChain(t *testing.T) {
	testutil.NeedsRoot(t) // the probe's file must be uid 0
	if h, _ := hostUID(&Env{}, 0); h != 0 {
		t.Fatal("this test must run where uid 0 is host root (the chain is given above it)")
	}
	for _, c := range []struct {
		chain string
		want  Status
	}{
		{"0 1000 1,1 100000 65536", Blocked},           // rootless Podman, container root
		{"0 0 65536|0 1000 1,1 100000 65536", Blocked}, // nested: a user namespace inside it
		{"0 0 4294967295", Escaped},                    // rootful: host root
		{"0 0 65536|0 0 4294967295", Escaped},          // nested, host root at the top
		{"1 100000 65536", Blocked},                    // uid 0 not mapped above: the overflow uid
	} {
		env := map[string]string{CallerUIDMapEnv: c.chain}
		ws := t.TempDir()
		st, ev := setIDProbe(&Env{Workspace: ws, Getenv: func(k string) string { return env[k] }})
		if st != c.want {
			t.Errorf("P54 with the chain %q above: %s %s, want %s", c.chain, st, ev, c.want)
		}
	}
}

func TestMapUID(t *testing.T) {
	for _, c := range []struct {
		m      string
		uid    uint32
		want   uint32
		wantOK bool
	}{
		{"0 1000 1\n1 100000 65536", 0, 1000, true},
		{"0 1000 1\n1 100000 65536", 5, 100004, true},
		{"0 1000 1\n1 100000 65536", 65537, 0, false},
		{"         0          0 4294967295\n", 7, 7, true},
		{"", 0, 0, false},
	} {
		if got, ok := mapUID(c.m, c.uid); got != c.want || ok != c.wantOK {
			t.Errorf("mapUID(%q, %d) = %d %v, want %d %v", c.m, c.uid, got, ok, c.want, c.wantOK)
		}
	}
}

// The launcher sets the chain only below the initial user namespace (here,
// as the tests run, nothing); in a user namespace of its own it records
// its map, then the chain above.
func TestCallerUIDMaps(t *testing.T) {
	testutil.NeedsRoot(t)
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(strings.Fields(string(b)), " ") != "0 0 4294967295" {
		t.Fatalf("this test runs in the initial user namespace; uid_map %q", b)
	}
	if got := CallerUIDMaps(func(string) string { return "" }); got != "" {
		t.Errorf("in the initial user namespace: %q, want none", got)
	}
}
