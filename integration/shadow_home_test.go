package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// chownTree gives the trees at paths, and everything in them, to uid:uid
// (a fixture made as root for a session of uid). -h: a symlink in a tree
// is changed itself, its target never.
func chownTree(t *testing.T, uid int, paths ...string) {
	t.Helper()
	args := append([]string{"-R", "-h", fmt.Sprintf("%d:%d", uid, uid)}, paths...)
	if out, err := exec.Command("chown", args...).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
}

// twoSessionClaude is the real binary of the two-session attack: with a
// plant.sh in the workspace it runs it (session 1) and removes it;
// otherwise (session 2) it reports what it sees at the planted places.
const twoSessionClaude = `#!/bin/sh
if [ -f plant.sh ]; then sh ./plant.sh && rm -f plant.sh && echo planted; exit 0; fi
echo "mounts: $(awk -v p="$HOME/$(cat planted-at)" '$5 == p {print $5}' /proc/self/mountinfo | tr '\n' ' ')"
T=$(cat target); case "$T" in /*) ;; *) T="$HOME/$T";; esac
echo "count: $(awk -v p="$T" '$5 == p' /proc/self/mountinfo | wc -l)"
echo "secret: $(cat "$HOME/.claude/local/.ssh/id_test" "$HOME/.claude/local/private/python/token" "$HOME/.local/share/uv/python/token" 2>/dev/null)"
echo "procs: $(ls "$HOME/.claude/local" 2>/dev/null | grep -c '^[0-9]')"
exit 0
`

// Session 1 leaves a link for session 2 in a tree sessions write; session 2
// must see nothing of its target: no mount there, no host secret through
// it, and a warning. ~/.claude/local -> $HOME, /proc, /run, /etc, a
// relative link, and a nested one (~/.local/share/uv -> a private host
// directory while ~/.local/share is an allow-write tree, so the listed
// uv/python entry would be looked up through it). Without confine, seen
// failing: the real home's ~/.ssh/id_test and the private token were
// read through the overlay mounted at the link's target.
func TestShadowHomeLinkForNextSession(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		// at is where the planted link is, target where it leads inside.
		for _, tc := range []struct{ name, plant, conf, at, target string }{
			{"home", `ln -s "$HOME" "$HOME/.claude/local"`, "", ".claude/local", "."},
			{"proc", `ln -s /proc "$HOME/.claude/local"`, "", ".claude/local", "/proc"},
			{"run", `ln -s /run "$HOME/.claude/local"`, "", ".claude/local", "/run"},
			{"etc", `ln -s /etc "$HOME/.claude/local"`, "", ".claude/local", "/etc"},
			{"relative", `ln -s ../ "$HOME/.claude/local"`, "", ".claude/local", "."},
			{"nested", `rm -rf "$HOME/.local/share/uv" && ln -s "$HOME/private" "$HOME/.local/share/uv"`, "allow-write = HOME/.local/share\n", ".local/share/uv/python", ".local/share/uv/python"},
		} {
			t.Run(fmt.Sprintf("uid%d/%s", uid, tc.name), func(t *testing.T) {
				home := testutil.MkdirFor(t, uid)
				ws := filepath.Join(home, "project")
				for _, d := range []string{".claude", ".ssh", "private/python", ".local/share/uv/python", "project"} {
					must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
				}
				must(t, os.WriteFile(filepath.Join(home, ".ssh/id_test"), []byte("HOST-SSH-KEY\n"), 0o600))
				must(t, os.WriteFile(filepath.Join(home, "private/python/token"), []byte("HOST-TOKEN\n"), 0o600))
				must(t, os.WriteFile(filepath.Join(ws, "planted-at"), []byte(tc.at+"\n"), 0o644))
				must(t, os.WriteFile(filepath.Join(ws, "target"), []byte(tc.target+"\n"), 0o644))
				chownTree(t, uid, home)
				conf := "egress-jail = 0\n" + strings.ReplaceAll(tc.conf, "HOME", home)
				prelude, claude := shadowHost(t, conf, twoSessionClaude)
				// Session 0: how many mounts the link's target has anyway.
				r := runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
				baseline := ""
				for _, l := range strings.Split(r.Stdout, "\n") {
					if strings.HasPrefix(l, "count: ") {
						baseline = l
					}
				}
				if r.Code != 0 || baseline == "" {
					t.Fatalf("session 0: %v", r)
				}
				must(t, os.WriteFile(filepath.Join(ws, "plant.sh"), []byte(tc.plant+"\n"), 0o644))
				r = runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
				if r.Code != 0 || !strings.Contains(r.Stdout, "planted") {
					t.Fatalf("session 1: %v", r)
				}
				r = runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x")
				t.Logf("session 2: %s\nstderr: %s", r.Stdout, r.Stderr)
				if r.Code != 0 {
					t.Fatalf("session 2 did not start: %v", r)
				}
				if tc.name != "nested" && !strings.Contains(r.Stdout, baseline+"\n") {
					t.Errorf("a mount added at the link's target %s (before the link: %s):\n%s", tc.target, baseline, r.Stdout)
				}
				if !strings.Contains(r.Stdout, "mounts: \n") {
					t.Errorf("a mount at the planted link:\n%s", r.Stdout)
				}
				if !strings.Contains(r.Stdout, "secret: \n") {
					t.Errorf("a host secret read through the planted link:\n%s", r.Stdout)
				}
				if !strings.Contains(r.Stderr, "is a symbolic link in") {
					t.Errorf("no warning for the planted link: %s", r.Stderr)
				}
			})
		}
	}
}

