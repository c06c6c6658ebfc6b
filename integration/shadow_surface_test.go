package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// plantClaude stands in for a compromised session: it tries to leave
// behind, in every place the host later executes from, a file of its own,
// and reports each attempt as "plant NAME: landed|refused". It also writes
// data where data belongs, and runs git in the workspace repository.
const plantClaude = `#!/bin/sh
H=$HOME
plant() { # name path
  mkdir -p "$(dirname "$2")" 2>/dev/null
  if printf 'echo PLANTED\n' > "$2" 2>/dev/null; then echo "plant $1: landed"; else echo "plant $1: refused"; fi
}
plant uv "$H/.local/bin/uv"
plant uvx "$H/.local/bin/uvx"
plant bash-completion "$H/.local/share/bash-completion/completions/git"
plant zsh "$H/.local/share/zsh/site-functions/_evil"
plant fish "$H/.local/share/fish/vendor_conf.d/evil.fish"
plant direnv "$H/.local/share/direnv/allow/0123abcd"
plant nvim "$H/.local/share/nvim/site/pack/evil/start/x/plugin/x.vim"
plant uv-tools "$H/.local/share/uv/tools/ruff/bin/ruff"
plant uv-python "$H/.local/share/uv/python/cpython-3.12/bin/python3"
plant pipx "$H/.local/share/pipx/venvs/black/bin/black"
plant applications "$H/.local/share/applications/evil.desktop"
plant claude-share "$H/.local/share/claude/versions/evil"
plant new-share-dir "$H/.local/share/newtool/run.sh"
plant pre-commit "$H/.cache/pre-commit/repoabc/hook"
plant gh-config "$H/.config/gh/config.yml"
plant glab-aliases "$H/.config/glab-cli/aliases.yml"
# tool configuration and startup files the host reads or runs (the home is a
# per-session tmpfs but for the bind-backs)
plant npmrc "$H/.npmrc"
plant pip-conf "$H/.config/pip/pip.conf"
plant pip-old "$H/.pip/pip.conf"
plant bashrc "$H/.bashrc"
plant bashrc-d "$H/.bashrc.d/evil.sh"
plant profile "$H/.profile"
plant zshrc "$H/.zshrc"
plant fish-config "$H/.config/fish/config.fish"
plant systemd-user "$H/.config/systemd/user/evil.service"
plant autostart "$H/.config/autostart/evil.desktop"
plant environment-d "$H/.config/environment.d/evil.conf"
plant ssh-config "$H/.ssh/config"
plant authorized-keys "$H/.ssh/authorized_keys"
plant git-xdg "$H/.config/git/config"
plant docker-config "$H/.docker/config.json"
plant ipython-startup "$H/.ipython/profile_default/startup/evil.py"
plant user-site-pth "$H/.local/lib/python3.12/site-packages/evil.pth"
plant cargo-bin "$H/.cargo/bin/cargo"
plant cargo-config "$H/.cargo/config.toml"
plant go-bin "$H/go/bin/evil"
plant nvim-init "$H/.config/nvim/init.lua"
plant vscode-settings "$H/.config/Code/User/settings.json"
plant vscode-extension "$H/.vscode/extensions/evil/package.json"
plant mise-global "$H/.config/mise/config.toml"
plant direnvrc "$H/.config/direnv/direnvrc"
plant tmux-conf "$H/.tmux.conf"
plant git-hook "$PWD/.git/hooks/pre-commit"
plant git-hooks-path "$PWD/.githooks/pre-commit"
git config core.fsmonitor 'echo PLANTED' 2>/dev/null && echo "plant git-config: landed" || echo "plant git-config: refused"
mv .git .git-moved 2>/dev/null && mv .git-moved .git && echo "plant git-rename: landed" || echo "plant git-rename: refused"
printf 'data\n' > "$H/.local/share/icons/data.png" && echo "data icons: ok"
printf 'data\n' > "$H/.cache/fontconfig/data" && echo "data cache: ok"
printf 'token: new\n' > "$H/.config/gh/hosts.yml" && echo "data gh-hosts: ok"
printf 'hosts: {}\n' > "$H/.config/glab-cli/config.yml" && echo "data glab-config: ok"
printf 'ok\n' > "$H/.local/share/uv/python/note" && cat "$H/.local/share/uv/python/note" >/dev/null && echo "session uv-python: ok"
cat "$H/.local/share/bash-completion/completions/host" >/dev/null 2>&1 && echo "read bash-completion: ok" || echo "read bash-completion: not shown"
printf 'data\n' > "$H/.cache/claude-cli-nodejs/data" && echo "data claude-cache: ok"
# git inside the workspace repository
git add -A . >/dev/null 2>&1
echo one > file && git add file && git commit -qm one && echo "git commit: ok"
git branch topic && echo "git branch: ok"
git stash list >/dev/null && echo change >> file && git stash -q && git stash pop -q && echo "git stash: ok"
git fetch -q origin && echo "git fetch: ok"
git push -q origin HEAD:refs/heads/from-sandbox && echo "git push: ok"
git push -q -u origin HEAD:refs/heads/upstream 2>/tmp/err; echo "git push -u: $? $(head -c 120 /tmp/err | tr '\n' ' ')"
git branch --set-upstream-to=origin/main topic >/dev/null 2>/tmp/err; echo "git branch --set-upstream-to: $? $(head -c 120 /tmp/err | tr '\n' ' ')"
git checkout -q -- file; git checkout -q -b tracked origin/main 2>/tmp/err; echo "git checkout -b tracking: $? $(head -c 160 /tmp/err | tr '\n' ' ')"
git checkout -q main 2>/dev/null
# a settings change that would run a command in an unwrapped Claude Code
printf '{"statusLine":{"type":"command","command":"~/.claude/status.sh"},"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"echo PLANTED"}]}]}}\n' > "$H/.claude/settings.json" && echo "data claude-settings: ok"
printf 'echo PLANTED\n' > "$H/.claude/status.sh" && echo "data claude-status-script: ok"
plant claude-local "$H/.claude/local/claude"
# a commondir cannot be blocked (it would need a file in the repository); it
# is reported ("." keeps this repository usable for the checks after)
printf '.\n' > .git/commondir && echo "plant git-commondir: landed"
exit 0
`

