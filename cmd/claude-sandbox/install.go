package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// installState records what install changed, so uninstall can put back
// exactly what was there before.
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
	// Hatch is the escape hatch install wrote (Claude Code on the web, or
	// --allow-unwrapped), removed again by uninstall.
	Hatch string `json:"hatch,omitempty"`
	// AppArmor is the profile install --apparmor wrote, removed again by
	// uninstall.
	AppArmor string `json:"apparmor,omitempty"`
	// Docs are the shell completions and the man page install wrote,
	// removed again by uninstall.
	Docs []string `json:"docs,omitempty"`
}

// docFiles are the shell completions and the manual page, generated from
// the option tables, and where install puts them (beside the shadow in
// /usr/local, where bash-completion, zsh, fish and man look by default).
func (l layout) docFiles() map[string][]byte {
	out := map[string][]byte{l.p("/usr/local/share/man/man1/claude-sandbox.1"): []byte(manPage(readBuildVersion().Version))}
	for shell, path := range map[string]string{
		"bash": "/usr/local/share/bash-completion/completions/claude-sandbox",
		"zsh":  "/usr/local/share/zsh/site-functions/_claude-sandbox",
		"fish": "/usr/local/share/fish/vendor_completions.d/claude-sandbox.fish",
	} {
		s, _ := completionScript(shell)
		out[l.p(path)] = []byte(s)
	}
	return out
}

// addDirs records directories install made (once each).
func (st *installState) addDirs(dirs []string) {
	for _, d := range dirs {
		if !slices.Contains(st.CreatedDirs, d) {
			st.CreatedDirs = append(st.CreatedDirs, d)
		}
	}
}

// layout is where install puts things: under root ("/", or --prefix DIR).
// Everything install and uninstall write lies under root, the invoking
// user's home included (root + the home's path).
type layout struct{ root string }

func (l layout) p(path string) string { return filepath.Join(l.root, path) }
func (l layout) libexec() string      { return l.p("/usr/libexec/claude-sandbox") }
func (l layout) program() string      { return l.p(guard.Program) }
func (l layout) real() string         { return l.p(shadow.RealBinary) }
func (l layout) shadow() string       { return l.p("/usr/local/bin/claude") }
func (l layout) config() string       { return l.p(shadow.ConfigPath) }
func (l layout) settings() string     { return l.p(guard.ManagedSettings) }
func (l layout) state() string        { return l.p("/usr/libexec/claude-sandbox/install-state.json") }
func (l layout) hatch() string        { return l.p(guard.AllowUnwrapped) }

const installHelp = `Usage: claude-sandbox install [--prefix DIR] [--real PATH] [--config FILE] [--apparmor]
                              [--shared-config DIR] [--allow-unwrapped] [--skip-checks]
       claude-sandbox uninstall [--prefix DIR]

install (root only) puts the binary at /usr/libexec/claude-sandbox/claude-sandbox,
the shadow at /usr/local/bin/claude, moves the real Claude Code binary from
~/.local/bin/claude (or --real PATH) to /usr/libexec/claude-sandbox/claude,
copies --config FILE to /etc/claude-sandbox.conf, and merges the integrity
guard into /etc/claude-code/managed-settings.json. It first checks that
user namespaces and /dev/net/tun work, that --config parses and --real
exists, and refuses with the fix, having written nothing, when they do
not (--skip-checks: for image builds). The changes are one transaction: a
failure part way puts back everything it touched. A second run, with any
options, changes nothing; --real naming the relocated binary is in place
already and is kept.

uninstall puts the real binary back, removes the shadow, and restores the
managed settings and configuration as they were before install. Where
nothing is installed it says so and exits 1.

--apparmor writes /etc/apparmor.d/claude-sandbox and loads it: on hosts
where AppArmor restricts unprivileged user namespaces (Ubuntu 23.10 and
later), it lets this binary create them without lifting the restriction
for everything else.

--shared-config DIR links ~/.claude and ~/.claude.json to DIR (a host mount,
say), so Claude's login and memories survive container rebuilds: an
existing home copy is adopted, or backed up when DIR has its own; missing
ones are seeded.

--allow-unwrapped writes the escape hatch /etc/claude-code/allow-unwrapped
(root-owned, 0644), which lets the integrity guard pass Claude Code run
outside the sandbox. install writes it by itself on Claude Code on the web
(CLAUDE_CODE_REMOTE=true in install's own environment), which runs in a
sandbox of its own: the gate never reads that variable, which a settings
file's env block could set. uninstall removes a hatch install wrote.

--prefix DIR installs under DIR instead of / (for tests and image builds)
and writes nothing outside DIR: the user's home is DIR/$HOME, the shared
directory DIR/PATH, and a --real file outside DIR is copied, not moved.
`

