package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shadow's bind-back targets in the home (gh's and glab's directories,
// gh's empty hosts.yml) are made with the installer's safe steps: a
// planted ~/.config link is not followed when the shadow runs as root,
// and a planted hosts.yml link is never opened.
func TestCreateBindTargets(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	targets := func(home string) ([]string, []string) {
		return []string{filepath.Join(home, ".config/gh"), filepath.Join(home, ".config/glab-cli")},
			[]string{filepath.Join(home, ".config/gh/hosts.yml")}
	}
	// Fresh: made, 0700, hosts.yml empty.
	home := t.TempDir()
	dirs, files := targets(home)
	if errs := createBindTargets(home, uid, gid, dirs, files, true); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, d := range dirs {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", d, fi, err)
		}
	}
	if fi, err := os.Lstat(files[0]); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Errorf("hosts.yml: %v %v", fi, err)
	}
	if errs := createBindTargets(home, uid, gid, dirs, files, true); len(errs) > 0 {
		t.Errorf("a second time: %v", errs)
	}

	// ~/.config a link: refused as root, followed otherwise.
	for _, root := range []bool{true, false} {
		home := t.TempDir()
		victim := t.TempDir()
		if err := os.Symlink(victim, filepath.Join(home, ".config")); err != nil {
			t.Fatal(err)
		}
		dirs, files := targets(home)
		errs := createBindTargets(home, uid, gid, dirs, files, root)
		ents, _ := os.ReadDir(victim)
		if root && (len(ents) != 0 || len(errs) == 0 || !strings.Contains(errs[0].Error(), "symlink")) {
			t.Errorf("as root, ~/.config a link: made %v in its target, warnings %v", ents, errs)
		}
		if !root && (len(ents) != 2 || len(errs) != 0) {
			t.Errorf("as a user, ~/.config a link to the user's own directory: %v %v", ents, errs)
		}
	}

	// hosts.yml a link to a file: never opened, so never truncated or
	// created through.
	home = t.TempDir()
	victim := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(victim, []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".config/gh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(home, ".config/gh/hosts.yml")); err != nil {
		t.Fatal(err)
	}
	dirs, files = targets(home)
	_ = createBindTargets(home, uid, gid, dirs, files, true)
	if b, _ := os.ReadFile(victim); string(b) != "root only\n" {
		t.Errorf("the planted hosts.yml's target changed: %q", b)
	}
}
