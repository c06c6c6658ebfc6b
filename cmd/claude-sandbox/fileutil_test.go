package main

import (
	"os"
	"path/filepath"
	"testing"
)

// promote's writers: missing directories are made, a file already
// holding the data is not rewritten, an existing file keeps its mode,
// and the copy gets the mode asked for.
func TestPromoteWriters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "f")
	if wrote, err := writeIfDifferent(path, []byte("one"), 0o640); err != nil || !wrote {
		t.Fatalf("first write: %v %v", wrote, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("new file: %v %v, want mode 0640", fi, err)
	}
	if wrote, err := writeIfDifferent(path, []byte("one"), 0o600); err != nil || wrote {
		t.Errorf("same data: wrote %v, %v; want no write", wrote, err)
	}
	if err := os.Chmod(path, 0o604); err != nil {
		t.Fatal(err)
	}
	if wrote, err := writeIfDifferent(path, []byte("two"), 0o600); err != nil || !wrote {
		t.Fatalf("new data: %v %v", wrote, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o604 {
		t.Errorf("rewritten file: %v %v, want its mode 0604 kept", fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("rewritten file holds %q", b)
	}

	dst := filepath.Join(dir, "c", "copy")
	if err := copyFile(path, dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("copy: %v %v, want mode 0755", fi, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "two" {
		t.Errorf("copy holds %q", b)
	}
	if err := copyFile(filepath.Join(dir, "none"), dst, 0o755); err == nil {
		t.Error("copying a missing file succeeded")
	}
	for _, d := range []string{filepath.Join(dir, "a", "b"), filepath.Join(dir, "c")} {
		if ents, _ := os.ReadDir(d); len(ents) != 1 {
			t.Errorf("%s: left behind: %v", d, ents)
		}
	}
}