// installOpts are install's arguments.
type installOpts struct {
	realPath, config, shared string
	apparmor, skip, hatch    bool
}

// installFlags are install's options, as newInstallFlags defines them.
type installFlags struct {
	prefix, realPath, config, shared *string
	skip, apparmor, unwrapped        *bool
}

// newInstallFlags is install's flag set: its options, their value names
// (back-quoted in the usage) and help, for the parser, the completions and
// the man page alike.
func newInstallFlags() (*flag.FlagSet, installFlags) {
	flags := newFlags("install")
	return flags, installFlags{
		prefix:    flags.String("prefix", "/", "install under the root `DIR` instead of /, writing nothing outside it"),
		realPath:  flags.String("real", "", "the real Claude Code binary to relocate (`PATH`; default ~/.local/bin/claude)"),
		config:    flags.String("config", "", "a claude-sandbox.conf `FILE` to install as "+shadow.ConfigPath),
		skip:      flags.Bool("skip-checks", false, "do not check user namespaces and /dev/net/tun (image builds)"),
		apparmor:  flags.Bool("apparmor", false, "write (and load) an AppArmor profile that lets this binary create user namespaces"),
		shared:    flags.String("shared-config", "", "link ~/.claude and ~/.claude.json to this shared, host-mounted `DIR`"),
		unwrapped: flags.Bool("allow-unwrapped", false, "write the root-owned escape hatch "+guard.AllowUnwrapped+" (automatic on Claude Code on the web)"),
	}
}

func installMain(args []string, stdout, stderr io.Writer) int {
	flags, fv := newInstallFlags()
	prefix, realPath, config, skip, apparmor, shared, unwrapped := fv.prefix, fv.realPath, fv.config, fv.skip, fv.apparmor, fv.shared, fv.unwrapped
	if code, done := parseFlags(flags, args, installHelp, stdout, stderr); done {
		return code
	}
	if flags.NArg() > 0 {
		return usageLine(stderr, "install", fmt.Sprintf("unexpected argument %q", flags.Arg(0)))
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "claude-sandbox install: needs root (sudo claude-sandbox install)")
		return 1
	}
	root, err := filepath.Abs(*prefix)
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox install: --prefix:", err)
		return 2
	}
	o := installOpts{realPath: *realPath, config: *config, shared: *shared, apparmor: *apparmor, skip: *skip,
		hatch: *unwrapped || os.Getenv("CLAUDE_CODE_REMOTE") == "true"}
	if err := install(layout{root: root}, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "claude-sandbox install:", err)
		return 1
	}
	return 0
}