// surfaceHome builds a home and workspace repository as a host would have
// them, owned by uid.
func surfaceHome(t *testing.T, uid int) (home, ws, remote string) {
	t.Helper()
	home = testutil.MkdirFor(t, uid)
	ws = filepath.Join(home, "project")
	for _, d := range []string{".claude/local", ".cache/fontconfig", ".cache/pre-commit", ".cache/claude-cli-nodejs", ".local/bin",
		".local/share/icons", ".local/share/bash-completion/completions", ".local/share/uv/python", ".local/share/uv/tools",
		".local/share/nvim", ".config/gh", ".config/glab-cli", "project"} {
		must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
	}
	for f, s := range map[string]string{
		".local/bin/uv": "#!/bin/sh\necho host-uv\n", ".local/bin/uvx": "#!/bin/sh\necho host-uvx\n",
		".local/share/bash-completion/completions/host": "# host completion\n",
		".config/gh/config.yml":                         "git_protocol: https\n", ".config/gh/hosts.yml": "token: old\n",
		".config/glab-cli/config.yml": "hosts: {}\n", ".config/glab-cli/aliases.yml": "ci: pipeline ci\n",
		".claude/settings.json": `{"statusLine":{"type":"command","command":"~/.claude/status.sh"}}` + "\n",
		".claude/status.sh":     "#!/bin/sh\necho status\n",
		".claude/local/claude":  "#!/bin/sh\necho host-claude\n",
	} {
		must(t, os.WriteFile(filepath.Join(home, f), []byte(s), 0o755))
	}
	remote = filepath.Join(ws, "remote.git")
	for _, c := range [][]string{
		{"git", "init", "-q", "-b", "main", ws},
		{"git", "-C", ws, "config", "user.name", "T"},
		{"git", "-C", ws, "config", "user.email", "t@example.org"},
		{"git", "-C", ws, "config", "core.hooksPath", ".githooks"},
		{"git", "-C", ws, "commit", "-q", "--allow-empty", "-m", "init"},
		{"git", "init", "-q", "--bare", remote},
		{"git", "-C", ws, "remote", "add", "origin", remote},
		{"git", "-C", ws, "push", "-q", "origin", "main"},
		{"mkdir", "-p", filepath.Join(ws, ".githooks")},
		{"chown", "-R", fmt.Sprintf("%d:%d", uid, uid), home},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	return home, ws, remote
}

func surfaceEnv(home string) []string {
	return []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb", "GIT_AUTHOR_NAME=T"}
}

// Nothing a session writes in the places the host executes from lands on
// the host; data still does; git keeps working.
func TestShadowSurfaceNothingPlanted(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home, ws, remote := surfaceHome(t, uid)
			prelude, claude := shadowHost(t, "egress-jail = 0\n", plantClaude)
			r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			t.Logf("session:\n%s\nstderr:\n%s", r.Stdout, r.Stderr)
			out := r.Stdout
			for _, name := range []string{"uv", "uvx", "gh-config", "glab-aliases", "git-hook", "git-hooks-path", "git-config", "git-rename"} {
				if !strings.Contains(out, "plant "+name+": refused\n") {
					t.Errorf("planting %s was not refused inside:\n%s", name, out)
				}
			}
			// Issue 27: icons, fontconfig and bash-completion are not on
			// the list: empty inside, writes there stay in the session.
			for _, want := range []string{"data gh-hosts: ok", "data glab-config: ok",
				"session uv-python: ok", "read bash-completion: not shown", "data claude-cache: ok",
				"git commit: ok", "git branch: ok", "git stash: ok", "git fetch: ok", "git push: ok"} {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("missing %q inside:\n%s\nstderr: %s", want, out, r.Stderr)
				}
			}
			// On the host, after the session: no planted file anywhere.
			for _, rel := range []string{
				".local/share/bash-completion/completions/git", ".local/share/zsh", ".local/share/fish", ".local/share/direnv",
				".local/share/nvim/site", ".local/share/uv/tools/ruff", ".local/share/uv/python/cpython-3.12", ".local/share/uv/python/note",
				".local/share/pipx", ".local/share/applications", ".local/share/claude", ".local/share/newtool",
				".cache/pre-commit/repoabc", ".local/share/icons/data.png", ".cache/fontconfig/data", "project/.git/hooks/pre-commit", "project/.githooks/pre-commit", "project/.git-moved",
				".npmrc", ".config/pip/pip.conf", ".pip/pip.conf", ".bashrc", ".bashrc.d/evil.sh", ".profile", ".zshrc", ".config/fish/config.fish", ".config/systemd/user/evil.service", ".config/autostart/evil.desktop", ".config/environment.d/evil.conf", ".ssh/config", ".ssh/authorized_keys", ".config/git/config", ".docker/config.json", ".ipython/profile_default/startup/evil.py", ".local/lib/python3.12/site-packages/evil.pth", ".cargo/bin/cargo", ".cargo/config.toml", "go/bin/evil", ".config/nvim/init.lua", ".config/Code/User/settings.json", ".vscode/extensions/evil/package.json", ".config/mise/config.toml", ".config/direnv/direnvrc", ".tmux.conf",
			} {
				if _, err := os.Lstat(filepath.Join(home, rel)); err == nil {
					t.Errorf("~/%s landed on the host", rel)
				}
			}
			for rel, want := range map[string]string{
				".local/bin/uv": "#!/bin/sh\necho host-uv\n", ".local/bin/uvx": "#!/bin/sh\necho host-uvx\n",
				".claude/local/claude":  "#!/bin/sh\necho host-claude\n",
				".config/gh/config.yml": "git_protocol: https\n", ".config/glab-cli/aliases.yml": "ci: pipeline ci\n",
				// data lands where it is listed read-write
				".cache/claude-cli-nodejs/data": "data\n",
				".config/gh/hosts.yml":          "token: new\n", ".config/glab-cli/config.yml": "hosts: {}\n",
			} {
				if b, err := os.ReadFile(filepath.Join(home, rel)); err != nil || string(b) != want {
					t.Errorf("~/%s on the host is %q (%v), want %q", rel, b, err, want)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(ws, ".git/config")); strings.Contains(string(b), "fsmonitor") {
				t.Errorf("core.fsmonitor landed in the workspace's .git/config:\n%s", b)
			}
			// The commits reached the host repository and the remote.
			for _, c := range [][]string{{"git", "-c", "safe.directory=*", "-C", ws, "log", "-1", "--format=%s", "main"}, {"git", "-c", "safe.directory=*", "-C", remote, "log", "-1", "--format=%s", "from-sandbox"}} {
				if b, err := exec.Command(c[0], c[1:]...).Output(); err != nil || strings.TrimSpace(string(b)) != "one" {
					t.Errorf("%v: %q %v; want the commit made inside", c, b, err)
				}
			}
			// The settings change is reported, on stderr and in the log.
			if !strings.Contains(r.Stderr, ".git/commondir (added)") {
				t.Errorf("the planted .git/commondir was not reported: %s", r.Stderr)
			}
			if !strings.Contains(r.Stderr, ".claude/status.sh: (a script named by") {
				t.Errorf("the changed status line script was not reported: %s", r.Stderr)
			}
			if !strings.Contains(r.Stderr, "settings.json: hooks (added)") {
				t.Errorf("the planted hook in ~/.claude/settings.json was not reported: %s", r.Stderr)
			}
			if b, err := os.ReadFile(filepath.Join(home, ".local/state/claude-sandbox/changes.log")); err != nil || !strings.Contains(string(b), `settings.json","key":"hooks","change":"added"}`) {
				t.Errorf("change log: %q %v", b, err)
			}
		})
	}
}

