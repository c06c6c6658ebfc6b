package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// npmLayout turns the scratch machine into an npm global install's: no
// ~/.local/bin/claude, /usr/local/bin/claude a relative link into the
// package in /usr/local/lib/node_modules, where its binary lives. It
// returns the package's binary.
func npmLayout(t *testing.T, s *scratch) string {
	t.Helper()
	must(t, os.Remove(s.l.DefaultReal()))
	pkg := s.l.P("/usr/local/lib/node_modules/@anthropic-ai/claude-code")
	write(t, filepath.Join(pkg, "package.json"), `{"name":"@anthropic-ai/claude-code","bin":{"claude":"bin/claude.exe"}}`, 0o644)
	bin := filepath.Join(pkg, "bin/claude.exe")
	write(t, bin, "#!/bin/sh\necho 2.1.0 (Claude Code)\n", 0o755)
	must(t, os.MkdirAll(s.l.BinDir(), 0o755))
	must(t, os.Symlink("../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", s.l.Shadow()))
	return bin
}

// An npm global install: install, with no --real and with --real naming
// the shadow's place, the package's binary, or a link to it outside the
// package, leaves the package as it was, puts the shadow in place of
// npm's link, and links the relocated place to the package's binary;
// uninstall puts back exactly what was there (npm's link, same target).
func TestInstallNPMLayout(t *testing.T) {
	for _, c := range []struct{ name, real string }{
		{"no --real", ""},
		{"--real the shadow's place", "/usr/local/bin/claude"},
		{"--real the package's binary", "/usr/local/lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe"},
		{"--real a link outside the package", "/opt/node/bin/claude"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScratch(t)
			bin := npmLayout(t, s)
			o := s.opts()
			if c.real != "" {
				o.Real = s.l.P(c.real)
			}
			if c.real == "/opt/node/bin/claude" {
				must(t, os.MkdirAll(filepath.Dir(o.Real), 0o755))
				must(t, os.Symlink(bin, o.Real))
			}
			pkgBefore := tree(t, s.l.P("/usr/local/lib"))
			before := s.everything(t)
			var out bytes.Buffer
			o.Stdout = &out
			if _, err := Install(s.l, o); err != nil {
				t.Fatal(err)
			}
			if after := tree(t, s.l.P("/usr/local/lib")); after != pkgBefore {
				t.Errorf("install changed npm's package:\n%s", after)
			}
			if same, _ := SameFile(s.l.Shadow(), s.self); !same {
				t.Errorf("%s is not the shadow", s.l.Shadow())
			}
			if fi, err := os.Lstat(s.l.Shadow()); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("the shadow: %v %v", fi, err)
			}
			if got, err := filepath.EvalSymlinks(s.l.Real()); err != nil || got != bin {
				t.Errorf("%s resolves to %q (%v), want the package's %s", s.l.Real(), got, err, bin)
			}
			if c.real == "/opt/node/bin/claude" {
				if _, err := os.Lstat(o.Real); err == nil {
					t.Errorf("%s, a link to the real Claude Code on PATH, is still there", o.Real)
				}
			}
			// A second install, and one with --real naming the shadow's
			// place, change nothing.
			mid := s.everything(t)
			for _, real := range []string{"", s.l.Shadow()} {
				o2 := s.opts()
				o2.Real = real
				if _, err := Install(s.l, o2); err != nil {
					t.Errorf("install again (--real %q): %v", real, err)
				}
				if again := s.everything(t); again != mid {
					t.Errorf("install again (--real %q) changed:\n%s", real, again)
				}
			}
			if _, err := Uninstall(s.l, o); err != nil {
				t.Fatal(err)
			}
			if after := s.everything(t); after != before {
				t.Errorf("uninstall did not put back what was there:\n%s\nwant\n%s", after, before)
			}
			if l, err := os.Readlink(s.l.Shadow()); err != nil || l != "../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe" {
				t.Errorf("npm's link after uninstall: %q %v", l, err)
			}
		})
	}
}

