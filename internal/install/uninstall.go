package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/guard"
)

// ErrNotInstalled is returned by Uninstall where nothing is installed.
var ErrNotInstalled = errors.New("claude-sandbox is not installed")

// Uninstall undoes Install as one transaction: the real binary back in
// its old place, settings and configuration as they were; the installed
// tree goes last. Only the home's command file and the emptied
// directories are removed after the point of no return. Of o it reads
// VerifyCommand, DryRun, Stdout and Stderr.
func Uninstall(l Layout, o Options) (j *Journal, err error) {
	r := &run{l: l, o: o, j: &Journal{Dry: o.DryRun}, verb: "uninstall"}
	j = r.j
	_, e1 := os.Lstat(l.State())
	_, e2 := os.Lstat(l.Program())
	_, e3 := os.Lstat(l.Shadow())
	if e1 != nil && e2 != nil && e3 != nil {
		return j, fmt.Errorf("nothing to uninstall: %w under %s (no %s)", ErrNotInstalled, l.Root, l.Program())
	}
	if r.st, err = loadState(l); err != nil {
		return j, err
	}
	defer func() {
		if err != nil {
			if rerr := j.Rollback(); rerr != nil {
				err = fmt.Errorf("%w; and undoing what uninstall had done failed: %v", err, rerr)
			} else if !j.Dry {
				err = fmt.Errorf("%w (nothing was changed)", err)
			}
		}
	}()
	for _, s := range []struct {
		name string
		fn   func() error
	}{
		{"real", r.restoreReal},
		{"settings", r.restoreSettings},
		{"apparmor", r.removeAppArmor},
		{"docs", r.removeDocs},
		{"hatch", r.removeHatch},
		{"config", r.restoreConfig},
		{"binaries", r.removeTree},
	} {
		if err := r.do(s.name, s.fn); err != nil {
			return j, err
		}
	}
	j.Commit()
	r.say("removed %s and %s", l.Shadow(), l.Libexec())
	_ = r.do("leftovers", r.removeHomeLeftovers)
	return j, nil
}

func (r *run) restoreReal() error {
	st, l, j := r.st, r.l, r.j
	if st.RealOrigin == "" {
		return nil
	}
	linkTarget := st.RealLink
	if linkTarget != "" && !filepath.IsAbs(linkTarget) {
		linkTarget = filepath.Join(filepath.Dir(st.RealOrigin), linkTarget)
	}
	_, linkErr := os.Stat(linkTarget)
	madeWay := false // the shadow was removed (a dry run only records that)
	if st.RealOrigin == l.Shadow() {
		// The real one was at the shadow's place (npm's link, or a plain
		// binary): the shadow makes way for it, when it is still ours.
		if !r.ownShadow() {
			r.warn("%s is no longer the shadow (npm update -g, or a new Claude Code?): left as it is", l.Shadow())
			return nil
		}
		if _, err := j.remove(l.Shadow(), "the shadow, making way for the real Claude Code"); err != nil {
			return err
		}
		madeWay = true
	}
	switch {
	case !madeWay && func() bool { _, err := os.Lstat(st.RealOrigin); return err == nil }():
		r.warn("%s exists (a newer Claude Code?): left as it is", st.RealOrigin)
	case st.RealLink != "" && linkErr == nil:
		// It was the installer's symlink into its versions directory,
		// which is still there.
		var err error
		if r.inHome(st.RealOrigin) {
			err = j.symlinkBeneath(st.Home, st.RealLink, st.RealOrigin, "the real Claude Code's link, back")
		} else {
			err = j.symlink(st.RealLink, st.RealOrigin, "the real Claude Code's link, back")
		}
		if err != nil {
			return r.cannotRestore(err)
		}
		r.say("put the real Claude Code back at %s -> %s", st.RealOrigin, st.RealLink)
	default:
		if _, err := os.Stat(l.Real()); err != nil {
			r.warn("no real Claude Code at %s to put back at %s", l.Real(), st.RealOrigin)
			return nil
		}
		var err error
		if r.inHome(st.RealOrigin) {
			// Into the user's tree: as a new file of the user's, never
			// through a link.
			err = j.putBeneath(st.Home, st.RealOrigin, l.Real(), 0o755, "the real Claude Code, back")
		} else {
			_, err = j.put(st.RealOrigin, nil, l.Real(), 0o755, "the real Claude Code, back")
		}
		if err != nil {
			return r.cannotRestore(err)
		}
		r.say("put the real Claude Code back at %s", st.RealOrigin)
	}
	return nil
}

// ownShadow reports whether the shadow's place holds the shadow: a
// regular file (never a link: npm's link there is Claude Code's), the
// same bytes as the installed program when that is there.
func (r *run) ownShadow() bool {
	fi, err := os.Lstat(r.l.Shadow())
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if _, err := os.Stat(r.l.Program()); err != nil {
		return true
	}
	same, _ := SameFile(r.l.Shadow(), r.l.Program())
	return same
}

// inHome reports whether path lies in the home install recorded.
func (r *run) inHome(path string) bool {
	return r.st.Home != "" && r.st.Home != "/" && within(r.st.Home, path) && path != r.st.Home
}

func (r *run) cannotRestore(err error) error {
	return fmt.Errorf("put the real Claude Code back at %s: %w; copy %s there yourself, then run uninstall again", r.st.RealOrigin, err, r.l.Real())
}

