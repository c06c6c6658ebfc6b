// Package install puts claude-sandbox on a machine and takes it off again:
// the binary, the shadow `claude`, the relocated real Claude Code, the
// configuration, the integrity guard merged into Claude Code's managed
// settings, the completions and man page, the /verify-sandbox command in
// the user's home and, on request, the shared-config links.
//
// Every path it touches comes from a Layout, which puts all of them, the
// user's home included, under one root ("/", or --prefix DIR). Each step
// records what it changes in a Journal of typed changes; a failure part
// way replays the journal in reverse, which leaves the tree as it was, and
// a dry run records the changes without making them. Files are written by
// one atomic writer (Dir.WriteAtomic: a fresh temporary name, fsync,
// rename); in the trees someone other than root can change (the home, the
// shared directory) every step goes from a directory descriptor with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), so a planted symlink is
// refused, never followed.
//
// The package needs no root of its own: run by an ordinary user over a
// scratch root it installs as that user (the tests do so); the command
// line (claude-sandbox install) insists on root for the real thing.
package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// Layout is where install puts things. Every path install and uninstall
// write is a Layout path, and lies under Root: the invoking user's home
// is Root + Home, a shared-config directory Root + its path.
type Layout struct {
	// Root is "/" or the --prefix directory (absolute).
	Root string
	// Home is the invoking user's home as the system names it ("/home/u",
	// from the password database); "" when there is none.
	Home string
}

// P is path (as the installed system names it) under the root.
func (l Layout) P(path string) string { return filepath.Join(l.Root, path) }

// BinDir is where the shadow goes, in front of ~/.local/bin on PATH.
func (l Layout) BinDir() string { return l.P("/usr/local/bin") }

// Libexec holds the binary, the relocated real Claude Code and the state.
func (l Layout) Libexec() string { return l.P(filepath.Dir(guard.Program)) }

// Program is the binary the guard's hooks run.
func (l Layout) Program() string { return l.P(guard.Program) }

// Real is where the real Claude Code binary is relocated.
func (l Layout) Real() string { return l.P(shadow.RealBinary) }

// Shadow is the `claude` users run.
func (l Layout) Shadow() string { return filepath.Join(l.BinDir(), "claude") }

// Config is the shadow's configuration file.
func (l Layout) Config() string { return l.P(shadow.ConfigPath) }

// SettingsDir is Claude Code's managed-settings directory.
func (l Layout) SettingsDir() string { return filepath.Dir(l.Settings()) }

// Settings is Claude Code's managed settings, where the guard is merged.
func (l Layout) Settings() string { return l.P(guard.ManagedSettings) }

// Hatch is the root-owned escape hatch the gate accepts.
func (l Layout) Hatch() string { return l.P(guard.AllowUnwrapped) }

// State records what install changed, for uninstall.
func (l Layout) State() string { return filepath.Join(l.Libexec(), "install-state.json") }

// AppArmor is the profile --apparmor writes.
func (l Layout) AppArmor() string { return l.P("/etc/apparmor.d/claude-sandbox") }

// Doc names one generated document: the man page or a shell's completion.
type Doc string

// The generated documents install puts where man and the shells look by
// default (beside the shadow, in /usr/local).
const (
	DocMan  Doc = "man"
	DocBash Doc = "bash"
	DocZsh  Doc = "zsh"
	DocFish Doc = "fish"
)

// Docs are the documents, in the order install writes them.
var Docs = []Doc{DocBash, DocFish, DocMan, DocZsh}

// DocPath is where install puts doc.
func (l Layout) DocPath(doc Doc) string {
	return l.P(map[Doc]string{
		DocMan:  "/usr/local/share/man/man1/claude-sandbox.1",
		DocBash: "/usr/local/share/bash-completion/completions/claude-sandbox",
		DocZsh:  "/usr/local/share/zsh/site-functions/_claude-sandbox",
		DocFish: "/usr/local/share/fish/vendor_completions.d/claude-sandbox.fish",
	}[doc])
}

// UserHome is the invoking user's home under the root ("" with no Home).
func (l Layout) UserHome() string {
	if l.Home == "" {
		return ""
	}
	return l.P(l.Home)
}

// CommandRel is where the /verify-sandbox command goes in the home.
const CommandRel = ".claude/commands/verify-sandbox.md"

