package install

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// These tests need no root: each installs, as whoever runs it, into a
// scratch root in t.TempDir().

// tree is a byte-exact picture of everything under dirs: each entry's
// path, mode, link target or content digest.
func tree(t *testing.T, dirs ...string) string {
	t.Helper()
	var lines []string
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return nil
			}
			line := fmt.Sprintf("%s %v", p, fi.Mode())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				line += " -> " + target
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				sum := sha256.Sum256(b)
				line += " " + hex.EncodeToString(sum[:8])
			}
			lines = append(lines, line)
			return nil
		})
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(data), mode))
}

// scratch is a machine in a directory: a root with a user's home (/home/u)
// holding Claude Code's installer layout (~/.local/bin/claude a link into
// its versions directory) and an administrator's managed settings, and,
// outside the root, the binary to install and a configuration.
type scratch struct {
	l             Layout
	self, conf    string
	outside       string
	versionedReal string
}

func newScratch(t *testing.T) *scratch {
	s := &scratch{l: Layout{Root: t.TempDir(), Home: "/home/u"}, outside: t.TempDir()}
	home := s.l.UserHome()
	s.versionedReal = filepath.Join(home, ".local/share/claude/versions/2.1.0")
	write(t, s.versionedReal, "#!/bin/sh\necho real claude\n", 0o755)
	must(t, os.MkdirAll(filepath.Dir(s.l.DefaultReal()), 0o755))
	must(t, os.Symlink(s.versionedReal, s.l.DefaultReal()))
	write(t, s.l.Settings(), `{"permissions": {"deny": ["Bash(curl:*)"]}}`+"\n", 0o640)
	s.self = filepath.Join(s.outside, "claude-sandbox")
	write(t, s.self, "#!/bin/sh\necho the sandbox\n", 0o755)
	s.conf = filepath.Join(s.outside, "claude-sandbox.conf")
	write(t, s.conf, "allow-ip = 10.1.2.3\n", 0o644)
	return s
}

func (s *scratch) opts() Options {
	return Options{Self: s.self, UID: os.Getuid(), GID: os.Getgid(), VerifyCommand: []byte("---\ndescription: verify\n---\nrun claude-sandbox verify\n"),
		DocFiles: map[Doc][]byte{DocMan: []byte(".TH X 1\n"), DocBash: []byte("# bash\n"), DocZsh: []byte("#compdef x\n"), DocFish: []byte("# fish\n")}}
}

// everything is the whole scratch machine, inside and outside the root.
func (s *scratch) everything(t *testing.T) string { return tree(t, s.l.Root, s.outside) }

// A fresh install puts everything in place; a second install, and one
// with --real naming the relocated binary, change nothing; uninstall puts
// the tree back byte for byte; a second uninstall says nothing is
// installed.
func TestInstallFreshIdempotentUninstall(t *testing.T) {
	s := newScratch(t)
	l := s.l
	before := s.everything(t)
	o := s.opts()
	o.Config = s.conf
	j, err := Install(l, o)
	must(t, err)
	if len(j.Changes) == 0 {
		t.Fatal("a fresh install recorded no change")
	}
	for path, want := range map[string]string{
		l.Program(): "#!/bin/sh\necho the sandbox\n", l.Shadow(): "#!/bin/sh\necho the sandbox\n",
		l.Real(): "#!/bin/sh\necho real claude\n", l.Config(): "allow-ip = 10.1.2.3\n",
		l.DocPath(DocZsh): "#compdef x\n", l.Command(): string(o.VerifyCommand),
	} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", path, b, err, want)
		}
	}
	if b, _ := os.ReadFile(l.Settings()); !strings.Contains(string(b), "claude-sandbox gate") || !strings.Contains(string(b), "Bash(curl:*)") {
		t.Errorf("the guard is not merged into the administrator's settings:\n%s", b)
	}
	if fi, err := os.Stat(l.Settings()); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("the settings' mode was not kept: %v %v", fi, err)
	}
	if _, err := os.Lstat(l.DefaultReal()); err == nil {
		t.Error("~/.local/bin/claude is still there")
	}
	if ents, _ := filepath.Glob(filepath.Join(l.Root, "*/*/*undo*")); len(ents) > 0 {
		t.Errorf("backups left after commit: %v", ents)
	}
	installed := s.everything(t)

	for _, real := range []string{"", l.Real()} {
		o.Real = real
		j, err := Install(l, o)
		if err != nil || len(j.Changes) != 0 {
			t.Errorf("install again (--real %q): %v, changes %v", real, err, j.Changes)
		}
		if s.everything(t) != installed {
			t.Errorf("install again (--real %q) changed the tree", real)
		}
	}
	o.Real = ""
	if _, err := Uninstall(l, o); err != nil {
		t.Fatal(err)
	}
	if after := s.everything(t); after != before {
		t.Errorf("uninstall did not restore the tree:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := Uninstall(l, o); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "nothing to uninstall") {
		t.Errorf("a second uninstall: %v, want ErrNotInstalled", err)
	}
}