// writable-git-hooks = 1 gives back the old behaviour: hooks and config
// writable from inside.
func TestShadowSurfaceWritableGitHooks(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home, ws, _ := surfaceHome(t, uid)
			prelude, claude := shadowHost(t, "egress-jail = 0\nwritable-git-hooks\n", plantClaude)
			r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			for _, name := range []string{"git-hook", "git-hooks-path", "git-config"} {
				if !strings.Contains(r.Stdout, "plant "+name+": landed\n") {
					t.Errorf("with writable-git-hooks, %s was refused: %v", name, r)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); err != nil {
				t.Errorf("with writable-git-hooks, the hook did not land: %v", err)
			}
		})
	}
}

// /tmp, /var/tmp and /dev/shm are refused as the workspace, with the fix,
// and no marker is left in the host's /tmp.
func TestShadowSurfaceSharedTmpRefused(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	home := testutil.MkdirFor(t, 0)
	prelude, claude := shadowHost(t, "egress-jail = 0\n", fakeClaude)
	_, markerBefore := os.Lstat("/tmp/.claude-sandbox")
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		r := runShadow(t, 0, home, d, prelude, claude, []string{"HOME=" + home, "PATH=/usr/bin:/bin"}, "-p", "x")
		if r.Code != 1 || !strings.Contains(r.Stderr, "refusing to make "+d+" writable") || !strings.Contains(r.Stderr, "workspace-root") || strings.Contains(r.Stdout, "args:") {
			t.Errorf("workspace %s: %v; want a refusal naming the fix, and nothing run", d, r)
		}
	}
	if _, err := os.Lstat("/tmp/.claude-sandbox"); markerBefore != nil && err == nil {
		t.Error("a /tmp/.claude-sandbox marker was left on the host")
	}
}