// Command is the /verify-sandbox command file.
func (l Layout) Command() string { return filepath.Join(l.UserHome(), CommandRel) }

// DefaultReal is where Claude Code's own installer leaves its binary.
func (l Layout) DefaultReal() string { return filepath.Join(l.UserHome(), ".local/bin/claude") }

// Shared is the --shared-config directory dir (as the system names it)
// under the root.
func (l Layout) Shared(dir string) string { return l.P(filepath.Clean(dir)) }

// Paths are the fixed paths install may write (the home's only when Home
// is set; a shared directory's are Shared's).
func (l Layout) Paths() []string {
	p := []string{l.BinDir(), l.Libexec(), l.Program(), l.Real(), l.Shadow(), l.Config(), l.SettingsDir(), l.Settings(), l.Hatch(), l.State(), l.AppArmor()}
	for _, d := range Docs {
		p = append(p, l.DocPath(d))
	}
	if l.Home != "" {
		p = append(p, l.UserHome(), l.Command(), l.DefaultReal())
	}
	return p
}

// Options are install's arguments.
type Options struct {
	// Self is the claude-sandbox binary to install (the running one).
	Self string
	// Real is --real: the real Claude Code binary ("" for DefaultReal
	// when there is one).
	Real string
	// Config is --config: a file to install as the configuration.
	Config string
	// Shared is --shared-config: the directory (as the system names it)
	// ~/.claude and ~/.claude.json are linked to.
	Shared string
	// AppArmor is --apparmor; Hatch writes the escape hatch.
	AppArmor, Hatch bool
	// Check refuses an install that could not work (nil: no checks).
	Check func(config string) error
	// UID and GID own what install makes in the home and the shared
	// directory (the invoking user).
	UID, GID int
	// DocFiles are the generated documents' bytes.
	DocFiles map[Doc][]byte
	// VerifyCommand is the /verify-sandbox command file's content.
	VerifyCommand []byte
	// DryRun records the changes without making them.
	DryRun bool
	// Stdout gets what was done, Stderr the warnings (nil: discarded).
	Stdout, Stderr io.Writer
}

// installState records what install changed, so uninstall can put back
// exactly what was there before (install-state.json; the field names are
// kept from the first versions, whose state files must still read).
type installState struct {
	RealOrigin string `json:"realOrigin,omitempty"` // where the real binary came from
	RealLink   string `json:"realLink,omitempty"`   // the symlink target it was, if it was one
	// Settings and Config hold the files' content before the first
	// install (nil: the file did not exist); Wrote* what install wrote.
	SettingsBefore *string `json:"settingsBefore,omitempty"`
	SettingsNone   bool    `json:"settingsNone,omitempty"`
	SettingsWrote  string  `json:"settingsWrote,omitempty"`
	ConfigBefore   *string `json:"configBefore,omitempty"`
	ConfigNone     bool    `json:"configNone,omitempty"`
	// CreatedDirs are the directories install made, removed again by
	// uninstall when empty.
	CreatedDirs []string `json:"createdDirs,omitempty"`
	// Command is the /verify-sandbox command file install wrote, in Home.
	Command string `json:"command,omitempty"`
	Home    string `json:"home,omitempty"`
	// Hatch is the escape hatch install wrote, removed again by uninstall.
	Hatch string `json:"hatch,omitempty"`
	// AppArmor is the profile install --apparmor wrote.
	AppArmor string `json:"apparmor,omitempty"`
	// Docs are the completions and the man page install wrote.
	Docs []string `json:"docs,omitempty"`
	// ShadowLink is the symlink the shadow replaced at its place (npm's
	// link into node_modules), put back by uninstall.
	ShadowLink string `json:"shadowLink,omitempty"`
}

// addDirs records directories install made (once each).
func (st *installState) addDirs(changes []Change) {
	for _, c := range changes {
		if c.Kind == CreatedDir && !slices.Contains(st.CreatedDirs, c.Path) {
			st.CreatedDirs = append(st.CreatedDirs, c.Path)
		}
	}
}

// run is one install or uninstall in progress.
type run struct {
	l    Layout
	o    Options
	j    *Journal
	st   installState
	verb string
}

func (r *run) say(format string, a ...any) {
	if !r.j.Dry && r.o.Stdout != nil {
		fmt.Fprintf(r.o.Stdout, format+"\n", a...)
	}
}