// install checks everything it can first, writing nothing, then applies
// the changes as one transaction (txn.go): on any failure what it wrote is
// taken back and what it replaced is put back. The real binary's old
// place is emptied last of all, once everything else is in place.
func install(l layout, o installOpts, stdout, stderr io.Writer) (err error) {
	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	warn := func(format string, a ...any) {
		fmt.Fprintf(stderr, "claude-sandbox install: warning: "+format+"\n", a...)
	}

	// Check: nothing is written before all of this passed.
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return err
	}
	var conf []byte
	if o.config != "" {
		if conf, err = os.ReadFile(o.config); err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		if _, err := shadow.ParseConfig(o.config, bytes.NewReader(conf)); err != nil {
			return fmt.Errorf("refusing the configuration: %w", err)
		}
	}
	home, uid, gid := invokingUser()
	if home != "" {
		home = l.p(home)
		if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
			home = "" // no such home (under --prefix, typically): no command
		}
	}
	st, err := loadState(l)
	if err != nil {
		return err
	}
	rp, err := planReal(l, o.realPath, home, st.RealOrigin)
	if err != nil {
		return err
	}
	if o.shared != "" {
		if home == "" {
			return fmt.Errorf("--shared-config: the invoking user's home does not exist under %s", l.root)
		}
		if err := checkShared(l.root, o.shared); err != nil {
			return err
		}
	}
	if fi, err := os.Lstat(l.hatch()); o.hatch && err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file: remove it, then run install again", l.hatch())
	}
	oldSettings, err := os.ReadFile(l.settings())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	merged, merr := guard.Merge(oldSettings)

	// Apply.
	t := &txn{}
	defer func() {
		if err != nil {
			t.rollback()
			err = fmt.Errorf("%w (nothing was changed: what install had done is undone)", err)
		}
	}()
	if o.apparmor {
		// Before the checks' verdict matters: the profile is what makes
		// user namespaces work on hosts that restrict them.
		if err := installAppArmor(l, t, &st, stdout, stderr); err != nil {
			return err
		}
	}
	if !o.skip {
		if err := checkPrerequisites(o.config); err != nil {
			return fmt.Errorf("refusing: %w", err)
		}
	}
	for _, target := range []string{l.program(), l.shadow()} {
		changed, err := t.put(target, self, "", 0o755)
		if err != nil {
			return err
		}
		if changed {
			say("installed %s", target)
		}
	}
	// The real binary: relocated off PATH (I3), so the installer's own
	// PATH edit for ~/.local/bin finds nothing there.
	copied := false
	if rp.copy {
		if copied, err = t.put(l.real(), nil, rp.target, 0o755); err != nil {
			return err
		}
	}
	if _, err := os.Stat(l.real()); err != nil {
		warn("no real Claude Code binary at %s yet; install Claude Code, then run install again (or pass --real PATH)", l.real())
	}
	if conf != nil {
		if st.ConfigBefore == nil && !st.ConfigNone {
			if old, err := os.ReadFile(l.config()); err == nil {
				s := string(old)
				st.ConfigBefore = &s
			} else {
				st.ConfigNone = true
			}
		}
		if changed, err := t.put(l.config(), conf, "", 0o644); err != nil {
			return err
		} else if changed {
			say("installed %s", l.config())
		}
	}
	// The guard (I5, G1, G2).
	if merr != nil {
		warn("%s is %v; left untouched, so the integrity guard is NOT installed: fix the file and run install again", l.settings(), merr)
	} else {
		if st.SettingsBefore == nil && !st.SettingsNone {
			if oldSettings != nil {
				s := string(oldSettings)
				st.SettingsBefore = &s
			} else {
				st.SettingsNone = true
			}
		}
		if changed, err := t.put(l.settings(), merged, "", 0o644); err != nil {
			return err
		} else if changed {
			say("merged the integrity guard into %s", l.settings())
		}
		st.SettingsWrote = string(merged)
	}
	if o.hatch {
		if err := writeHatch(l, t, &st, stdout); err != nil {
			return err
		}
	}
	docs := l.docFiles()
	for _, path := range slices.Sorted(maps.Keys(docs)) {
		changed, err := t.put(path, docs[path], "", 0o644)
		if err != nil {
			return err
		}
		if changed {
			say("installed %s", path)
		}
		if !slices.Contains(st.Docs, path) {
			st.Docs = append(st.Docs, path)
		}
	}
	// The /verify-sandbox command, for the user who ran sudo, unless one
	// is there already. The home is the user's, and ~/.claude the
	// sandbox's too: nothing there is followed (safefs.go), and a refusal
	// only skips the command.
	if home != "" && st.Command == "" {
		if err := installCommand(home, uid, gid, &st, t); err == nil {
			say("installed the /verify-sandbox command at %s", st.Command)
		} else if !errors.Is(err, fs.ErrExist) {
			warn("the /verify-sandbox command was not installed: %v; remove the link, or copy the command from `claude-sandbox promote` yourself", err)
		}
	}
	if o.shared != "" {
		if err := linkSharedConfig(l.root, home, o.shared, uid, gid, stdout); err != nil {
			return err
		}
	}
	if rp.removeSrc && (rp.copy || st.RealOrigin == "") {
		st.RealOrigin, st.RealLink = rp.src, rp.link
	}
	st.addDirs(t.created)
	if err := saveState(l, t, st); err != nil {
		return err
	}
	// Last, the real binary's old place: everything else is in place.
	if rp.removeSrc {
		if err := os.Remove(rp.src); err != nil {
			return err
		}
		if rp.copy {
			say("moved the real Claude Code from %s to %s", rp.src, l.real())
		} else {
			say("removed %s: the real Claude Code is at %s already", rp.src, l.real())
		}
	} else if copied {
		say("copied the real Claude Code from %s to %s (left in place: it is outside %s)", rp.src, l.real(), l.root)
	}
	t.commit()
	return nil
}

