package control

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// dialEnv makes the test binary a client: it calls the socket named and
// prints the response as JSON (or "error: ...").
const dialEnv = "CONTROL_TEST_DIAL"

func TestMain(m *testing.M) {
	if p := os.Getenv(dialEnv); p != "" {
		r, err := Call(p, Request{Op: OpStatus})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(0)
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func serveTest(t *testing.T, dir string) *Server {
	t.Helper()
	s, err := listenIn(dir, "t1", os.Getuid(), func(r Request) Response {
		return Response{OK: true, Status: &Status{ID: "t1", Command: []string{r.Op}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := serveTest(t, dir)
	fi, err := os.Lstat(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a socket of mode 0600", fi.Mode())
	}
	r, err := Call(s.Path, Request{Op: OpStatus})
	if err != nil || !r.OK || r.Status == nil || r.Status.Command[0] != OpStatus {
		t.Fatalf("status: %+v, %v", r, err)
	}
	// Another version is refused.
	c, err := net.Dial("unix", s.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintln(c, `{"v":99,"op":"status"}`)
	var got Response
	if err := json.NewDecoder(c).Decode(&got); err != nil || got.OK || !strings.Contains(got.Error, "version") {
		t.Fatalf("version 99: %+v, %v", got, err)
	}
	s.Close()
	if _, err := os.Lstat(s.Path); !os.IsNotExist(err) {
		t.Fatalf("socket left after Close: %v", err)
	}
}

// dialAs runs the test binary as a client of path with attr.
func dialAs(t *testing.T, path string, attr *syscall.SysProcAttr) string {
	t.Helper()
	// A copy another uid may run.
	bd, err := os.MkdirTemp("", "control-client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bd) })
	bin := filepath.Join(bd, "client")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(bd, 0o755)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), dialEnv+"="+path)
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v: %s", err, out)
	}
	return string(out)
}

// TestRefusesOtherUID: even with the path and the socket open to all
// (the directory's 0700 and the socket's 0600 normally stop it first),
// another uid is refused by its credentials.
func TestRefusesOtherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root (to run a client as uid 65534)")
	}
	dir, err := os.MkdirTemp("", "control-open")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	s := serveTest(t, dir)
	os.Chmod(s.Path, 0o666)
	out := dialAs(t, s.Path, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}})
	if !strings.Contains(out, "refused: uid 65534") {
		t.Fatalf("uid 65534 got: %s", out)
	}
	// And the owner, from here, is accepted.
	if out := dialAs(t, s.Path, nil); !strings.Contains(out, `"ok":true`) {
		t.Fatalf("owner got: %s", out)
	}
}

// TestRefusesOtherUserNamespace: a process of the same uid in another
// user namespace (every sandbox's processes are) is refused, wherever the
// socket's path is visible to it.
func TestRefusesOtherUserNamespace(t *testing.T) {
	dir := t.TempDir()
	s := serveTest(t, dir)
	uid, gid := os.Getuid(), os.Getgid()
	out := dialAs(t, s.Path, &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
	})
	if !strings.Contains(out, "refused: the peer runs in another user namespace") {
		t.Fatalf("a client in another user namespace got: %s", out)
	}
}

func TestEnsureDirRefusesForeign(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root (to make directories of another owner)")
	}
	base := t.TempDir()
	os.Chmod(base, 0o700)
	env := func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return base
		}
		return ""
	}
	dir := filepath.Join(base, "claude-sandbox")
	// Made when missing, 0700.
	got, err := EnsureDir(0, env)
	if err != nil || got != dir {
		t.Fatalf("EnsureDir: %q, %v", got, err)
	}
	if fi, _ := os.Lstat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", fi.Mode())
	}
	for name, mk := range map[string]func() error{
		"wide mode":     func() error { return os.Mkdir(dir, 0o755) },
		"another owner": func() error { os.Mkdir(dir, 0o700); return os.Chown(dir, 65534, 65534) },
		"a link":        func() error { return os.Symlink(t.TempDir(), dir) },
	} {
		os.RemoveAll(dir)
		if err := mk(); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o755) // no-op on a link's target check: Lstat
		if name != "wide mode" && name != "a link" {
			os.Chmod(dir, 0o700)
		}
		if _, err := EnsureDir(0, env); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The /tmp fallback when the runtime directory is not the caller's.
	os.Chown(base, 65534, 65534)
	if c := Candidates(0, env); c[0] == dir {
		t.Errorf("a runtime directory of another owner was chosen: %v", c)
	}
}

func TestStaleRemoved(t *testing.T) {
	old := staleAge
	staleAge = 0
	defer func() { staleAge = old }()
	base := t.TempDir()
	env := func(k string) string {
		if k == "XDG_RUNTIME_DIR" {
			return base
		}
		return ""
	}
	os.Chmod(base, 0o700)
	dir, err := EnsureDir(os.Getuid(), env)
	if err != nil {
		t.Fatal(err)
	}
	live := serveTest(t, dir)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "dead.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	// Only this test's directory: Find also lists the /tmp fallback,
	// where sandboxes of this uid running meanwhile (other packages'
	// tests) have theirs.
	var found []Sandbox
	for _, s := range Find(os.Getuid(), env) {
		if filepath.Dir(s.Path) == dir {
			found = append(found, s)
		}
	}
	if len(found) != 2 {
		t.Fatalf("found %v", found)
	}
	for _, s := range found {
		_, err := Call(s.Path, Request{Op: OpStatus})
		switch s.ID {
		case "dead":
			if err != ErrStale {
				t.Fatalf("dead socket: %v", err)
			}
			RemoveStale(s, os.Getuid())
		case live.ID:
			if err != nil {
				t.Fatal(err)
			}
			RemoveStale(s, os.Getuid()) // must not matter: only after ErrStale
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "dead.sock")); !os.IsNotExist(err) {
		t.Errorf("stale socket kept: %v", err)
	}
	if _, err := os.Lstat(live.Path); err != nil {
		t.Errorf("a live launcher's socket was removed: %v", err)
	}
}

// A launcher's answer longer than a read buffer (the pending requests,
// each naming its process: a session's long command line) is read
// whole, and so is a long request (allow with many entries): the reads
// stopped at 4 KiB, so one request from a process with a long command
// line hid every request of its sandbox from requests and watch.
func TestLongLines(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("a", 100<<10)
	s, err := listenIn(dir, "t2", os.Getuid(), func(r Request) Response {
		return Response{OK: true, Changes: []string{long, strconv.Itoa(len(strings.Join(r.Domain, ",")))}}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var many []string
	for i := 0; i < 2000; i++ {
		many = append(many, "host"+strconv.Itoa(i)+".example.com")
	}
	r, err := Call(s.Path, Request{Op: OpAllow, Domain: many})
	if err != nil || !r.OK || len(r.Changes) != 2 || r.Changes[0] != long || r.Changes[1] != strconv.Itoa(len(strings.Join(many, ","))) {
		t.Fatalf("a 100 KiB answer to a %d-byte request: %v (error %q)", len(strings.Join(many, ",")), err, r.Error)
	}
	// Past the bounds: refused, not read without end.
	over := strings.Repeat("b", maxAnswer)
	s2, err := listenIn(dir, "t3", os.Getuid(), func(r Request) Response {
		return Response{OK: true, Changes: []string{over}}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := Call(s2.Path, Request{Op: OpStatus}); err == nil {
		t.Fatal("an answer over maxAnswer was taken")
	}
}