func (r *run) warn(format string, a ...any) {
	if r.o.Stderr != nil {
		fmt.Fprintf(r.o.Stderr, "claude-sandbox "+r.verb+": warning: "+format+"\n", a...)
	}
}

// failAfter makes the step of that name fail once it is done (tests:
// every step's rollback).
var failAfter string

// do runs one step and labels the changes it recorded with its name.
func (r *run) do(name string, step func() error) error {
	n := len(r.j.Changes)
	err := step()
	if err == nil && name == failAfter {
		err = fmt.Errorf("failing after the step %q, as the test asked", name)
	}
	for i := n; i < len(r.j.Changes); i++ {
		r.j.Changes[i].Step = name
	}
	return err
}

// Install installs claude-sandbox into l. It checks everything it can
// first, writing nothing, then applies the steps, each recording its
// changes in the journal it returns; on any failure what it did is undone
// and the error says so. The real binary's old place is emptied last of
// all. With o.DryRun it changes nothing and the journal lists what it
// would do.
func Install(l Layout, o Options) (j *Journal, err error) {
	r := &run{l: l, o: o, j: &Journal{Dry: o.DryRun}, verb: "install"}
	j = r.j

	// Check: nothing is written before all of this passed.
	if _, err := os.Stat(o.Self); err != nil {
		return j, fmt.Errorf("the binary to install: %w", err)
	}
	var conf []byte
	if o.Config != "" {
		if conf, err = os.ReadFile(o.Config); err != nil {
			return j, fmt.Errorf("--config: %w", err)
		}
		if _, err := shadow.ParseConfig(o.Config, bytes.NewReader(conf)); err != nil {
			return j, fmt.Errorf("refusing the configuration: %w", err)
		}
	}
	home := l.UserHome()
	if home != "" {
		if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
			home = "" // no such home (under --prefix, typically): no command
		}
	}
	if r.st, err = loadState(l); err != nil {
		return j, err
	}
	if home != "" {
		r.st.Home = home
	}
	rp, err := r.planReal(home)
	if err != nil {
		return j, err
	}
	if fi, err := os.Lstat(l.Shadow()); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// The shadow is never a link: this one is the package manager's
		// (npm's), which uninstall puts back.
		if link, err := os.Readlink(l.Shadow()); err == nil {
			r.st.ShadowLink = link
		}
	}
	if o.Shared != "" {
		if home == "" {
			return j, fmt.Errorf("--shared-config: the invoking user's home does not exist under %s", l.Root)
		}
		if err := checkShared(l.Root, o.Shared); err != nil {
			return j, err
		}
	}
	if fi, err := os.Lstat(l.Hatch()); o.Hatch && err == nil && !fi.Mode().IsRegular() {
		return j, fmt.Errorf("%s exists and is not a regular file: remove it, then run install again", l.Hatch())
	}
	oldSettings, err := os.ReadFile(l.Settings())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return j, err
	}
	merged, merr := guard.Merge(oldSettings)

	// Apply.
	defer func() {
		if err != nil {
			if rerr := j.Rollback(); rerr != nil {
				err = fmt.Errorf("%w; and undoing what install had done failed: %v", err, rerr)
			} else if !j.Dry {
				err = fmt.Errorf("%w (nothing was changed: what install had done is undone)", err)
			}
		}
	}()
	if o.AppArmor {
		// Before the checks' verdict matters: the profile is what makes
		// user namespaces work on hosts that restrict them.
		if err := r.do("apparmor", r.installAppArmor); err != nil {
			return j, err
		}
	}
	if o.Check != nil && !(j.Dry && o.AppArmor) {
		if err := o.Check(o.Config); err != nil {
			return j, fmt.Errorf("refusing: %w (--skip-checks installs anyway, as in an image build where the checks cannot pass yet; claude-sandbox doctor checks later)", err)
		}
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		// The real binary first: a plain one at the shadow's place is
		// copied off before the shadow replaces it.
		{"real", func() error { return r.putReal(rp) }},
		{"binaries", r.putBinaries},
		{"config", func() error { return r.putConfig(conf) }},
		{"settings", func() error { return r.putSettings(oldSettings, merged, merr) }},
		{"hatch", r.writeHatch},
		{"docs", r.putDocs},
		{"command", func() error { return r.installCommand(home) }},
		{"shared", r.linkSharedStep},
		{"state", func() error { return r.saveState(rp) }},
		// Last, the real binary's old place: everything else is in place.
		{"real-source", func() error { return r.removeRealSource(rp) }},
	}
	for _, s := range steps {
		if err := r.do(s.name, s.fn); err != nil {
			return j, err
		}
	}
	j.Commit()
	return j, nil
}