// restoreSettings puts the managed settings back exactly as before when
// nobody edited them since; otherwise only the guard's own entries go.
func (r *run) restoreSettings() error {
	st, l, j := r.st, r.l, r.j
	cur, err := os.ReadFile(l.Settings())
	if err != nil {
		return nil
	}
	switch {
	case string(cur) == st.SettingsWrote && st.SettingsNone:
		if _, err := j.remove(l.Settings(), "the managed settings install created"); err != nil {
			return err
		}
	case string(cur) == st.SettingsWrote && st.SettingsBefore != nil:
		if _, err := j.put(l.Settings(), []byte(*st.SettingsBefore), "", 0o644, "the managed settings as before install"); err != nil {
			return err
		}
	default:
		out, gerr := guard.Remove(cur)
		if gerr != nil {
			r.warn("%s is %v; left untouched", l.Settings(), gerr)
			return nil
		}
		if _, err := j.put(l.Settings(), out, "", 0o644, "the guard's entries taken out"); err != nil {
			return err
		}
	}
	r.say("removed the integrity guard from %s", l.Settings())
	return nil
}

func (r *run) removeAppArmor() error {
	path := r.st.AppArmor
	if path == "" {
		return nil
	}
	if cur, err := os.ReadFile(path); err != nil || string(cur) != apparmorProfile {
		return nil
	}
	if r.l.Root == "/" && !r.j.Dry {
		// Unload it (best effort: it confines nothing anyway).
		if parser, err := exec.LookPath("apparmor_parser"); err == nil {
			_ = exec.Command(parser, "-R", path).Run()
		}
	}
	if _, err := r.j.remove(path, "the AppArmor profile"); err != nil {
		return err
	}
	r.say("removed the AppArmor profile %s", path)
	return nil
}

func (r *run) removeDocs() error {
	for _, path := range r.st.Docs {
		if removed, err := r.j.remove(path, "generated"); err != nil {
			return err
		} else if removed {
			r.say("removed %s", path)
		}
	}
	return nil
}

func (r *run) removeHatch() error {
	if r.st.Hatch == "" {
		return nil
	}
	if _, err := r.j.remove(r.st.Hatch, "the escape hatch"); err != nil {
		return err
	}
	r.say("removed the escape hatch %s", r.st.Hatch)
	return nil
}

func (r *run) restoreConfig() error {
	switch {
	case r.st.ConfigNone:
		_, err := r.j.remove(r.l.Config(), "the configuration install wrote")
		return err
	case r.st.ConfigBefore != nil:
		_, err := r.j.put(r.l.Config(), []byte(*r.st.ConfigBefore), "", 0o644, "the configuration as before install")
		return err
	}
	return nil
}

func (r *run) removeTree() error {
	paths := []string{r.l.Libexec()}
	switch {
	case r.st.RealOrigin == r.l.Shadow():
		// restoreReal put the real Claude Code back there, or left what
		// is there alone: not the shadow.
	case r.ownShadow():
		paths = append(paths, r.l.Shadow())
	default:
		if _, err := os.Lstat(r.l.Shadow()); err == nil {
			r.warn("%s is not the shadow (a package manager's link, or a new Claude Code?): left as it is", r.l.Shadow())
		}
	}
	for _, p := range paths {
		if _, err := r.j.remove(p, ""); err != nil {
			return err
		}
	}
	if link := r.st.ShadowLink; link != "" && slices.Contains(paths, r.l.Shadow()) {
		if err := r.j.symlink(link, r.l.Shadow(), "npm's link, back"); err != nil {
			return err
		}
		r.say("put back %s -> %s", r.l.Shadow(), link)
	}
	return nil
}

// removeHomeLeftovers removes, after the point of no return, the command
// file install wrote in the home (only when it holds exactly what install
// wrote) and the directories install made, deepest first, when nothing
// else moved in meanwhile. Nothing in the home is followed.
func (r *run) removeHomeLeftovers() error {
	st := r.st
	home := st.Home
	if home == "" && st.Command != "" {
		home = strings.TrimSuffix(st.Command, "/"+CommandRel)
	}
	inHome := func(p string) (string, bool) {
		rel, ok := strings.CutPrefix(p, home+"/")
		return rel, ok && home != ""
	}
	if rel, ok := inHome(st.Command); ok {
		if r.removeInHome(home, rel, false, r.o.VerifyCommand) {
			r.j.add(Change{Kind: Deleted, Path: st.Command, Base: home, Note: "the /verify-sandbox command"})
		}
	}
	dirs := slices.Clone(st.CreatedDirs)
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		c := Change{Kind: RemovedDir, Path: d, Note: "made by install, when empty"}
		if rel, ok := inHome(d); ok {
			c.Base = home
			if r.removeInHome(home, rel, true, nil) {
				r.j.add(c)
			}
			continue
		}
		if r.j.Dry {
			gone := slices.ContainsFunc(r.j.Changes, func(c Change) bool { return c.Kind == Removed && within(c.Path, d) })
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() && !gone {
				r.j.add(c)
			}
		} else if os.Remove(d) == nil { // fails, harmlessly, when not empty
			r.j.add(c)
		}
	}
	return nil
}

// removeInHome removes rel from home (a file only when it holds exactly
// want; a directory only when empty) without following a symlink, and
// reports whether it did (in a dry run: whether it is there to remove).
func (r *run) removeInHome(home, rel string, dir bool, want []byte) bool {
	h, err := OpenTrusted(home)
	if err != nil {
		return false
	}
	defer h.Close()
	parent, _, err := h.Walk(filepath.Dir(rel), 0, -1, -1, false)
	if err != nil {
		return false
	}
	defer parent.Close()
	name := filepath.Base(rel)
	if dir {
		if r.j.Dry {
			st, err := parent.Lstat(name)
			return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
		}
		return unix.Unlinkat(parent.fd, name, unix.AT_REMOVEDIR) == nil
	}
	if b, err := parent.ReadFile(name); err == nil && bytes.Equal(b, want) {
		return r.j.Dry || unix.Unlinkat(parent.fd, name, 0) == nil
	}
	return false
}
