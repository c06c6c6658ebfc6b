package install

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// A symlink planted in a tree the user (and the sandbox) can write
// redirects no write: the command is skipped with a warning, a shared
// directory through a link is refused, and the links' targets, standing
// in for root's directories, stay as they were.
func TestPlantedSymlinksRefused(t *testing.T) {
	victim := func(t *testing.T) string {
		d := t.TempDir()
		write(t, filepath.Join(d, "keep"), "root only\n", 0o600)
		return d
	}
	untouched := func(t *testing.T, what, dir string) {
		t.Helper()
		ents, _ := os.ReadDir(dir)
		if b, _ := os.ReadFile(filepath.Join(dir, "keep")); len(ents) != 1 || string(b) != "root only\n" {
			t.Errorf("%s: the link's target %s was written through: %v", what, dir, ents)
		}
	}
	// ~/.claude/commands, then ~/.claude, a link.
	for _, rel := range []string{".claude/commands", ".claude"} {
		s := newScratch(t)
		v := victim(t)
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(s.l.UserHome(), rel)), 0o700))
		must(t, os.Symlink(v, filepath.Join(s.l.UserHome(), rel)))
		var stderr bytes.Buffer
		o := s.opts()
		o.Stderr = &stderr
		if _, err := Install(s.l, o); err != nil {
			t.Fatalf("%s a link: %v", rel, err)
		}
		if !strings.Contains(stderr.String(), "is a symlink") || !strings.Contains(stderr.String(), "/verify-sandbox command was not installed") {
			t.Errorf("%s a link: warning %q", rel, stderr.String())
		}
		untouched(t, rel, v)
		if _, err := Uninstall(s.l, o); err != nil {
			t.Fatal(err)
		}
		untouched(t, rel+" (uninstall)", v)
	}
	// The shared directory, a directory above it, or its .claude.json, a
	// link.
	for _, c := range []struct{ shared, link string }{
		{"/state/link", "state/link"},
		{"/state/link/claude", "state/link"},
		{"/state/claude", "state/claude/.claude.json"},
	} {
		s := newScratch(t)
		v := victim(t)
		at := filepath.Join(s.l.Root, c.link)
		must(t, os.MkdirAll(filepath.Dir(at), 0o755))
		target := v
		if strings.HasSuffix(c.link, ".json") {
			target = filepath.Join(v, "keep")
		}
		must(t, os.Symlink(target, at))
		before := s.everything(t)
		o := s.opts()
		o.Shared = c.shared
		_, err := Install(s.l, o)
		if err == nil || !errors.Is(err, ErrSymlinkRefused) {
			t.Errorf("--shared-config %s with %s a link: %v; want a refusal naming the link", c.shared, c.link, err)
		}
		untouched(t, c.link, v)
		if after := s.everything(t); after != before {
			t.Errorf("--shared-config %s refused, but the tree changed:\n%s", c.shared, after)
		}
	}
}