func (r *run) putBinaries() error {
	for _, target := range []string{r.l.Program(), r.l.Shadow()} {
		note := "the program"
		if target == r.l.Shadow() {
			note = "the shadow"
		}
		changed, err := r.j.put(target, nil, r.o.Self, 0o755, note)
		if err != nil {
			return err
		}
		if changed {
			r.say("installed %s", target)
		}
	}
	return nil
}

// putReal relocates the real binary off PATH (I3), so the Claude Code
// installer's own PATH edit for ~/.local/bin finds nothing there.
func (r *run) putReal(rp realPlan) error {
	if rp.linkTo != "" {
		return r.linkReal(rp)
	}
	if rp.copy {
		changed, err := r.j.put(r.l.Real(), nil, rp.target, 0o755, "the real Claude Code, from "+rp.src)
		if err != nil {
			return err
		}
		if changed && !rp.removeSrc {
			r.say("copied the real Claude Code from %s to %s (left in place: it is outside %s)", rp.src, r.l.Real(), r.l.Root)
		}
		return nil
	}
	if _, err := os.Stat(r.l.Real()); err != nil {
		r.warn("no real Claude Code binary at %s yet; install Claude Code, then run install again (or pass --real PATH)", r.l.Real())
	}
	return nil
}

func (r *run) putConfig(conf []byte) error {
	if conf == nil {
		return nil
	}
	st := &r.st
	if st.ConfigBefore == nil && !st.ConfigNone {
		if old, err := os.ReadFile(r.l.Config()); err == nil {
			s := string(old)
			st.ConfigBefore = &s
		} else {
			st.ConfigNone = true
		}
	}
	if changed, err := r.j.put(r.l.Config(), conf, "", 0o644, "the configuration"); err != nil {
		return err
	} else if changed {
		r.say("installed %s", r.l.Config())
	}
	return nil
}

// putSettings merges the guard (I5, G1, G2).
func (r *run) putSettings(old, merged []byte, merr error) error {
	if merr != nil {
		r.warn("%s is %v; left untouched, so the integrity guard is NOT installed: fix the file and run install again", r.l.Settings(), merr)
		return nil
	}
	st := &r.st
	if st.SettingsBefore == nil && !st.SettingsNone {
		if old != nil {
			s := string(old)
			st.SettingsBefore = &s
		} else {
			st.SettingsNone = true
		}
	}
	if changed, err := r.j.put(r.l.Settings(), merged, "", 0o644, "the integrity guard merged in"); err != nil {
		return err
	} else if changed {
		r.say("merged the integrity guard into %s", r.l.Settings())
	}
	st.SettingsWrote = string(merged)
	return nil
}

// writeHatch creates the escape hatch: a root-owned regular file, not
// group- or world-writable, the only form the gate accepts.
func (r *run) writeHatch() error {
	if !r.o.Hatch {
		return nil
	}
	path := r.l.Hatch()
	if _, err := os.Lstat(path); err != nil {
		if _, err := r.j.put(path, []byte("Written by claude-sandbox install: Claude Code may run outside the sandbox here.\n"), "", 0o644, "the escape hatch"); err != nil {
			return err
		}
		r.st.Hatch = path
		r.say("wrote the escape hatch %s: the integrity guard lets Claude Code run unwrapped on this machine", path)
	}
	if r.j.Dry {
		return nil
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(path, 0, 0); err != nil {
			return err
		}
	}
	return os.Chmod(path, 0o644)
}

func (r *run) putDocs() error {
	for _, d := range Docs {
		path := r.l.DocPath(d)
		changed, err := r.j.put(path, r.o.DocFiles[d], "", 0o644, "generated: "+string(d))
		if err != nil {
			return err
		}
		if changed {
			r.say("installed %s", path)
		}
		if !slices.Contains(r.st.Docs, path) {
			r.st.Docs = append(r.st.Docs, path)
		}
	}
	return nil
}