// persistProbeCases are TestProbesDetectEscapes' cases for the persistence
// probes (P70-P80): run outside any sandbox against a fixture home and
// workspace repository on a host filesystem, where every plant lands, so
// each probe must report ESCAPED.
func persistProbeCases(t *testing.T, vp string) map[string][]string {
	fixture := testutil.MkdirFor(t, 0)
	home, ws := filepath.Join(fixture, "home/u"), filepath.Join(fixture, "ws")
	must(t, os.MkdirAll(filepath.Join(home, ".local/bin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(fixture, "tmp"), 0o755))
	must(t, os.WriteFile(filepath.Join(home, ".local/bin/uv"), []byte("#!/bin/sh\n"), 0o755))
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	cases := map[string][]string{}
	for _, id := range []string{"P70", "P71", "P72", "P73", "P74", "P75", "P76", "P77", "P78", "P79"} {
		cases[id] = []string{vp, "-root", fixture, "-home", "/home/u", "-workspace", "/ws", id}
	}
	cases["P80"] = []string{vp, "-root", fixture, "-home", "/home/u", "-workspace", "/tmp", "P80"}
	return cases
}

// verify, inside the shadow over a home that has every place to plant:
// each persistence probe is BLOCKED; with writable-git-hooks, the git
// probes see the writable hooks and config and say ESCAPED.
func TestShadowSurfaceVerifyProbes(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	fake := "#!/bin/sh\nexec " + bin + " verify\n"
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home, ws, _ := surfaceHome(t, uid)
			for _, d := range []string{".local/share/direnv/allow", ".local/share/pipx/venvs", ".local/share/applications", ".cache/uv"} {
				must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
				must(t, os.Chown(filepath.Join(home, d), uid, uid))
			}
			prelude, claude := shadowHost(t, "egress-jail = 0\n", fake)
			r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			for _, id := range []string{"P70", "P71", "P72", "P73", "P74", "P75", "P76", "P77", "P78", "P79", "P80", "P81", "P82"} {
				if !strings.Contains(r.Stdout, id+"  BLOCKED") {
					t.Errorf("%s is not BLOCKED inside the shadow:\n%s", id, r.Stdout)
				}
			}
			t.Logf("inside:\n%s", r.Stdout)
			prelude, claude = shadowHost(t, "egress-jail = 0\nwritable-git-hooks = 1\n", fake)
			r = runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			for _, id := range []string{"P78", "P79"} {
				if !strings.Contains(r.Stdout, id+"  ESCAPED") {
					t.Errorf("with writable-git-hooks, %s does not see the escape:\n%s", id, r.Stdout)
				}
			}
			if !strings.Contains(r.Stdout, "RESULT: SANDBOX LEAKING") {
				t.Errorf("with writable-git-hooks, verify does not say LEAKING:\n%s", r.Stdout)
			}
		})
	}
}