// With a prefix, every path the layout names and every path a run
// touches (written, moved from, backed up) lies under it, the user's home
// and the shared directory included.
func TestLayoutContainsEverything(t *testing.T) {
	s := newScratch(t)
	l := s.l
	for _, p := range append(l.Paths(), l.Shared("/state/claude")) {
		if !within(l.Root, p) || p == l.Root {
			t.Errorf("%s is not under the prefix %s", p, l.Root)
		}
	}
	o := s.opts()
	o.Config, o.Shared, o.Hatch, o.AppArmor = s.conf, "/state/claude", true, true
	must(t, os.MkdirAll(filepath.Join(l.UserHome(), ".claude"), 0o700))
	outsideBefore := tree(t, s.outside)
	for _, verb := range []string{"install", "uninstall"} {
		run := Install
		if verb == "uninstall" {
			run = Uninstall
		}
		j, err := run(l, o)
		must(t, err)
		for _, c := range j.Changes {
			for _, p := range []string{c.Path, c.From, c.Backup, c.Base, c.FromBase} {
				if p != "" && !within(l.Root, p) {
					t.Errorf("%s: %s touches %s, outside the prefix", verb, c, p)
				}
			}
		}
	}
	if tree(t, s.outside) != outsideBefore {
		t.Error("install or uninstall wrote outside the prefix")
	}
}

// A dry run changes nothing, byte for byte, and lists exactly the changes
// the real run then makes.
func TestDryRun(t *testing.T) {
	s := newScratch(t)
	l := s.l
	o := s.opts()
	o.Config, o.Hatch, o.Shared = s.conf, true, "/state/claude"
	write(t, filepath.Join(l.UserHome(), ".claude.json"), "{}\n", 0o600)
	for _, verb := range []string{"install", "uninstall"} {
		run := Install
		if verb == "uninstall" {
			run = Uninstall
		}
		before := s.everything(t)
		o.DryRun = true
		dry, err := run(l, o)
		must(t, err)
		if after := s.everything(t); after != before {
			t.Fatalf("%s --dry-run changed the tree:\nbefore:\n%s\nafter:\n%s", verb, before, after)
		}
		if len(dry.Changes) == 0 {
			t.Fatalf("%s --dry-run lists no change", verb)
		}
		o.DryRun = false
		real, err := run(l, o)
		must(t, err)
		summary := func(j *Journal) string {
			var lines []string
			for _, c := range j.Changes {
				if strings.Contains(c.Path, ".bak-") {
					continue // named by the clock
				}
				lines = append(lines, c.Step+" "+c.String())
			}
			return strings.Join(lines, "\n")
		}
		if summary(dry) != summary(real) {
			t.Errorf("%s: the dry run listed\n%s\nthe real run made\n%s", verb, summary(dry), summary(real))
		}
	}
	// Over an installed tree a dry run lists nothing.
	o.DryRun = false
	_, err := Install(l, o)
	must(t, err)
	o.DryRun = true
	if j, err := Install(l, o); err != nil || len(j.Changes) != 0 {
		t.Errorf("install --dry-run over an installed tree: %v %v", err, j.Changes)
	}
}

