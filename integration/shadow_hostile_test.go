package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// hostileClaude is a session that writes what the launcher reads at exit
// as an attacker would (issue 27): a 100 MB ~/.claude.json, a command
// file whose name carries terminal escape sequences and a newline that
// forge a report line, a pager under a quoted YAML key in glab's config,
// a rewritten project hook script named through "$CLAUDE_PROJECT_DIR",
// and a VS Code task that runs when the folder is opened.
const hostileClaude = `#!/bin/sh
{ printf '{"hooks":"'; head -c 100000000 /dev/zero | tr '\0' 'a'; printf '"}'; } > "$HOME/.claude.json" && echo "big: ok"
mkdir -p "$HOME/.claude/commands"
touch "$HOME/.claude/commands/$(printf 'x\033[2K\033[1A\rforged.md (removed)\n  settings.json: hooks')" && echo "name: ok"
printf 'hosts:\n  gitlab.com:\n    token: t\n"glab_pager": sh -c evil\n' > "$HOME/.config/glab-cli/config.yml" && echo "glab: ok"
printf '#!/bin/sh\necho PLANTED\n' > "$PWD/.claude/hooks/start.sh" && echo "hook: ok"
mkdir -p .vscode && printf '{ // tasks\n "tasks": [{"label": "x", "command": "echo PLANTED", "runOptions": {"runOn": "folderOpen"}},]}\n' > .vscode/tasks.json && echo "vscode: ok"
exit 0
`

// runShadowRusage is runShadow (its command: shadowCmd) returning the peak RSS (KiB) of the
// launcher and every process it waited for, as rusageprobe reports it.
// Not this process's own wait4: a child it starts shares its memory until
// exec (vfork), and the kernel carries that memory's peak into the child's
// figure, so a large test binary (the race detector's) would be counted.
func runShadowRusage(t *testing.T, uid int, home, cwd, prelude, claude string, env []string, args ...string) (testutil.Result, int64) {
	t.Helper()
	probe := testutil.Build(t, "./integration/rusageprobe")
	r := testutil.Run(t, shadowCmd(t, []string{probe}, uid, cwd, prelude, claude, env, args...))
	rss := int64(-1)
	for _, line := range strings.Split(r.Stderr, "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "rusage" {
			rss, _ = strconv.ParseInt(f[5], 10, 64)
		}
	}
	if rss < 0 {
		t.Fatalf("rusageprobe printed no figures: %v", r)
	}
	return r, rss
}

// Everything the launcher reads back from a place a session could write
// is hostile input: a 100 MB ~/.claude.json leaves the launcher under
// 64 MB of RSS (it is refused by its size, and said so), a forged name
// arrives escaped on the terminal and as one JSON line in changes.log,
// and the watch reports the gaps issue 27 found.
func TestShadowHostileState(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{".claude", ".config/glab-cli", "project/.claude/hooks"} {
				must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
			}
			for f, s := range map[string]string{
				".claude.json":                   `{"numStartups":1}`,
				".config/glab-cli/config.yml":    "hosts:\n  gitlab.com:\n    token: t\n",
				"project/.claude/settings.json":  `{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/start.sh"}]}]}}`,
				"project/.claude/hooks/start.sh": "#!/bin/sh\necho start\n",
			} {
				must(t, os.WriteFile(filepath.Join(home, f), []byte(s), 0o755))
			}
			chownTree(t, uid, home)
			prelude, claude := shadowHost(t, "egress-jail = 0\n", hostileClaude)
			r, rss := runShadowRusage(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			for _, want := range []string{"big: ok", "name: ok", "glab: ok", "hook: ok", "vscode: ok"} {
				if !strings.Contains(r.Stdout, want+"\n") {
					t.Fatalf("the session did not write: %q missing\n%v", want, r)
				}
			}
			t.Logf("peak RSS %d KiB\nstderr:\n%s", rss, r.Stderr)
			if rss >= 64<<10 {
				t.Errorf("the launcher (and its children) peaked at %d KiB of RSS with a 100 MB ~/.claude.json; want under 64 MiB", rss)
			}
			for _, want := range []string{
				".claude.json (too large to check (100000012 bytes",
				`x\x1b[2K\x1b[1A\rforged.md (removed)\n  settings.json: hooks" (added)`,
				"config.yml: glab_pager (added)",
				"start.sh: (a script named by " + ws + "/.claude/settings.json) (changed)",
				"tasks.json: tasks[x] (runs on folder open) (added)",
			} {
				if !strings.Contains(r.Stderr, want) {
					t.Errorf("not on stderr: %q", want)
				}
			}
			if strings.ContainsAny(r.Stderr, "\x1b\r") {
				t.Errorf("a control character reached the terminal: %q", r.Stderr)
			}
			b, err := os.ReadFile(filepath.Join(home, ".local/state/claude-sandbox/changes.log"))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				var l struct{ Time, Path, Key, Change string }
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Errorf("changes.log line is not JSON: %q", line)
				}
				if strings.Contains(l.Path, "\x1b[2K") && strings.HasSuffix(l.Path, "\n  settings.json: hooks") {
					found = true
				}
			}
			if !found {
				t.Errorf("the forged name is not one JSON line of changes.log:\n%s", b)
			}
		})
	}
}