// The one writer never writes through a link: not at the name (without
// replace the name is kept; with replace the link itself is replaced), not
// at its temporary name.
func TestWriteAtomicFollowsNoLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	write(t, victim, "root only\n", 0o600)
	d, err := OpenTrusted(dir)
	must(t, err)
	defer d.Close()
	must(t, os.Symlink(victim, filepath.Join(dir, "name")))
	if err := d.Create("name", []byte("planted"), 0o644, -1, -1); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create over a link: %v, want fs.ErrExist", err)
	}
	// The temporary name planted as a link.
	must(t, os.Symlink(victim, filepath.Join(dir, ".other.new-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(tmpSeq.Load()+1, 10))))
	must(t, d.Create("other", []byte("mine"), 0o644, -1, -1))
	must(t, d.WriteAtomic("name", strings.NewReader("replaced"), 0o644, -1, -1, true))
	if fi, err := os.Lstat(filepath.Join(dir, "name")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("replace: the link is not replaced by a file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root only\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "other")); string(b) != "mine" {
		t.Errorf("other: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("left behind: %v", ents)
	}
}

// WriteFile, the path form of the one writer (promote's too): it
// replaces a file with the mode given, replaces a link at the name
// without writing its target, and a failed write keeps the old file and
// leaves no temporary one.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	must(t, WriteFile(path, strings.NewReader("one"), 0o640))
	must(t, WriteFile(path, strings.NewReader("two"), 0o755))
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("replaced file: %v %v, want mode 0755", fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("replaced file holds %q", b)
	}
	failing := io.MultiReader(strings.NewReader("half"), iotest.ErrReader(errors.New("broken source")))
	if err := WriteFile(path, failing, 0o644); err == nil || !strings.Contains(err.Error(), "broken source") {
		t.Errorf("a failing source: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("a failed write changed the file: %q", b)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	write(t, victim, "root only\n", 0o600)
	link := filepath.Join(dir, "link")
	must(t, os.Symlink(victim, link))
	must(t, WriteFile(link, strings.NewReader("mine"), 0o644))
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the link is not replaced by a file: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root only\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("left behind: %v", ents)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), strings.NewReader("x"), 0o644); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing directory: %v, want fs.ErrNotExist", err)
	}
}

// Writers of one name in one process do not share a temporary file: each
// write lands whole, and none is left behind.
func TestWriteFileConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- WriteFile(path, strings.NewReader(strings.Repeat(strconv.Itoa(i%10), 4096)), 0o644)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile(path)
	must(t, err)
	if len(b) != 4096 || strings.Count(string(b), string(b[:1])) != 4096 {
		t.Errorf("the file is not one writer's whole content (%d bytes)", len(b))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

// The real binary's old place is in the user's tree: install does not
// rename through a linked ~/.local/bin, and uninstall does not put the
// binary back through one (it refuses, changing nothing, and names the
// fix), so a link there never points a root write elsewhere.
func TestRealBinaryPlaceLinked(t *testing.T) {
	// install: ~/.local/bin a link to a directory holding a "claude".
	s := newScratch(t)
	v := t.TempDir()
	write(t, filepath.Join(v, "claude"), "not claude code, root's\n", 0o755)
	bin := filepath.Dir(s.l.DefaultReal())
	must(t, os.RemoveAll(bin))
	must(t, os.Symlink(v, bin))
	before := s.everything(t) + tree(t, v)
	_, err := Install(s.l, s.opts())
	if err == nil || !errors.Is(err, ErrSymlinkRefused) || !strings.Contains(err.Error(), "--real") {
		t.Errorf("install with ~/.local/bin a link: %v; want a refusal naming --real", err)
	}
	if after := s.everything(t) + tree(t, v); after != before {
		t.Errorf("the refused install changed something:\n%s", after)
	}

	// uninstall: ~/.local/bin replaced by a link after install.
	for _, linked := range []bool{true, false} {
		s = newScratch(t)
		if !linked {
			// A plain binary, not the installer's link: put back as a copy.
			must(t, os.Remove(s.l.DefaultReal()))
			write(t, s.l.DefaultReal(), "claude 2.1.0", 0o755)
		}
		_, err = Install(s.l, s.opts())
		must(t, err)
		v = t.TempDir()
		bin = filepath.Dir(s.l.DefaultReal())
		must(t, os.RemoveAll(bin))
		must(t, os.Symlink(v, bin))
		before = s.everything(t) + tree(t, v)
		_, err = Uninstall(s.l, s.opts())
		if err == nil || !errors.Is(err, ErrSymlinkRefused) || !strings.Contains(err.Error(), "yourself") {
			t.Errorf("uninstall with ~/.local/bin a link (the installer's link %v): %v; want a refusal naming the fix", linked, err)
		}
		if after := s.everything(t) + tree(t, v); after != before {
			t.Errorf("the refused uninstall changed something:\n%s", after)
		}
	}
}