// A failure after any step puts the tree back as it was, byte for byte:
// install over a fresh machine and over an installed one (an update
// waiting in ~/.local/bin), and uninstall.
func TestFailureRollsBack(t *testing.T) {
	installSteps := []string{"apparmor", "binaries", "real", "config", "settings", "hatch", "docs", "command", "shared", "state", "real-source"}
	uninstallSteps := []string{"real", "settings", "apparmor", "docs", "hatch", "config", "binaries"}
	defer func() { failAfter = "" }()
	for _, installed := range []bool{false, true} {
		for _, step := range installSteps {
			s := newScratch(t)
			o := s.opts()
			o.Config, o.Hatch, o.AppArmor, o.Shared = s.conf, true, true, "/state/claude"
			write(t, filepath.Join(s.l.UserHome(), ".claude/settings.json"), "{}\n", 0o600)
			// A home ~/.claude.json beside the shared one: backed up.
			write(t, filepath.Join(s.l.UserHome(), ".claude.json"), `{"home": 1}`, 0o600)
			write(t, filepath.Join(s.l.Shared("/state/claude"), ".claude.json"), `{"shared": 1}`, 0o600)
			if installed {
				_, err := Install(s.l, o)
				must(t, err)
				write(t, s.l.DefaultReal(), "claude 2.2.0", 0o755)
				write(t, s.conf, "allow-ip = 10.9.9.9\n", 0o644)
			}
			before := s.everything(t)
			failAfter = step
			_, err := Install(s.l, o)
			failAfter = ""
			if err == nil || !strings.Contains(err.Error(), "undone") {
				t.Errorf("install failing after %s (installed %v): %v", step, installed, err)
			}
			if after := s.everything(t); after != before {
				t.Errorf("install failing after %s (installed %v) left changes:\nbefore:\n%s\nafter:\n%s", step, installed, before, after)
			}
		}
	}
	for _, step := range uninstallSteps {
		s := newScratch(t)
		o := s.opts()
		o.Config, o.Hatch, o.AppArmor = s.conf, true, true
		write(t, s.l.Config(), "# the administrator's\n", 0o644)
		_, err := Install(s.l, o)
		must(t, err)
		before := s.everything(t)
		failAfter = step
		_, err = Uninstall(s.l, o)
		failAfter = ""
		if err == nil || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("uninstall failing after %s: %v", step, err)
		}
		if after := s.everything(t); after != before {
			t.Errorf("uninstall failing after %s left changes:\nbefore:\n%s\nafter:\n%s", step, before, after)
		}
	}
}

// uninstall of a prefix never installed says so, changes nothing, dry or
// not.
func TestUninstallNeverInstalled(t *testing.T) {
	s := newScratch(t)
	before := s.everything(t)
	for _, dry := range []bool{true, false} {
		o := s.opts()
		o.DryRun = dry
		if _, err := Uninstall(s.l, o); !errors.Is(err, ErrNotInstalled) {
			t.Errorf("dry %v: %v, want ErrNotInstalled", dry, err)
		}
	}
	if s.everything(t) != before {
		t.Error("an uninstall of a tree never installed changed it")
	}
}

// Refusals before anything is written: a bad configuration, a missing
// --real, the binary itself as --real.
func TestInstallRefusesBeforeWriting(t *testing.T) {
	s := newScratch(t)
	before := s.everything(t)
	bad := filepath.Join(t.TempDir(), "bad.conf")
	write(t, bad, "egress-jail = maybe\n", 0o644)
	for name, set := range map[string]func(*Options){
		"bad config":   func(o *Options) { o.Config = bad },
		"missing real": func(o *Options) { o.Real = filepath.Join(s.l.Root, "no/such/claude") },
		"itself":       func(o *Options) { o.Real = s.self },
		"check fails":  func(o *Options) { o.Check = func(string) error { return errors.New("no user namespaces") } },
	} {
		o := s.opts()
		set(&o)
		_, err := Install(s.l, o)
		if err == nil {
			t.Errorf("%s: install went ahead", name)
		}
		if name == "check fails" && (err == nil || !strings.Contains(err.Error(), "--skip-checks")) {
			t.Errorf("the checks' refusal does not name --skip-checks (docs/install.md says it does): %v", err)
		}
		if after := s.everything(t); after != before {
			t.Errorf("%s: install wrote before refusing:\n%s", name, after)
		}
	}
}
