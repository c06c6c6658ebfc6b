package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/internal/install"
)

// createBindTargets makes the bind-back targets the launch needs on the
// host (shadow.Launch.CreateDirs and CreateFiles: ~/.config/gh,
// ~/.config/glab-cli, an empty gh hosts.yml, a workspace's hooks
// directory). Those in the home are made with the installer's safe steps
// (internal/install): from a descriptor of the home, one component at a
// time, never through a symlink, owned uid:gid, never replacing anything;
// ~/.config and below are the user's to change, and the sandbox's too.
//
// A symlink on the way is refused when the shadow runs as root (a root
// devcontainer), where it would redirect a root mkdir or create; for any
// other user it is followed as before (a dotfiles manager's linked
// ~/.config), since the user can only reach what the user may write.
// Paths outside the home (a workspace's) are made as the user's own.
func createBindTargets(home string, uid, gid int, dirs, files []string, root bool) []error {
	var errs []error
	inHome := func(p string) (string, bool) {
		rel, ok := strings.CutPrefix(filepath.Clean(p), filepath.Clean(home)+"/")
		return rel, ok && home != "" && home != "/"
	}
	refused := func(p string, err error) bool {
		if !errors.Is(err, install.ErrSymlinkRefused) {
			return false
		}
		if root {
			errs = append(errs, fmt.Errorf("%s not created: a symlink on its way, which the shadow, running as root, does not follow: %w", p, err))
		}
		return root
	}
	for _, d := range dirs {
		if rel, ok := inHome(d); ok {
			h, err := install.OpenTrusted(home)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sub, _, err := h.Walk(rel, 0o700, uid, gid, true)
			h.Close()
			if err == nil {
				sub.Close()
				continue
			}
			if refused(d, err) {
				continue
			}
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range files {
		if rel, ok := inHome(f); ok {
			h, err := install.OpenTrusted(home)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sub, _, err := h.Walk(filepath.Dir(rel), 0o700, uid, gid, true)
			h.Close()
			if err == nil {
				err = sub.Create(filepath.Base(rel), nil, 0o600, uid, gid)
				sub.Close()
				if err == nil || errors.Is(err, fs.ErrExist) {
					continue
				}
			}
			if refused(f, err) {
				continue
			}
		}
		if fh, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			fh.Close()
		} else {
			errs = append(errs, err)
		}
	}
	return errs
}
