package approvals

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

func newStore(t *testing.T) (Store, string) {
	t.Helper()
	base := t.TempDir()
	ws := filepath.Join(base, "work")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return Store{Dir: filepath.Join(base, "state", "claude-sandbox", "approvals")}, ws
}

func TestAddListRemove(t *testing.T) {
	s, ws := newStore(t)
	if l, err := s.List(ws); err != nil || len(l) != 0 {
		t.Fatalf("empty store: %v %v", l, err)
	}
	for _, e := range []Entry{{Kind: Domain, Value: "pypi.org"}, {Kind: IP, Value: "192.168.1.50"}, {Kind: HostPort, Value: "5432"}, {Kind: Domain, Value: "pypi.org"}} {
		if _, _, err := s.Add(ws, e); err != nil {
			t.Fatalf("Add %v: %v", e, err)
		}
	}
	// Through a symlink to the workspace: the same store.
	link := filepath.Join(filepath.Dir(ws), "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	l, err := s.List(link)
	if err != nil || len(l) != 3 || l[0].String() != "domain pypi.org" || l[1].String() != "ip 192.168.1.50/32" || l[2].String() != "host-port 5432/tcp" {
		t.Fatalf("List: %v %v", l, err)
	}
	st, err := os.Stat(s.Dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("store directory mode %v %v", st.Mode(), err)
	}
	canon, _ := Canonical(ws)
	fst, err := os.Stat(s.Path(canon))
	if err != nil || fst.Mode().Perm() != 0o600 {
		t.Errorf("store file mode %v %v", fst.Mode(), err)
	}
	if b, _ := os.ReadFile(s.Path(canon)); !strings.Contains(string(b), `"workspace": "`+canon+`"`) {
		t.Errorf("the file does not record its workspace:\n%s", b)
	}
	if e, err := s.Remove(ws, "2"); err != nil || e.Kind != IP {
		t.Errorf("Remove 2: %v %v", e, err)
	}
	if e, err := s.Remove(ws, "domain pypi.org"); err != nil || e.Value != "pypi.org" {
		t.Errorf("Remove by entry: %v %v", e, err)
	}
	if _, err := s.Remove(ws, "7"); err == nil {
		t.Error("removed number 7 of 1")
	}
	if l, _ := s.List(ws); len(l) != 1 || l[0].Kind != HostPort {
		t.Errorf("after removes: %v", l)
	}
	if _, _, err := s.Add(ws, Entry{Kind: "file", Value: "/etc"}); err == nil {
		t.Error("an unknown kind was stored")
	}
	if _, _, err := s.Add(ws, Entry{Kind: Domain, Value: "bad domain!"}); err == nil {
		t.Error("a bad domain was stored")
	}
}

// TestHostileStore: a store file that is a symlink, a FIFO, huge, not
// JSON, for another workspace, or with a bad entry is refused whole with
// an error naming the file and the fix; a directory others may write is
// refused. Each fails without the checks in read (a link is followed, a
// FIFO blocks, a huge file is read whole, a bad entry is applied).
func TestHostileStore(t *testing.T) {
	s, ws := newStore(t)
	if _, _, err := s.Add(ws, Entry{Kind: Domain, Value: "pypi.org"}); err != nil {
		t.Fatal(err)
	}
	canon, _ := Canonical(ws)
	path := s.Path(canon)
	good, _ := os.ReadFile(path)
	other := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(other, good, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, make := range map[string]func() error{
		"symlink": func() error { return os.Symlink(other, path) },
		"fifo":    func() error { return unix.Mkfifo(path, 0o600) },
		"huge": func() error {
			return os.WriteFile(path, append(good[:len(good)-2], []byte(strings.Repeat(" ", MaxFileSize)+"}\n")...), 0o600)
		},
		"bad json": func() error { return os.WriteFile(path, []byte(`{"v":1,"workspace":`), 0o600) },
		"other workspace": func() error {
			return os.WriteFile(path, []byte(strings.Replace(string(good), canon, "/elsewhere", 1)), 0o600)
		},
		"bad entry": func() error {
			return os.WriteFile(path, []byte(strings.Replace(string(good), "pypi.org", "not a domain!", 1)), 0o600)
		},
		"entry not canonical": func() error {
			return os.WriteFile(path, []byte(strings.Replace(string(good), "pypi.org", " pypi.org", 1)), 0o600)
		},
		"unknown field": func() error {
			return os.WriteFile(path, []byte(strings.Replace(string(good), `"v": 1`, `"v": 1, "allow-all": true`, 1)), 0o600)
		},
		"mode 0666": func() error {
			if err := os.WriteFile(path, good, 0o600); err != nil {
				return err
			}
			return os.Chmod(path, 0o666)
		},
	} {
		t.Run(name, func(t *testing.T) {
			os.Remove(path)
			if err := make(); err != nil {
				t.Fatal(err)
			}
			l, err := s.List(ws)
			if err == nil || len(l) != 0 {
				t.Fatalf("List: %v, %v: want refused", l, err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "remove the file") {
				t.Errorf("the error names neither the file nor the fix: %v", err)
			}
			if strings.Contains(err.Error(), "<nil>") {
				t.Errorf("the error does not say what is wrong: %v", err)
			}
			if _, _, err := s.Add(ws, Entry{Kind: Domain, Value: "example.org"}); err == nil {
				t.Errorf("Add over a refused store succeeded")
			}
		})
	}
	os.Remove(path)
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ws); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("a directory others may write: %v", err)
	}
}

// TestHostileStoreOwner tries the two refusals TestHostileStore cannot
// make as any user: a store file of another user's (the package comment
// and the threat model claim it is refused; as root, the caller that
// could be fooled into trusting a file it did not write, it is made
// nobody's), and a store directory that is a link to another directory
// (a session that could plant the link would choose the file read).
func TestHostileStoreOwner(t *testing.T) {
	testutil.NeedsRoot(t)
	s, ws := newStore(t)
	if _, _, err := s.Add(ws, Entry{Kind: Domain, Value: "pypi.org"}); err != nil {
		t.Fatal(err)
	}
	canon, _ := Canonical(ws)
	path := s.Path(canon)
	if err := os.Chown(path, testutil.Nobody, testutil.Nobody); err != nil {
		t.Fatal(err)
	}
	l, err := s.List(ws)
	if err == nil || len(l) != 0 || !strings.Contains(err.Error(), "owned by uid 65534") || !strings.Contains(err.Error(), "remove the file") {
		t.Errorf("a store file of another user's: List %v, %v: want refused, naming the owner and the fix", l, err)
	}
	if _, _, err := s.Add(ws, Entry{Kind: Domain, Value: "example.org"}); err == nil {
		t.Errorf("Add over another user's store file succeeded")
	}
	if err := os.Chown(path, 0, 0); err != nil {
		t.Fatal(err)
	}

	// The directory itself a link (to a directory holding a good file).
	moved := s.Dir + ".real"
	if err := os.Rename(s.Dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, s.Dir); err != nil {
		t.Fatal(err)
	}
	if l, err := s.List(ws); err == nil || len(l) != 0 {
		t.Errorf("a store directory that is a link: List %v, %v: want refused", l, err)
	}
	if _, _, err := s.Add(ws, Entry{Kind: Domain, Value: "example.org"}); err == nil {
		t.Errorf("Add through a linked store directory succeeded")
	}
}

func TestCovered(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	dir := filepath.Join(home, ".local", "state", "claude-sandbox", "approvals")
	if err := os.MkdirAll(filepath.Join(home, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(home, filepath.Join(base, "h")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		srcs []string
		want bool
	}{
		{[]string{filepath.Join(home, "proj")}, false},
		{[]string{home}, true},
		{[]string{filepath.Join(base, "h")}, true}, // through a link
		{[]string{filepath.Join(home, ".local", "state")}, true},
		{[]string{"/"}, true},
		{[]string{filepath.Join(home, ".local", "statefoo")}, false},
	} {
		if _, got := Covered(dir, tt.srcs); got != tt.want {
			t.Errorf("Covered(%v) = %v, want %v", tt.srcs, got, tt.want)
		}
	}
}

func TestParseEntry(t *testing.T) {
	for in, want := range map[string]string{
		"pypi.org":            "domain pypi.org",
		"domain pypi.org:443": "domain pypi.org:443",
		"10.1.2.3":            "ip 10.1.2.3/32",
		"ip 10.0.0.0/8":       "ip 10.0.0.0/8",
		"host-port 8080":      "host-port 8080/tcp",
	} {
		e, err := ParseEntry(in)
		if err != nil || e.String() != want {
			t.Errorf("ParseEntry(%q) = %v, %v; want %s", in, e, err, want)
		}
	}
}