// A ~/.claude linked to a shared directory (install --shared-config does
// that) and a ~/.cache on another path, both absolute symlinks: what is
// written inside lands in their targets, and the cache's executable
// entries stay per-session.
func TestShadowSurfaceSymlinkedBindBacks(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			shared := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{filepath.Join(shared, ".claude"), filepath.Join(shared, "cache/pre-commit"), filepath.Join(shared, "cache/claude-cli-nodejs"), ws} {
				must(t, os.MkdirAll(d, 0o755))
				must(t, os.Chown(d, uid, uid))
			}
			must(t, os.Symlink(filepath.Join(shared, ".claude"), filepath.Join(home, ".claude")))
			must(t, os.Symlink(filepath.Join(shared, "cache"), filepath.Join(home, ".cache")))
			fake := "#!/bin/sh\necho state > $HOME/.claude/state && echo data > $HOME/.cache/claude-cli-nodejs/x && echo planted > $HOME/.cache/pre-commit/hook && echo wrote\n"
			prelude, claude := shadowHost(t, "egress-jail = 0\n", fake)
			r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
			if r.Code != 0 || !strings.Contains(r.Stdout, "wrote") {
				t.Fatalf("shadow: %v", r)
			}
			for rel, want := range map[string]bool{".claude/state": true, "cache/claude-cli-nodejs/x": true, "cache/pre-commit/hook": false} {
				_, err := os.Stat(filepath.Join(shared, rel))
				if (err == nil) != want {
					t.Errorf("%s in the symlinks' target: exists=%v, want %v", rel, err == nil, want)
				}
			}
		})
	}
}

// Where the kernel refuses the per-session overlay (here: the host
// directory is already two overlays deep, the kernel's stacking limit),
// the directory is bound read-only instead, with a warning: writes there
// fail inside and nothing reaches the host.
func TestShadowSurfaceOverlayRefusedFallsBackReadOnly(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	home := testutil.MkdirFor(t, 0)
	scratch := testutil.MkdirFor(t, 0)
	ws := filepath.Join(home, "project")
	uv := filepath.Join(home, ".cache/uv")
	for _, d := range []string{ws, uv, "l1", "u1", "w1", "m1", "u2", "w2"} {
		if !filepath.IsAbs(d) {
			d = filepath.Join(scratch, d)
		}
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(scratch, "l1/host-file"), []byte("host\n"), 0o644))
	s := func(d string) string { return filepath.Join(scratch, d) }
	stack := fmt.Sprintf(" && mount -t overlay o1 -o lowerdir=%s,upperdir=%s,workdir=%s %s && mount -t overlay o2 -o lowerdir=%s,upperdir=%s,workdir=%s %s",
		s("l1"), s("u1"), s("w1"), s("m1"), s("m1"), s("u2"), s("w2"), uv)
	fake := "#!/bin/sh\ncat $HOME/.cache/uv/host-file && echo x > $HOME/.cache/uv/planted && echo landed || echo refused\n"
	prelude, claude := shadowHost(t, "egress-jail = 0\n", fake)
	r := runShadow(t, 0, home, ws, prelude+stack, claude, surfaceEnv(home), "-p", "x")
	if r.Code != 0 || !strings.Contains(r.Stdout, "host\nrefused\n") {
		t.Errorf("inside a read-only fallback, want the host's file readable and the write refused: %v", r)
	}
	if !strings.Contains(r.Stderr, "refused an overlay") || !strings.Contains(r.Stderr, "read-only instead") {
		t.Errorf("no warning about the fallback: %s", r.Stderr)
	}
	for _, d := range []string{"u1", "u2", "l1"} {
		if _, err := os.Stat(filepath.Join(scratch, d, "planted")); err == nil {
			t.Errorf("the write reached the host (%s)", d)
		}
	}
}