// npm update -g after install puts npm's link back over the shadow:
// uninstall leaves it (it is Claude Code's now) and says so, and takes the
// rest away.
func TestUninstallAfterNPMUpdate(t *testing.T) {
	s := newScratch(t)
	npmLayout(t, s)
	var errb bytes.Buffer
	o := s.opts()
	o.Stderr = &errb
	_, err := Install(s.l, o)
	must(t, err)
	must(t, os.Remove(s.l.Shadow()))
	must(t, os.Symlink("../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", s.l.Shadow()))
	if _, err := Uninstall(s.l, o); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(s.l.Shadow()); err != nil || !strings.Contains(l, "node_modules") {
		t.Errorf("npm's link was removed: %q %v", l, err)
	}
	if !strings.Contains(errb.String(), "no longer the shadow") {
		t.Errorf("no warning: %q", errb.String())
	}
	if _, err := os.Lstat(s.l.Libexec()); err == nil {
		t.Errorf("%s is still there", s.l.Libexec())
	}
}

// A plain binary where the shadow goes, on a machine install never ran
// on: it is the real Claude Code, copied to the relocated place before the
// shadow takes its place, and put back by uninstall.
func TestInstallPlainBinaryAtShadow(t *testing.T) {
	s := newScratch(t)
	must(t, os.Remove(s.l.DefaultReal()))
	write(t, s.l.Shadow(), "#!/bin/sh\necho plain claude\n", 0o755)
	before := s.everything(t)
	_, err := Install(s.l, s.opts())
	must(t, err)
	if b, _ := os.ReadFile(s.l.Real()); string(b) != "#!/bin/sh\necho plain claude\n" {
		t.Errorf("the relocated real binary holds %q", b)
	}
	if same, _ := SameFile(s.l.Shadow(), s.self); !same {
		t.Error("no shadow")
	}
	_, err = Uninstall(s.l, s.opts())
	must(t, err)
	if after := s.everything(t); after != before {
		t.Errorf("uninstall did not put back what was there:\n%s\nwant\n%s", after, before)
	}
}

// After npm update -g put its link back over the shadow, install again
// puts the shadow back, and uninstall then puts npm's link back.
func TestReinstallAfterNPMUpdate(t *testing.T) {
	s := newScratch(t)
	bin := npmLayout(t, s)
	before := s.everything(t)
	_, err := Install(s.l, s.opts())
	must(t, err)
	must(t, os.Remove(s.l.Shadow()))
	must(t, os.Symlink("../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", s.l.Shadow()))
	_, err = Install(s.l, s.opts())
	must(t, err)
	if same, _ := SameFile(s.l.Shadow(), s.self); !same {
		t.Error("install again did not put the shadow back")
	}
	if got, err := filepath.EvalSymlinks(s.l.Real()); err != nil || got != bin {
		t.Errorf("%s: %q %v", s.l.Real(), got, err)
	}
	_, err = Uninstall(s.l, s.opts())
	must(t, err)
	if after := s.everything(t); after != before {
		t.Errorf("uninstall did not put back what was there:\n%s\nwant\n%s", after, before)
	}
}

// Over npm's layout a dry run changes nothing and lists exactly what the
// real run then does, for install and uninstall; and a failure after any
// install step leaves npm's layout byte for byte.
func TestNPMLayoutDryRunAndRollback(t *testing.T) {
	s := newScratch(t)
	npmLayout(t, s)
	o := s.opts()
	summary := func(j *Journal) string {
		var lines []string
		for _, c := range j.Changes {
			lines = append(lines, c.Step+" "+c.String())
		}
		return strings.Join(lines, "\n")
	}
	for _, verb := range []string{"install", "uninstall"} {
		run := Install
		if verb == "uninstall" {
			run = Uninstall
		}
		before := s.everything(t)
		o.DryRun = true
		dry, err := run(s.l, o)
		must(t, err)
		if after := s.everything(t); after != before {
			t.Fatalf("%s --dry-run changed the tree:\n%s", verb, after)
		}
		o.DryRun = false
		real, err := run(s.l, o)
		must(t, err)
		if summary(dry) != summary(real) {
			t.Errorf("%s: the dry run listed\n%s\nthe real run made\n%s", verb, summary(dry), summary(real))
		}
	}
	before := s.everything(t)
	for _, step := range []string{"real", "binaries", "state", "real-source"} {
		failAfter = step
		_, err := Install(s.l, o)
		failAfter = ""
		if err == nil {
			t.Fatalf("failing after %s: install succeeded", step)
		}
		if after := s.everything(t); after != before {
			t.Errorf("failing after %s: the tree changed:\n%s", step, after)
		}
	}
}