// installCommand writes the /verify-sandbox command for the user who ran
// sudo, unless one is there already. The home is the user's, and
// ~/.claude the sandbox's too: nothing there is followed (safefs.go), and
// a refusal only skips the command, with a warning.
func (r *run) installCommand(home string) error {
	if home == "" || r.st.Command != "" {
		return nil
	}
	n := len(r.j.Changes)
	err := func() error {
		d, err := r.j.mkdirBeneath(home, filepath.Dir(CommandRel), 0o700, r.o.UID, r.o.GID)
		if err != nil {
			return err
		}
		if d != nil {
			defer d.Close()
		}
		return r.j.createBeneath(d, home, filepath.Join(home, filepath.Dir(CommandRel)), filepath.Base(CommandRel), r.o.VerifyCommand, 0o644, r.o.UID, r.o.GID, "the /verify-sandbox command")
	}()
	if err != nil {
		// Take back the directories made for it.
		done := r.j.Changes[n:]
		r.j.Changes = r.j.Changes[:n]
		undone := &Journal{Dry: r.j.Dry, Changes: done}
		_ = undone.Rollback()
		if !errors.Is(err, fs.ErrExist) {
			r.warn("the /verify-sandbox command was not installed: %v; remove the link, or copy the command from `claude-sandbox promote` yourself", err)
		}
		return nil
	}
	r.st.addDirs(r.j.since(n))
	r.st.Home = home
	r.st.Command = filepath.Join(home, CommandRel)
	r.say("installed the /verify-sandbox command at %s", r.st.Command)
	return nil
}

func (r *run) linkSharedStep() error {
	if r.o.Shared == "" {
		return nil
	}
	return r.linkShared()
}

func (r *run) saveState(rp realPlan) error {
	if rp.record && (rp.copy || r.st.RealOrigin == "") {
		r.st.RealOrigin, r.st.RealLink = rp.src, rp.link
	}
	// Directories in the home are the command's (recorded by its step);
	// the shared directory and its parents stay: only root's count here.
	var mine []Change
	for _, c := range r.j.Changes {
		if c.Base == "" {
			mine = append(mine, c)
		}
	}
	r.st.addDirs(mine)
	b, err := json.MarshalIndent(r.st, "", "  ")
	if err != nil {
		return err
	}
	_, err = r.j.put(r.l.State(), append(b, '\n'), "", 0o600, "what install changed, for uninstall")
	return err
}

func (r *run) removeRealSource(rp realPlan) error {
	if !rp.removeSrc {
		return nil
	}
	if home := r.st.Home; home != "" && within(home, rp.src) {
		// In the user's tree: renamed from a descriptor of its directory,
		// reached from the home without following a symlink (a linked
		// ~/.local/bin would point root's rename elsewhere).
		if err := r.j.removeBeneath(home, rp.src, "the real Claude Code's old place"); err != nil {
			return fmt.Errorf("the real Claude Code's old place %s: %w; pass --real with the binary's real path", rp.src, err)
		}
	} else if _, err := r.j.remove(rp.src, "the real Claude Code's old place"); err != nil {
		return err
	}
	if rp.linkTo != "" {
		r.say("removed %s, npm's link to %s (uninstall puts it back)", rp.src, rp.target)
	} else if rp.copy {
		r.say("moved the real Claude Code from %s to %s", rp.src, r.l.Real())
	} else {
		r.say("removed %s: the real Claude Code is at %s already", rp.src, r.l.Real())
	}
	return nil
}

// realPlan is what install does with the real Claude Code binary.
type realPlan struct {
	src    string // the path given (or found: ~/.local/bin/claude, the shadow's place)
	target string // the file it is, symlinks followed
	link   string // src's own symlink target, when it is one
	// copy: target is not the file at the relocated place yet.
	copy bool
	// removeSrc: src is another name than the relocated place (not the
	// re-install's `--real /usr/libexec/claude-sandbox/claude`), and lies
	// inside the root install writes to.
	removeSrc bool
	// record: uninstall puts src back (as the link it was, or a copy):
	// it is removed, or it is the shadow's place, which the shadow takes.
	record bool
	// linkTo: the real binary is a package manager's file (npm's, in
	// node_modules): it is neither moved nor copied (that would break the
	// package, and a node entry point finds its files beside itself);
	// the relocated place becomes a symlink to it, with this target.
	linkTo string
}

// pkgManaged reports whether path lies in a package manager's tree, whose
// files install never moves (npm's node_modules).
func pkgManaged(path string) bool {
	return strings.Contains(path, "/node_modules/")
}