// The link swapped in between the plan and the mount (a concurrent
// session): an exact overlay finds it when the sandbox is built and fails
// the launch; the same overlay without Exact follows it (the control).
// Made deterministic by planting the link before the launch. Seen
// following it (the victim's file read) with overlayExact disabled.
func TestAttackExactOverlayRefusesSwappedSymlink(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		base := testutil.MkdirFor(t, uid)
		tree, victim := base+"/tree", base+"/victim"
		must(t, os.MkdirAll(tree, 0o755))
		must(t, os.MkdirAll(victim, 0o755))
		must(t, os.WriteFile(victim+"/secret", []byte("VICTIM\n"), 0o644))
		// Relative: the control's plain overlay resolves its source by
		// name below the host root's mount point, where an absolute link
		// would miss.
		must(t, os.Symlink("../victim", tree+"/local"))
		chownTree(t, uid, base)
		for _, exact := range []bool{true, false} {
			dst := tree + "/local"
			p, err := plan.Build(plan.Options{
				Command: []string{"/bin/sh", "-c", "cat " + dst + "/secret"},
				UID:     uid, GID: uid, HostRoot: uid == 0, Net: plan.NetNone,
				Ops: []mounts.Op{{Kind: mounts.Overlay, Src: dst, Dst: dst, Exact: exact}},
			})
			if err != nil {
				t.Fatal(err)
			}
			r := runPlan(t, uid, p)
			read := strings.Contains(r.Stdout, "VICTIM")
			if exact && (read || r.Code == 0 || !strings.Contains(r.Stderr, "symlink appeared")) {
				t.Errorf("uid %d: an exact overlay through a swapped-in symlink: %v", uid, r)
			}
			if !exact && !read {
				t.Errorf("uid %d: control: a plain overlay should follow the symlink: %v", uid, r)
			}
		}
	}
}

// An exact overlay of a real directory works: the host's files are read,
// writes stay in the session.
func TestExactOverlayWorks(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		dir := testutil.MkdirFor(t, uid)
		must(t, os.WriteFile(dir+"/host", []byte("HOST\n"), 0o644))
		must(t, os.Chown(dir+"/host", uid, uid))
		p, err := plan.Build(plan.Options{
			Command: []string{"/bin/sh", "-c", "cat " + dir + "/host && echo x > " + dir + "/new && cat " + dir + "/new"},
			UID:     uid, GID: uid, HostRoot: uid == 0, Net: plan.NetNone,
			Ops: []mounts.Op{{Kind: mounts.Overlay, Src: dir, Dst: dir, Exact: true}},
		})
		if err != nil {
			t.Fatal(err)
		}
		r := runPlan(t, uid, p)
		if r.Code != 0 || r.Stdout != "HOST\nx\n" || strings.Contains(r.Stderr, "refused an overlay") {
			t.Errorf("uid %d: %v", uid, r)
		}
		if _, err := os.Stat(dir + "/new"); err == nil {
			t.Errorf("uid %d: the session's write reached the host", uid)
		}
	}
}

