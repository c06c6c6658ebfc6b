package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// What a session can leave in a tree the launcher reads: links out of
// it (absolute, relative, through a directory), a FIFO, a device, a
// huge sparse file. None is read; a link inside the tree is.
func TestReadFileHostile(t *testing.T) {
	d := t.TempDir()
	root := filepath.Join(d, "root")
	write(t, filepath.Join(d, "secret"), "host secret")
	write(t, filepath.Join(root, "ok.json"), "{}")
	write(t, filepath.Join(root, "sub/real.json"), "[1]")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("sub/real.json", filepath.Join(root, "inside")))
	must(os.Symlink(filepath.Join(d, "secret"), filepath.Join(root, "abs")))
	must(os.Symlink("../secret", filepath.Join(root, "rel")))
	must(os.Symlink(d, filepath.Join(root, "dirlink")))
	must(os.Symlink("/dev/zero", filepath.Join(root, "zero")))
	must(os.Symlink("/proc/self/root/etc/passwd", filepath.Join(root, "magic")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	big := filepath.Join(root, "big")
	write(t, big, "")
	must(os.Truncate(big, 1<<40))

	if b, err := ReadFile(root, "ok.json", 10); err != nil || string(b) != "{}" {
		t.Errorf("ok.json: %q %v", b, err)
	}
	if b, err := ReadFile(root, "inside", 10); err != nil || string(b) != "[1]" {
		t.Errorf("a link inside the tree: %q %v", b, err)
	}
	for _, rel := range []string{"abs", "rel", "dirlink/secret", "../secret", "magic"} {
		if b, err := ReadFile(root, rel, 1<<20); err == nil {
			t.Errorf("%s: read %q out of the tree", rel, b)
		}
	}
	if _, err := ReadFile(root, "zero", 1<<20); err == nil {
		t.Error("a link to /dev/zero was read")
	}
	for _, rel := range []string{"fifo", "sub"} {
		if _, err := ReadFile(root, rel, 1<<20); !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", rel, err)
		}
	}
	var tl *TooLargeError
	if _, err := ReadFile(root, "big", 1<<20); !errors.As(err, &tl) || tl.Size != 1<<40 {
		t.Errorf("big: %v, want too large (1 TiB)", err)
	}
	if _, err := ReadFile(root, "ok.json", 1); !errors.As(err, &tl) {
		t.Errorf("over a 1-byte limit: %v", err)
	}
	if l, err := Readlink(root, "abs"); err != nil || l != filepath.Join(d, "secret") {
		t.Errorf("readlink: %q %v", l, err)
	}
	if st, err := Lstat(root, "abs"); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		t.Errorf("lstat of a link: %v", err)
	}
}

// A walk records links without following them, never leaves the tree,
// and stops at its limits.
func TestWalkBounded(t *testing.T) {
	d := t.TempDir()
	root := filepath.Join(d, "root")
	write(t, filepath.Join(d, "outside/x"), "x")
	write(t, filepath.Join(root, "tree/a"), "a")
	if err := os.Symlink(filepath.Join(d, "outside"), filepath.Join(root, "tree/out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d, "outside"), filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "tree", strings.Repeat("d/", 40))
	write(t, filepath.Join(deep, "f"), "f")
	m, trunc, err := Walk(root, "tree", DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if !trunc {
		t.Error("a tree 40 deep was not reported truncated")
	}
	if _, ok := m["a"]; !ok {
		t.Errorf("a missing: %v", m)
	}
	if v := m["out"]; !strings.Contains(v, "-> "+filepath.Join(d, "outside")) {
		t.Errorf("the link is %q", v)
	}
	for k := range m {
		if strings.HasPrefix(k, "out/") {
			t.Errorf("followed the link: %s", k)
		}
	}
	if _, _, err := Walk(root, "linked", DefaultLimits); err == nil {
		t.Error("walked a tree that is a symlink")
	}
	for i := 0; i < 50; i++ {
		write(t, filepath.Join(root, "many", strings.Repeat("n", 100)+string(rune('A'+i))), "")
	}
	m, trunc, _ = Walk(root, "many", Limits{Entries: 10, Depth: 4, NameBytes: 1 << 20})
	if len(m) != 10 || !trunc {
		t.Errorf("entries limit: %d entries, truncated %v", len(m), trunc)
	}
	m, trunc, _ = Walk(root, "many", Limits{Entries: 1000, Depth: 4, NameBytes: 1000})
	if len(m) > 10 || !trunc {
		t.Errorf("name bytes limit: %d entries, truncated %v", len(m), trunc)
	}
}

// A walk never enters a directory on another filesystem (a mount the
// session could not make, but a tree can hold): /dev's mounts (devpts,
// its tmpfs) are recorded, not walked. Seen failing (pts/ptmx walked)
// without the device check.
func TestWalkOneFilesystem(t *testing.T) {
	var top syscall.Stat_t
	if err := syscall.Stat("/dev", &top); err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir("/dev")
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, n := range names {
		var st syscall.Stat_t
		if n.IsDir() && syscall.Lstat("/dev/"+n.Name(), &st) == nil && st.Dev != top.Dev {
			mounts = append(mounts, n.Name())
		}
	}
	if len(mounts) == 0 {
		t.Skip("no filesystem mounted on a directory of /dev here")
	}
	m, _, err := Walk("/", "dev", Limits{Entries: 100000, Depth: 8, NameBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, mnt := range mounts {
		if m[mnt+"/"] != "a directory not entered" {
			t.Errorf("/dev/%s (another filesystem) recorded as %q", mnt, m[mnt+"/"])
		}
		for k := range m {
			if strings.HasPrefix(k, mnt+"/") && k != mnt+"/" {
				t.Errorf("walked into /dev/%s: %s", mnt, k)
			}
		}
	}
}