// defaultReal finds the real binary when --real is not given: the Claude
// Code installer's ~/.local/bin/claude, else what is at the shadow's
// place when it is not the shadow: npm's link into node_modules (an npm
// global install's /usr/local/bin/claude) or, on a machine install never
// ran on, a plain binary. "" when there is none.
func (r *run) defaultReal(home string) string {
	l := r.l
	if home != "" {
		if _, err := os.Lstat(l.DefaultReal()); err == nil {
			return l.DefaultReal()
		}
	}
	sh := l.Shadow()
	fi, err := os.Lstat(sh)
	if err != nil {
		return ""
	}
	if same, _ := SameFile(sh, r.o.Self); same {
		return ""
	}
	if same, _ := SameFile(sh, l.Program()); same {
		return ""
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if t, err := filepath.EvalSymlinks(sh); err == nil && t != "" {
			return sh
		}
		return ""
	}
	// A regular file: an older shadow where install ran before.
	if _, err := os.Lstat(l.State()); err == nil {
		return ""
	}
	if _, err := os.Lstat(l.Program()); err == nil {
		return ""
	}
	if fi.Mode().IsRegular() {
		return sh
	}
	return ""
}

// planReal decides, writing nothing, what to do with the real binary: the
// one given with --real (which must exist), or the one defaultReal finds.
// A --real that an earlier install moved away (moved from), or that names
// the shadow install put in its place, is done already.
func (r *run) planReal(home string) (realPlan, error) {
	var rp realPlan
	l := r.l
	src := r.o.Real
	done := func(src string) bool {
		abs, _ := filepath.Abs(src)
		if abs != r.st.RealOrigin && abs != l.Shadow() {
			return false
		}
		_, err := os.Stat(l.Real())
		return err == nil
	}
	if src == "" {
		if src = r.defaultReal(home); src == "" {
			return rp, nil
		}
	} else if _, err := os.Lstat(src); err != nil {
		if done(src) {
			return rp, nil
		}
		return rp, fmt.Errorf("--real %s: no such file: give the path of the real Claude Code binary", src)
	}
	src, err := filepath.Abs(src)
	if err != nil {
		return rp, err
	}
	target, err := filepath.EvalSymlinks(src)
	if err != nil {
		return rp, fmt.Errorf("the real binary %s: %w", src, err)
	}
	fi, err := os.Stat(target)
	if err != nil {
		return rp, fmt.Errorf("the real binary %s: %w", src, err)
	}
	if !fi.Mode().IsRegular() {
		return rp, fmt.Errorf("the real binary %s is not a regular file", src)
	}
	if same, _ := SameFile(target, r.o.Self); same {
		if done(src) {
			return rp, nil
		}
		return rp, fmt.Errorf("%s is claude-sandbox itself, not the real Claude Code", src)
	}
	if same, _ := SameFile(target, l.Program()); same && done(src) {
		return rp, nil
	}
	rp.src, rp.target = src, target
	rp.link, _ = os.Readlink(src)
	dst := l.Real()
	if pkgManaged(target) {
		return r.planLinkReal(rp)
	}
	if dfi, err := os.Stat(dst); err != nil || !os.SameFile(fi, dfi) {
		rp.copy = true
	}
	rp.removeSrc = !sameEntry(src, dst) && within(l.Root, src) && src != l.Shadow()
	rp.record = rp.removeSrc || src == l.Shadow()
	if rp.record && rp.link != "" {
		// A link into the relocated place itself records nothing to
		// restore but the copy.
		if within(l.Libexec(), target) {
			rp.link = ""
		}
	}
	return rp, nil
}

// planLinkReal plans a real binary in a package manager's tree: the
// relocated place links to it (relative within a --prefix root, so that
// tree is whole; absolute at /), and the link on PATH that led to it (src, when --real
// or defaultReal named one outside the package, else the shadow's place
// when it links there) is recorded, and taken away: by the shadow at the
// shadow's place, else removed. Nothing in the package is touched.
func (r *run) planLinkReal(rp realPlan) (realPlan, error) {
	l := r.l
	rp.linkTo = rp.target
	if l.Root != "/" && within(l.Root, rp.target) {
		if rel, err := filepath.Rel(filepath.Dir(l.Real()), rp.target); err == nil {
			rp.linkTo = rel
		}
	}
	if cur, err := os.Readlink(l.Real()); err != nil || cur != rp.linkTo {
		rp.copy = true
	}
	origin := ""
	if rp.link != "" && !pkgManaged(rp.src) {
		origin = rp.src
	} else if sh := l.Shadow(); sh != rp.src {
		if t, err := filepath.EvalSymlinks(sh); err == nil && t == rp.target {
			if link, err := os.Readlink(sh); err == nil {
				origin, rp.link = sh, link
			}
		}
	}
	if origin == "" {
		rp.src, rp.link = "", ""
		return rp, nil
	}
	rp.src = origin
	rp.record = true
	rp.removeSrc = origin != l.Shadow() && within(l.Root, origin)
	return rp, nil
}