// homeProbeCases are TestProbesDetectEscapes' cases for P81 and P82: a
// fixture root where a link below ~/.claude leads to an overlay's mount
// point (what the two-session escape left: the overlay made at the
// link's target), and a Hugging Face token under ~/.cache.
func homeProbeCases(t *testing.T, vp string) map[string][]string {
	fixture := testutil.MkdirFor(t, 0)
	home := filepath.Join(fixture, "home/u")
	for _, d := range []string{".claude", ".cache/huggingface", "proc/self"} {
		dir := filepath.Join(home, d)
		if d == "proc/self" {
			dir = filepath.Join(fixture, d)
		}
		must(t, os.MkdirAll(dir, 0o755))
	}
	must(t, os.Symlink("/opt/x", filepath.Join(home, ".claude/local")))
	must(t, os.WriteFile(filepath.Join(fixture, "proc/self/mountinfo"), []byte(
		"20 1 0:20 / / ro - ext4 /dev/sda1 ro\n21 20 0:21 / /home/u rw - tmpfs tmpfs rw\n22 20 0:22 / /opt/x rw - overlay overlay rw,lowerdir=/secret\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(home, ".cache/huggingface/token"), []byte("hf_x\n"), 0o600))
	return map[string][]string{
		"P81": {vp, "-root", fixture, "-home", "/home/u", "P81"},
		"P82": {vp, "-root", fixture, "-home", "/home/u", "P82"},
	}
}

// denyClaude lists what the session sees of ~/.cache, ~/.local/share and
// ~/.npm, then waits for the host to create a socket in
// ~/.cache/git/credential (git's credential-cache daemon does that after
// launch) and reports whether it can see it.
const denyClaude = `#!/bin/sh
cd "$HOME" && find .cache .local/share .npm -mindepth 1 2>/dev/null | sort | sed 's/^/seen: /'
touch "$OLDPWD/ready"
while [ ! -e "$OLDPWD/go" ]; do sleep 0.05; done
if [ -e "$HOME/.cache/git/credential/socket" ]; then echo "socket: visible"; else echo "socket: absent"; fi
exit 0
`

// A home with the credentials and host-executed files issue 27 found
// under ~/.cache and ~/.local/share: inside the shadow, as root and as
// uid 65534, only the listed entries are there (and Claude Code's own
// two, empty), and a socket the host creates during the session in
// ~/.cache/git/credential is not. Fails without the deny-by-default
// list: every one of them was listed (bound back in bulk).
func TestShadowHomeDenyByDefault(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			files := map[string]string{
				".cache/huggingface/token":                        "hf_secret",
				".cache/p10k-instant-prompt-u.zsh":                "echo host-runs-this",
				".cache/black/24.1/cache.pickle":                  "pickle",
				".local/share/keyrings/login.keyring":             "secret",
				".local/share/python_keyring/keyring_pass.cfg":    "secret",
				".local/share/mkcert/rootCA-key.pem":              "KEY",
				".local/share/docker/containers/x/config.v2.json": "ENV",
				".local/share/fish/fish_history":                  "- cmd: export TOKEN=x",
				".local/share/cargo/bin/rg":                       "#!/bin/sh",
				".local/share/nautilus-python/extensions/x.py":    "import os",
				".cache/uv/wheels/x.whl":                          "wheel",
				".local/share/uv/python/cpython/bin/python3":      "#!/bin/sh",
				".local/share/uv/credentials/credentials.toml":    "secret",
				".npm/_cacache/index":                             "npm",
				".cache/claude-cli-nodejs/log":                    "log",
			}
			must(t, os.MkdirAll(ws, 0o755))
			must(t, os.MkdirAll(filepath.Join(home, ".cache/git/credential"), 0o700))
			for rel, data := range files {
				must(t, os.MkdirAll(filepath.Dir(filepath.Join(home, rel)), 0o755))
				must(t, os.WriteFile(filepath.Join(home, rel), []byte(data), 0o600))
			}
			chownTree(t, uid, home)
			prelude, claude := shadowHost(t, "egress-jail = 0\n", denyClaude)
			done := make(chan testutil.Result, 1)
			go func() { done <- runShadow(t, uid, home, ws, prelude, claude, surfaceEnv(home), "-p", "x") }()
			var r testutil.Result
			for {
				if _, err := os.Stat(filepath.Join(ws, "ready")); err == nil {
					break
				}
				select {
				case r = <-done:
					t.Fatalf("the session ended before it was ready: %v", r)
				default:
				}
				exec.Command("sleep", "0.05").Run()
			}
			ln, err := net.Listen("unix", filepath.Join(home, ".cache/git/credential/socket"))
			must(t, err)
			defer ln.Close()
			must(t, os.WriteFile(filepath.Join(ws, "go"), nil, 0o644))
			r = <-done
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			var seen []string
			for _, l := range strings.Split(r.Stdout, "\n") {
				if s, ok := strings.CutPrefix(l, "seen: "); ok {
					seen = append(seen, s)
				}
			}
			want := []string{".cache/claude-cli-nodejs", ".cache/claude-cli-nodejs/log", ".cache/uv", ".cache/uv/wheels", ".cache/uv/wheels/x.whl",
				".local/share/applications", ".local/share/claude", ".local/share/uv", ".local/share/uv/python", ".local/share/uv/python/cpython",
				".local/share/uv/python/cpython/bin", ".local/share/uv/python/cpython/bin/python3", ".npm/_cacache", ".npm/_cacache/index"}
			if strings.Join(seen, "\n") != strings.Join(want, "\n") {
				t.Errorf("seen inside:\n%s\nwant:\n%s\nstderr: %s", strings.Join(seen, "\n"), strings.Join(want, "\n"), r.Stderr)
			}
			if !strings.Contains(r.Stdout, "socket: absent\n") {
				t.Errorf("the host's socket born during the session is visible inside:\n%s", r.Stdout)
			}
		})
	}
}