// realPlan is what install does with the real Claude Code binary.
type realPlan struct {
	src    string // the path given (or ~/.local/bin/claude)
	target string // the file it is, symlinks followed
	link   string // src's own symlink target, when it is one
	// copy: target is not the file at the relocated place yet.
	copy bool
	// removeSrc: src is another name than the relocated place (not the
	// re-install's `--real /usr/libexec/claude-sandbox/claude`), and lies
	// inside the root install writes to.
	removeSrc bool
}

// planReal decides, writing nothing, what to do with the real binary: the
// one given with --real (which must exist), or the ~/.local/bin/claude the
// Claude Code installer leaves, when there is one. A --real that an
// earlier install moved away (moved from) is done already.
func planReal(l layout, realPath, home, movedFrom string) (realPlan, error) {
	var rp realPlan
	src := realPath
	if src == "" {
		if home == "" {
			return rp, nil
		}
		src = filepath.Join(home, ".local/bin/claude")
		if _, err := os.Lstat(src); err != nil {
			return rp, nil
		}
	} else if _, err := os.Lstat(src); err != nil {
		if abs, _ := filepath.Abs(src); abs == movedFrom {
			if _, err := os.Stat(l.real()); err == nil {
				return rp, nil
			}
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
	if same, _ := sameFile(target, "/proc/self/exe"); same {
		return rp, fmt.Errorf("%s is claude-sandbox itself, not the real Claude Code", src)
	}
	rp.src, rp.target = src, target
	rp.link, _ = os.Readlink(src)
	dst := l.real()
	if dfi, err := os.Stat(dst); err != nil || !os.SameFile(fi, dfi) {
		rp.copy = true
	}
	rp.removeSrc = !sameEntry(src, dst) && within(l.root, src)
	if rp.removeSrc && rp.link != "" {
		// A link into the relocated place itself records nothing to
		// restore but the copy.
		if within(l.libexec(), target) {
			rp.link = ""
		}
	}
	return rp, nil
}

// sameEntry reports whether paths a and b name the same directory entry
// (their directories resolved): removing a would remove b.
func sameEntry(a, b string) bool {
	da, err1 := filepath.EvalSymlinks(filepath.Dir(a))
	db, err2 := filepath.EvalSymlinks(filepath.Dir(b))
	return err1 == nil && err2 == nil && filepath.Join(da, filepath.Base(a)) == filepath.Join(db, filepath.Base(b))
}

// checkShared refuses, writing nothing, a --shared-config that
// linkSharedConfig would refuse: relative, or a symlink on the way or
// where .claude or .claude.json go.
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
			return fmt.Errorf("--shared-config %s: %s %w; give the real path of the directory", shared, cur, errSymlinkRefused)
		}
		if !fi.IsDir() {
			return fmt.Errorf("--shared-config %s: %s is not a directory", shared, cur)
		}
	}
	for _, name := range []string{".claude", ".claude.json"} {
		if fi, err := os.Lstat(filepath.Join(p, name)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s %w: replace it with the real file or directory", filepath.Join(p, name), errSymlinkRefused)
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

func installAppArmor(l layout, t *txn, st *installState, stdout, stderr io.Writer) error {
	path := l.p("/etc/apparmor.d/claude-sandbox")
	_, existed := os.Lstat(path)
	changed, err := t.put(path, []byte(apparmorProfile), "", 0o644)
	if err != nil {
		return err
	}
	if existed != nil {
		st.AppArmor = path
	}
	if changed {
		fmt.Fprintf(stdout, "wrote the AppArmor profile %s\n", path)
	}
	if l.root != "/" {
		return nil
	}
	parser, err := exec.LookPath("apparmor_parser")
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox install: warning: apparmor_parser not found; load the profile with: apparmor_parser -r "+path)
		return nil
	}
	if out, err := exec.Command(parser, "-r", path).CombinedOutput(); err != nil {
		return fmt.Errorf("load the AppArmor profile: %w: %s", err, out)
	}
	return nil
}

// commandRel is where the /verify-sandbox command goes in the home.
const commandRel = ".claude/commands/verify-sandbox.md"

// installCommand writes the /verify-sandbox command into home, owned by
// the user, refusing any symlink on the way (fs.ErrExist: one is there).
// What it made is taken back when t rolls back.
func installCommand(home string, uid, gid int, st *installState, t *txn) error {
	h, err := openTrusted(home)
	if err != nil {
		return err
	}
	defer h.Close()
	dir, created, err := h.walk(filepath.Dir(commandRel), 0o700, uid, gid, true)
	undoDirs := func() {
		for i := len(created) - 1; i >= 0; i-- {
			if rel, ok := strings.CutPrefix(created[i], home+"/"); ok {
				removeInHome(home, rel, true, nil)
			}
		}
	}
	if err != nil {
		undoDirs()
		return err
	}
	defer dir.Close()
	if err := dir.create(filepath.Base(commandRel), []byte(verifyCommandFile), 0o644, uid, gid); err != nil {
		undoDirs()
		return err
	}
	t.undo = append(t.undo, func() {
		removeInHome(home, commandRel, false, []byte(verifyCommandFile))
		undoDirs()
	})
	st.addDirs(created)
	st.Home = home
	st.Command = filepath.Join(home, commandRel)
	return nil
}

// removeInHome removes rel from home (a file only when it holds exactly
// want; a directory only when empty) without following a symlink.
func removeInHome(home, rel string, dir bool, want []byte) {
	h, err := openTrusted(home)
	if err != nil {
		return
	}
	defer h.Close()
	parent, _, err := h.walk(filepath.Dir(rel), 0, -1, -1, false)
	if err != nil {
		return
	}
	defer parent.Close()
	name := filepath.Base(rel)
	if dir {
		_ = unix.Unlinkat(parent.fd, name, unix.AT_REMOVEDIR)
		return
	}
	if b, err := parent.readFile(name); err == nil && bytes.Equal(b, want) {
		_ = unix.Unlinkat(parent.fd, name, 0)
	}
}

// writeHatch creates the escape hatch: a root-owned regular file, not
// group- or world-writable, the only form the gate accepts.
func writeHatch(l layout, t *txn, st *installState, stdout io.Writer) error {
	path := l.hatch()
	if _, err := os.Lstat(path); err != nil {
		if _, err := t.put(path, []byte("Written by claude-sandbox install: Claude Code may run outside the sandbox here.\n"), "", 0o644); err != nil {
			return err
		}
		st.Hatch = path
		fmt.Fprintf(stdout, "wrote the escape hatch %s: the integrity guard lets Claude Code run unwrapped on this machine\n", path)
	}
	if err := os.Chown(path, 0, 0); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}

// sameFile reports whether a and b hold the same bytes.
func sameFile(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	sa, _ := fa.Stat()
	sb, _ := fb.Stat()
	if sa.Size() != sb.Size() {
		return false, nil
	}
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea != nil {
			return true, nil
		}
	}
}