// A relative core.hooksPath in the caller's ~/.gitconfig (issue 27: the
// workspace's .githooks/pre-commit, written inside, ran at the host's
// next git commit) and one in an included file are read-only inside,
// while the workspace stays writable.
func TestShadowGlobalHooksPathReadOnly(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	const session = `#!/bin/sh
for d in .githooks-global .hooks-included; do
  mkdir -p "$d" 2>/dev/null
  if printf 'echo PLANTED\n' > "$d/pre-commit" 2>/dev/null; then echo "plant $d: landed"; else echo "plant $d: refused"; fi
done
echo data > data && echo "workspace: ok"
`
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			must(t, os.MkdirAll(ws, 0o755))
			must(t, os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[core]\n\thooksPath = .githooks-global\n[include]\n\tpath = ~/.gitconfig.inc\n"), 0o644))
			must(t, os.WriteFile(filepath.Join(home, ".gitconfig.inc"), []byte("[core]\n\thooksPath = .hooks-included\n"), 0o644))
			for _, c := range [][]string{{"git", "init", "-q", ws}, {"chown", "-R", fmt.Sprintf("%d:%d", uid, uid), home}} {
				if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
					t.Fatalf("%v: %v\n%s", c, err, out)
				}
			}
			prelude, claude := shadowHost(t, "egress-jail = 0\n", session)
			r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			if r.Code != 0 || !strings.Contains(r.Stdout, "workspace: ok\n") {
				t.Fatalf("shadow: %v", r)
			}
			for _, d := range []string{".githooks-global", ".hooks-included"} {
				if !strings.Contains(r.Stdout, "plant "+d+": refused\n") {
					t.Errorf("%s/pre-commit was writable inside:\n%s", d, r.Stdout)
				}
				if _, err := os.Lstat(filepath.Join(ws, d, "pre-commit")); err == nil {
					t.Errorf("%s/pre-commit landed on the host", d)
				}
			}
		})
	}
}

// workspaceRunSession rewrites, in the workspace, what the host's tools
// run by themselves later: a local pre-commit hook (run by the host's
// next git commit through the read-only .git/hooks/pre-commit), husky 9's
// script (called by its read-only .husky/_ wrapper), lefthook's command,
// Mercurial's repository hooks (any hg command, a shell prompt's), mise's
// enter hook (run on cd in a trusted directory).
const workspaceRunSession = `#!/bin/sh
printf 'repos:\n- repo: local\n  hooks:\n  - id: x\n    name: x\n    entry: sh -c "echo PLANTED"\n    language: system\n' > .pre-commit-config.yaml && echo "pre-commit: ok"
printf '#!/bin/sh\necho PLANTED\n' > .husky/pre-commit && echo "husky: ok"
printf 'pre-commit:\n  commands:\n    x:\n      run: echo PLANTED\n' > lefthook.yml && echo "lefthook: ok"
printf '[hooks]\npre-status = echo PLANTED\n' > .hg/hgrc && echo "hg: ok"
printf '[hooks]\nenter = "echo PLANTED"\n' > mise.toml && echo "mise: ok"
exit 0
`

// A session that plants commands the host's git (through a hook manager),
// hg or mise runs later is named at exit, like a changed .envrc (as root
// and as uid 65534). Seen failing without workspaceRunFiles and the
// .husky watch: nothing was reported.
func TestShadowWorkspaceRunFilesReported(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{".claude", "project/.husky/_", "project/.hg"} {
				must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
			}
			for f, s := range map[string]string{
				"project/.pre-commit-config.yaml": "repos: []\n",
				"project/.husky/pre-commit":       "npm test\n",
				"project/.husky/_/pre-commit":     ". \"$(dirname \"$0\")/h\"\n",
			} {
				must(t, os.WriteFile(filepath.Join(home, f), []byte(s), 0o755))
			}
			chownTree(t, uid, home)
			prelude, claude := shadowHost(t, "egress-jail = 0\n", workspaceRunSession)
			r := testutil.Run(t, shadowCmd(t, nil, uid, ws, prelude, claude, surfaceEnv(home), "-p", "x"))
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			for _, want := range []string{"pre-commit: ok", "husky: ok", "lefthook: ok", "hg: ok", "mise: ok"} {
				if !strings.Contains(r.Stdout, want+"\n") {
					t.Fatalf("the session did not write: %q missing\n%v", want, r)
				}
			}
			for _, want := range []string{
				ws + "/.pre-commit-config.yaml (changed)",
				ws + "/.husky/pre-commit (changed)",
				ws + "/lefthook.yml (added)",
				ws + "/.hg/hgrc (added)",
				ws + "/mise.toml (added)",
			} {
				if !strings.Contains(r.Stderr, want) {
					t.Errorf("not reported at exit: %q\nstderr:\n%s", want, r.Stderr)
				}
			}
		})
	}
}

