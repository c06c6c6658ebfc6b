package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// installedHere lists, per host directory, what `claude-sandbox install`
// puts there. A fixture made from a copy of the host's /etc, /usr/libexec
// or /usr/local/bin leaves these out: the tests must give the same result
// on a machine where the product is installed (the relocated real binary,
// the shadow first in PATH, the guard in the managed settings, the admin's
// configuration) as on a fresh one (scripts/test-installed.sh checks it).
var installedHere = map[string][]string{
	"/etc":           {"claude-sandbox.conf", "claude-code/managed-settings.json"},
	"/usr/libexec":   {"claude-sandbox"},
	"/usr/local/bin": {"claude", "claude-sandbox"},
}

// copyHostDir copies the host directory src (when it exists) into dst,
// without what claude-sandbox install put there (installedHere).
func copyHostDir(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{}
	for _, p := range installedHere[src] {
		skip[p] = true
	}
	for _, e := range entries {
		if skip[e.Name()] {
			continue
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(src, e.Name()), dst).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v\n%s", filepath.Join(src, e.Name()), err, out)
		}
	}
	// Files below a kept directory (claude-code/managed-settings.json).
	for p := range skip {
		if filepath.Dir(p) != "." {
			if err := os.Remove(filepath.Join(dst, p)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
}
