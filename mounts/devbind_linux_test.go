package mounts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckDevDir (plan's look, over devDirNoSymlink, the mount's): a directory
// reached by its real path passes; one reached through a symlink, as the
// last component or a parent, is refused saying so.
func TestCheckDevDir(t *testing.T) {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(d, "real", "sub")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d, "real"), filepath.Join(d, "link")); err != nil {
		t.Fatal(err)
	}
	if err := CheckDevDir(real); err != nil {
		t.Errorf("%s, reached by its real path: %v", real, err)
	}
	for _, p := range []string{filepath.Join(d, "link"), filepath.Join(d, "link", "sub")} {
		if err := CheckDevDir(p); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("%s, through a symlink: %v, want a refusal naming the symlink", p, err)
		}
	}
}