// snapshotSession rewrites what Claude Code's Bash tool sources before
// each command of a concurrent session (its shell snapshot) and leaves a
// snapshot of its own for the next.
const snapshotSession = `#!/bin/sh
d="$HOME/.claude/shell-snapshots"
ls "$d" "$HOME/.claude/session-env" 2>/dev/null | grep -v -e : -e '^$' | sed 's/^/seen: /'
echo 'echo PLANTED' >> "$d/snapshot-bash-other.sh" 2>/dev/null && echo "append: done"
echo 'echo PLANTED' >> "$HOME/.claude/session-env/other-id/hook-0.sh" 2>/dev/null && echo "append env: done"
echo 'echo PLANTED' > "$d/snapshot-bash-mine.sh" && echo "own: ok"
exit 0
`

// Claude Code's shell snapshots and SessionStart environment files are
// each session's own (a tmpfs over ~/.claude/shell-snapshots and
// ~/.claude/session-env): a session neither sees nor changes another
// session's, and leaves none behind, while the rest of ~/.claude stays
// shared. As root and as uid 65534; seen failing (the
// other snapshot listed and PLANTED appended to it on the host) without
// the tmpfs.
func TestShadowShellSnapshotsPerSession(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{".claude/shell-snapshots", ".claude/session-env/other-id", "project"} {
				must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
			}
			other := filepath.Join(home, ".claude/shell-snapshots/snapshot-bash-other.sh")
			must(t, os.WriteFile(other, []byte("export PS1=x\n"), 0o644))
			otherEnv := filepath.Join(home, ".claude/session-env/other-id/hook-0.sh")
			must(t, os.WriteFile(otherEnv, []byte("export A=1\n"), 0o644))
			chownTree(t, uid, home)
			prelude, claude := shadowHost(t, "egress-jail = 0\n", snapshotSession)
			r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			if r.Code != 0 || !strings.Contains(r.Stdout, "own: ok") {
				t.Fatalf("shadow: %v", r)
			}
			if strings.Contains(r.Stdout, "seen: ") {
				t.Errorf("another session's shell snapshot is visible inside:\n%s", r.Stdout)
			}
			if b, _ := os.ReadFile(other); string(b) != "export PS1=x\n" {
				t.Errorf("another session's shell snapshot was changed: %q", b)
			}
			if b, _ := os.ReadFile(otherEnv); string(b) != "export A=1\n" {
				t.Errorf("another session's environment file was changed: %q", b)
			}
			if _, err := os.Stat(filepath.Join(home, ".claude/shell-snapshots/snapshot-bash-mine.sh")); err == nil {
				t.Errorf("the session's snapshot was left on the host for the next session")
			}
		})
	}
}

// gitdirFlood leaves, for the next launch, more gitdirs than it protects,
// each named with an OSC 52 clipboard write and a title report request:
// the next launch refuses and names one of them.
const gitdirFlood = `#!/bin/sh
i=0
while [ $i -le 1000 ]; do mkdir -p "$PWD/.git/modules/m$i$(printf '\033]52;c;UFdORUQ=\007\033[21t')" || exit 1; i=$((i+1)); done
echo "flood: ok"
exit 0
`

// What the launcher prints at the next launch is hostile input too: a
// session that leaves 1,001 gitdirs named with terminal escape sequences
// gets the next launch refused (TestGitdirsBounded), and the refusal
// names one of them, escaped. As root and uid 65534; seen failing (ESC
// and BEL on the launcher's stderr) without safeText.
func TestShadowNextLaunchMessagesEscaped(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{".claude", "project/.git/modules"} {
				must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
			}
			must(t, os.WriteFile(filepath.Join(ws, ".git/HEAD"), []byte("ref: refs/heads/main\n"), 0o644))
			chownTree(t, uid, home)
			prelude, claude := shadowHost(t, "egress-jail = 0\n", gitdirFlood)
			r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			if r.Code != 0 || !strings.Contains(r.Stdout, "flood: ok") {
				t.Fatalf("first session: %v", r)
			}
			r = runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			if r.Code == 0 || !strings.Contains(r.Stderr, "more than 1000 git directories") {
				t.Fatalf("the next launch was not refused by the gitdir bound: %v", r)
			}
			if strings.ContainsAny(r.Stderr, "\x1b\x07") {
				t.Errorf("an escape sequence a session chose reached the terminal: %q", r.Stderr)
			}
			if !strings.Contains(r.Stderr, `\x1b]52;c;UFdORUQ=\a\x1b[21t`) {
				t.Errorf("the gitdir's name is not shown escaped: %q", r.Stderr)
			}
		})
	}
}