// linkReal makes the relocated place a symlink to the package's real
// binary (planLinkReal), replacing what was there.
func (r *run) linkReal(rp realPlan) error {
	if !rp.copy {
		return nil
	}
	if err := r.j.mkdirs(r.l.Libexec()); err != nil {
		return err
	}
	if _, err := r.j.remove(r.l.Real(), "the relocated real Claude Code before"); err != nil {
		return err
	}
	if err := r.j.symlink(rp.linkTo, r.l.Real(), "the real Claude Code: npm's, left in its package"); err != nil {
		return err
	}
	r.say("linked %s to %s (npm's Claude Code, left in its package)", r.l.Real(), rp.target)
	return nil
}

// sameEntry reports whether paths a and b name the same directory entry
// (their directories resolved): removing a would remove b.
func sameEntry(a, b string) bool {
	da, err1 := filepath.EvalSymlinks(filepath.Dir(a))
	db, err2 := filepath.EvalSymlinks(filepath.Dir(b))
	return err1 == nil && err2 == nil && filepath.Join(da, filepath.Base(a)) == filepath.Join(db, filepath.Base(b))
}

// checkShared refuses, writing nothing, a --shared-config that linkShared
// would refuse: relative, or a symlink on the way or where .claude or
// .claude.json go.
func checkShared(root, shared string) error {
	if !filepath.IsAbs(shared) {
		return fmt.Errorf("--shared-config %s: give an absolute path", shared)
	}
	p := filepath.Join(root, filepath.Clean(shared))
	cur := "/"
	for _, c := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("--shared-config %s: %w", shared, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("--shared-config %s: %s %w; give the real path of the directory", shared, cur, ErrSymlinkRefused)
		}
		if !fi.IsDir() {
			return fmt.Errorf("--shared-config %s: %s is not a directory", shared, cur)
		}
	}
	for _, name := range []string{".claude", ".claude.json"} {
		if fi, err := os.Lstat(filepath.Join(p, name)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s %w: replace it with the real file or directory", filepath.Join(p, name), ErrSymlinkRefused)
		}
	}
	return nil
}

// apparmorProfile lets the installed binary, and only it, create user
// namespaces where Ubuntu's kernel.apparmor_restrict_unprivileged_userns
// restricts them for unconfined programs. It confines nothing else.
const apparmorProfile = `# Written by claude-sandbox install --apparmor.
abi <abi/4.0>,
include <tunables/global>

profile claude-sandbox /usr/{libexec/claude-sandbox/claude-sandbox,local/bin/claude} flags=(unconfined) {
  userns,

  include if exists <local/claude-sandbox>
}
`

func (r *run) installAppArmor() error {
	path := r.l.AppArmor()
	_, existed := os.Lstat(path)
	changed, err := r.j.put(path, []byte(apparmorProfile), "", 0o644, "the AppArmor profile")
	if err != nil {
		return err
	}
	if existed != nil {
		r.st.AppArmor = path
	}
	if changed {
		r.say("wrote the AppArmor profile %s", path)
	}
	if r.l.Root != "/" || r.j.Dry {
		return nil
	}
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		r.warn("apparmor_parser not found; load the profile with: apparmor_parser -r %s", path)
		return nil
	}
	if out, err := exec.Command(parser, "-r", path).CombinedOutput(); err != nil {
		return fmt.Errorf("load the AppArmor profile: %w: %s", err, out)
	}
	return nil
}

func loadState(l Layout) (installState, error) {
	var st installState
	b, err := os.ReadFile(l.State())
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return st, fmt.Errorf("%s: %w: it records what install changed; move it away to start afresh", l.State(), err)
	}
	return st, nil
}