// copyFile streams src to dst atomically (temporary file, then rename).
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// writeIfDifferent writes data to path atomically (a temporary file in the
// same directory, synced, then renamed), keeping an existing file's mode,
// unless the file already holds exactly data. It reports whether it wrote.
func writeIfDifferent(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	return true, os.Rename(tmp.Name(), path)
}

func loadState(l layout) (installState, error) {
	var st installState
	b, err := os.ReadFile(l.state())
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return st, fmt.Errorf("%s: %w: it records what install changed; move it away to start afresh", l.state(), err)
	}
	return st, nil
}

func saveState(l layout, t *txn, st installState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	_, err = t.put(l.state(), append(b, '\n'), "", 0o600)
	return err
}

// newUninstallFlags is uninstall's flag set (see newInstallFlags).
func newUninstallFlags() (*flag.FlagSet, *string) {
	flags := newFlags("uninstall")
	return flags, flags.String("prefix", "/", "uninstall from under the root `DIR` instead of /")
}

func uninstallMain(args []string, stdout, stderr io.Writer) int {
	flags, prefix := newUninstallFlags()
	if code, done := parseFlags(flags, args, installHelp, stdout, stderr); done {
		return code
	}
	if flags.NArg() > 0 {
		return usageLine(stderr, "uninstall", fmt.Sprintf("unexpected argument %q", flags.Arg(0)))
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "claude-sandbox uninstall: needs root (sudo claude-sandbox uninstall)")
		return 1
	}
	root, err := filepath.Abs(*prefix)
	if err == nil {
		err = uninstall(layout{root: root}, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox uninstall:", err)
		return 1
	}
	return 0
}

