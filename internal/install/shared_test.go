package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// crossFS makes adopt's rename fail as it does across filesystems (the
// shared directory a host mount), so the copy is taken.
func crossFS(t *testing.T) {
	t.Cleanup(func() { adoptRename, testHookBeforeCopy = renameNoReplace, nil })
	adoptRename = func(int, string, int, string) error { return unix.EXDEV }
}

// The user wins the race between adopt's checks and its copy: after the
// shared directory (theirs) was checked, they plant there a link named
// .claude.json to a root file, or .claude to a root directory. Root's copy
// never writes through it (the old `cp -a` by path wrote the user's file
// into the link's target and gave it to the user): the install refuses and
// the targets stay as they were.
func TestAdoptCopyRaceLinkPlanted(t *testing.T) {
	for _, name := range []string{".claude.json", ".claude"} {
		t.Run(name, func(t *testing.T) {
			s := newScratch(t)
			crossFS(t)
			home := s.l.UserHome()
			write(t, filepath.Join(home, ".claude.json"), `{"user":"data"}`+"\n", 0o600)
			write(t, filepath.Join(home, ".claude/settings.json"), "{}\n", 0o600)
			victimDir := t.TempDir()
			victim := filepath.Join(victimDir, "passwd")
			write(t, victim, "root:x:0:0::/root:/bin/sh\n", 0o644)
			testHookBeforeCopy = func(from, to string) {
				if filepath.Base(to) != name {
					return
				}
				target := victim
				if name == ".claude" {
					target = victimDir
				}
				must(t, os.Symlink(target, to))
			}
			o := s.opts()
			o.Shared = "/state/claude"
			_, err := Install(s.l, o)
			if err == nil {
				t.Errorf("install went on with %s planted as a link mid-copy", name)
			}
			if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0::/root:/bin/sh\n" {
				t.Errorf("the link's target was written: %q", b)
			}
			if ents, _ := os.ReadDir(victimDir); len(ents) != 1 {
				t.Errorf("the linked directory was written into: %v", ents)
			}
		})
	}
}

// The copy across filesystems keeps what cp -a kept: content, modes,
// times, symlinks as symlinks (not followed), nested directories; the
// home copy is backed up and replaced by the link.
func TestAdoptCopyAcrossFilesystems(t *testing.T) {
	s := newScratch(t)
	crossFS(t)
	home := s.l.UserHome()
	write(t, filepath.Join(home, ".claude.json"), `{"user":"data"}`+"\n", 0o600)
	write(t, filepath.Join(home, ".claude/projects/p/log.jsonl"), "line\n", 0o640)
	write(t, filepath.Join(home, ".claude/run.sh"), "#!/bin/sh\n", 0o750)
	must(t, os.Symlink("/etc/passwd", filepath.Join(home, ".claude/outside")))
	// The command there already: install keeps it, so the trees compare.
	write(t, filepath.Join(home, CommandRel), "mine\n", 0o644)
	must(t, os.Chmod(filepath.Join(home, ".claude/projects"), 0o711))
	mt := filepath.Join(home, ".claude/projects/p/log.jsonl")
	old := mustStat(t, mt).ModTime().Add(-3600e9)
	must(t, os.Chtimes(mt, old, old))
	before := tree(t, filepath.Join(home, ".claude"), filepath.Join(home, ".claude.json"))
	o := s.opts()
	o.Shared = "/state/claude"
	if _, err := Install(s.l, o); err != nil {
		t.Fatal(err)
	}
	shared := s.l.Shared(o.Shared)
	after := tree(t, filepath.Join(shared, ".claude"), filepath.Join(shared, ".claude.json"))
	if want := strings.ReplaceAll(before, home, shared); after != want {
		t.Errorf("the copy differs:\n%s\nwant\n%s", after, want)
	}
	if got := mustStat(t, filepath.Join(shared, ".claude/projects/p/log.jsonl")).ModTime(); !got.Equal(old) {
		t.Errorf("mtime %v, want %v", got, old)
	}
	for _, n := range []string{".claude", ".claude.json"} {
		if l, err := os.Readlink(filepath.Join(home, n)); err != nil || l != filepath.Join(o.Shared, n) {
			t.Errorf("%s: %q %v", n, l, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(shared, ".claude.json")); !bytes.Contains(b, []byte("user")) {
		t.Errorf(".claude.json: %q", b)
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Lstat(p)
	must(t, err)
	return fi
}

// Mid-copy, below the top: when the copy reaches .claude/projects/p, the
// user swaps the shared .claude/projects (already made) for a link to a
// root directory. The copy goes on in the directory it made, through its
// descriptor; nothing lands in the link's target.
func TestAdoptCopySwapBelow(t *testing.T) {
	s := newScratch(t)
	crossFS(t)
	home := s.l.UserHome()
	write(t, filepath.Join(home, ".claude/projects/p/log.jsonl"), "line\n", 0o600)
	victimDir := t.TempDir()
	t.Cleanup(func() { testHookCopyEntry = nil })
	testHookCopyEntry = func(from, to string) {
		if filepath.Base(to) != "log.jsonl" {
			return
		}
		projects := filepath.Dir(filepath.Dir(to))
		must(t, os.Rename(projects, projects+".away"))
		must(t, os.Symlink(victimDir, projects))
	}
	o := s.opts()
	o.Shared = "/state/claude"
	_, _ = Install(s.l, o)
	if ents, _ := os.ReadDir(victimDir); len(ents) != 0 {
		t.Errorf("the copy wrote into the link's target: %v", ents)
	}
}

// A real second filesystem (a tmpfs for the shared directory): the rename
// fails with EXDEV and the descriptor copy runs, keeping owners (a file
// of another uid stays that uid's) and leaving the home's copy replaced
// by the link.
func TestAdoptCopyRealTmpfs(t *testing.T) {
	testutil.NeedsRoot(t)
	s := newScratch(t)
	state := filepath.Join(s.l.Root, "state")
	must(t, os.MkdirAll(state, 0o755))
	must(t, unix.Mount("tmpfs", state, "tmpfs", 0, "size=16m"))
	t.Cleanup(func() { _ = unix.Unmount(state, unix.MNT_DETACH) })
	home := s.l.UserHome()
	write(t, filepath.Join(home, ".claude/projects/log.jsonl"), "line\n", 0o640)
	must(t, os.Lchown(filepath.Join(home, ".claude/projects/log.jsonl"), 1234, 1234))
	o := s.opts()
	o.Shared = "/state/claude"
	_, err := Install(s.l, o)
	must(t, err)
	copied := filepath.Join(state, "claude/.claude/projects/log.jsonl")
	var st unix.Stat_t
	must(t, unix.Lstat(copied, &st))
	if st.Uid != 1234 || st.Mode&0o777 != 0o640 {
		t.Errorf("the copy: uid %d mode %o, want 1234 0640", st.Uid, st.Mode&0o777)
	}
	if l, err := os.Readlink(filepath.Join(home, ".claude")); err != nil || l != "/state/claude/.claude" {
		t.Errorf("~/.claude: %q %v", l, err)
	}
}