// uninstall undoes install as one transaction: the real binary back in
// its old place, settings and configuration as they were; the installed
// tree goes last. Only the home's command file and the emptied
// directories are removed after the point of no return.
func uninstall(l layout, stdout, stderr io.Writer) (err error) {
	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	warn := func(format string, a ...any) {
		fmt.Fprintf(stderr, "claude-sandbox uninstall: warning: "+format+"\n", a...)
	}
	_, e1 := os.Lstat(l.state())
	_, e2 := os.Lstat(l.program())
	_, e3 := os.Lstat(l.shadow())
	if e1 != nil && e2 != nil && e3 != nil {
		return fmt.Errorf("nothing to uninstall: claude-sandbox is not installed under %s (no %s)", l.root, l.program())
	}
	st, err := loadState(l)
	if err != nil {
		return err
	}
	t := &txn{}
	defer func() {
		if err != nil {
			t.rollback()
			err = fmt.Errorf("%w (nothing was changed)", err)
		}
	}()
	if st.RealOrigin != "" {
		linkTarget := st.RealLink
		if linkTarget != "" && !filepath.IsAbs(linkTarget) {
			linkTarget = filepath.Join(filepath.Dir(st.RealOrigin), linkTarget)
		}
		_, linkErr := os.Stat(linkTarget)
		switch {
		case func() bool { _, err := os.Lstat(st.RealOrigin); return err == nil }():
			warn("%s exists (a newer Claude Code?): left as it is", st.RealOrigin)
		case st.RealLink != "" && linkErr == nil:
			// It was the installer's symlink into its versions directory,
			// which is still there.
			if err := t.symlink(st.RealLink, st.RealOrigin); err != nil {
				return err
			}
			say("put the real Claude Code back at %s -> %s", st.RealOrigin, st.RealLink)
		default:
			if _, err := os.Stat(l.real()); err != nil {
				warn("no real Claude Code at %s to put back at %s", l.real(), st.RealOrigin)
				break
			}
			if _, err := t.put(st.RealOrigin, nil, l.real(), 0o755); err != nil {
				return err
			}
			say("put the real Claude Code back at %s", st.RealOrigin)
		}
	}
	// Managed settings: exactly as before when nobody edited them since;
	// otherwise only the guard's own entries go.
	if cur, err := os.ReadFile(l.settings()); err == nil {
		switch {
		case string(cur) == st.SettingsWrote && st.SettingsNone:
			if _, err := t.remove(l.settings()); err != nil {
				return err
			}
		case string(cur) == st.SettingsWrote && st.SettingsBefore != nil:
			if _, err := t.put(l.settings(), []byte(*st.SettingsBefore), "", 0o644); err != nil {
				return err
			}
		default:
			out, gerr := guard.Remove(cur)
			if gerr != nil {
				warn("%s is %v; left untouched", l.settings(), gerr)
				break
			}
			if _, err := t.put(l.settings(), out, "", 0o644); err != nil {
				return err
			}
		}
		say("removed the integrity guard from %s", l.settings())
	}
	if st.AppArmor != "" {
		if cur, err := os.ReadFile(st.AppArmor); err == nil && string(cur) == apparmorProfile {
			if l.root == "/" {
				// Unload it (best effort: it confines nothing anyway).
				if parser, err := exec.LookPath("apparmor_parser"); err == nil {
					_ = exec.Command(parser, "-R", st.AppArmor).Run()
				}
			}
			if _, err := t.remove(st.AppArmor); err != nil {
				return err
			}
			say("removed the AppArmor profile %s", st.AppArmor)
		}
	}
	for _, path := range st.Docs {
		if _, err := os.Lstat(path); err != nil {
			continue
		}
		if _, err := t.remove(path); err != nil {
			return err
		}
		say("removed %s", path)
	}
	if st.Hatch != "" {
		if _, err := t.remove(st.Hatch); err != nil {
			return err
		}
		say("removed the escape hatch %s", st.Hatch)
	}
	switch {
	case st.ConfigNone:
		if _, err := t.remove(l.config()); err != nil {
			return err
		}
	case st.ConfigBefore != nil:
		if _, err := t.put(l.config(), []byte(*st.ConfigBefore), "", 0o644); err != nil {
			return err
		}
	}
	for _, p := range []string{l.shadow(), l.libexec()} {
		if _, err := t.remove(p); err != nil {
			return err
		}
	}
	t.commit()
	say("removed %s and %s", l.shadow(), l.libexec())

	home := st.Home
	if home == "" && st.Command != "" {
		home = strings.TrimSuffix(st.Command, "/"+commandRel)
	}
	inHome := func(p string) (string, bool) {
		rel, ok := strings.CutPrefix(p, home+"/")
		return rel, ok && home != ""
	}
	if rel, ok := inHome(st.Command); ok {
		removeInHome(home, rel, false, []byte(verifyCommandFile))
	}
	// The directories install made, deepest first, when nothing else
	// moved in meanwhile.
	dirs := slices.Clone(st.CreatedDirs)
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		// Fails, harmlessly, when not empty.
		if rel, ok := inHome(d); ok {
			removeInHome(home, rel, true, nil)
		} else {
			_ = os.Remove(d)
		}
	}
	return nil
}

// checkPrerequisites refuses an install that could not work (I2): user
// namespaces for an unprivileged user, and, with the jail on, a usable
// /dev/net/tun.
func checkPrerequisites(config string) error {
	// The real thing, as an unprivileged user: this binary builds a
	// sandbox (no network) around /bin/true.
	cmd := exec.Command("/proc/self/exe", "run", "--net=none", "--bare", "--", "/bin/true")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			// Could not even start it (typically this copy of the binary
			// is not executable by other users): nothing was proved, so
			// the check fails rather than pass unseen.
			return fmt.Errorf("cannot run the check, a sandbox around /bin/true as uid 65534: %w; run install from a copy of claude-sandbox that other users can execute (mode 0755, in a directory they can enter), or pass --skip-checks", err)
		}
		return fmt.Errorf("a sandbox does not start for an unprivileged user: %s", strings.TrimSpace(string(out)))
	}
	jail := true
	if config != "" {
		if f, err := os.Open(config); err == nil {
			c, perr := shadow.ParseConfig(config, f)
			f.Close()
			if perr == nil {
				jail = c.EgressJail
			}
		}
	}
	if jail {
		if p := tunProblem("/dev/net/tun"); p != "" {
			return fmt.Errorf("%s; or set egress-jail = 0 in the configuration", p)
		}
	}
	return nil
}
