package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// shadowConfs holds the configuration shadowHost gave each shadow (by its
// path), for runShadow's network check.
var shadowConfs sync.Map

// shadowHost prepares what `claude` (the shadow) needs, without touching
// the machine: a private mount namespace (entered by the returned prelude)
// in which /etc holds a copy of the host's /etc plus the given
// claude-sandbox.conf, and /usr/libexec/claude-sandbox/claude is the given
// real binary. It returns a shell prelude to run before the shadow, and
// the path of the shadow (the built binary under the name claude).
func shadowHost(t testing.TB, conf string, real string) (prelude, claude string) {
	t.Helper()
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	dir := testutil.MkdirFor(t, 0)
	claude = filepath.Join(dir, "bin", "claude")
	if err := os.MkdirAll(filepath.Dir(claude), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, claude); err != nil {
		t.Fatal(err)
	}
	etc, libexec := filepath.Join(dir, "etc"), filepath.Join(dir, "libexec")
	// The host's trees without what an install of claude-sandbox put
	// there: the fixture is the same on an installed machine.
	copyHostDir(t, "/etc", etc)
	copyHostDir(t, "/usr/libexec", libexec)
	if err := os.MkdirAll(filepath.Join(libexec, "claude-sandbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The copy's resolver is the lab's: a jailed launch in a lab must not
	// take this machine's resolver for its own.
	if err := os.Remove(filepath.Join(etc, "resolv.conf")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+labDNS+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if conf != "" {
		if err := os.WriteFile(filepath.Join(etc, "claude-sandbox.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if real != "" {
		if err := os.WriteFile(filepath.Join(libexec, "claude-sandbox", "claude"), []byte(real), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	prelude = fmt.Sprintf("mount --bind %s /etc && mkdir -p /usr/libexec 2>/dev/null; mount --bind %s /usr/libexec", etc, libexec)
	shadowConfs.Store(claude, conf)
	return prelude, claude
}

// shadowHostWith is shadowHost where the real binary is an existing host
// file (bound, not copied: the real CLI is large).
func shadowHostWith(t testing.TB, conf, realPath string) (prelude, claude string) {
	t.Helper()
	prelude, claude = shadowHost(t, conf, "#!/bin/sh\n")
	return prelude + fmt.Sprintf(" && mount --bind %s /usr/libexec/claude-sandbox/claude", realPath), claude
}

// fakeClaude stands in for the real binary: it reports what it sees.
const fakeClaude = `#!/bin/sh
echo "args: $*"
echo "exe: $0"
for v in IS_SANDBOX HOME USER GH_TOKEN ANTHROPIC_API_KEY SSH_AUTH_SOCK DISPLAY GIT_CONFIG_GLOBAL PATH EPICS_CA_ADDR_LIST; do
  eval "echo env:$v=\${$v-unset}"
done
echo "home: $(ls -A "$HOME" | tr '\n' ' ')"
echo "config: $(ls -A "$HOME/.config" 2>/dev/null | tr '\n' ' ')"
echo "git-name: $(git config user.name)"
echo "secret: $(cat "$HOME/.ssh/id_test" 2>&1 | head -c 60)"
touch "$PWD/written-inside" && echo "workspace-write: ok"
touch /usr/outside 2>/dev/null && echo "outside-write: ok" || echo "outside-write: refused"
exit 3
`

// runShadow runs `claude ARGS` through the shadow as uid, in a private
// mount namespace on the test's own network. So the shadow's
// configuration must turn the egress jail off (egress-jail = 0), or the
// shadow must not start a sandbox (IS_SANDBOX=1: it runs the real binary
// directly; a configuration the shadow refuses): a jailed shadow sends a
// DNS query at start, and runs in a lab network instead (as
// TestVerifyInsideSandbox's and the e2e tests do).
func runShadow(t *testing.T, uid int, home, cwd, prelude, claude string, env []string, args ...string) testutil.Result {
	t.Helper()
	return testutil.Run(t, shadowCmd(t, nil, uid, cwd, prelude, claude, env, args...))
}

// shadowCmd is runShadow's command (its network-safety check made),
// started through wrap (a program that runs the rest, such as
// rusageprobe) when wrap is given.
func shadowCmd(t *testing.T, wrap []string, uid int, cwd, prelude, claude string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	if v, ok := shadowConfs.Load(claude); ok && !slices.Contains(env, "IS_SANDBOX=1") {
		if c, err := shadow.ParseConfig("claude-sandbox.conf", strings.NewReader(v.(string))); err == nil && c.EgressJail {
			t.Fatalf("network safety: runShadow runs on the test's own network; a shadow with the egress jail on (configuration %q) must run in a lab network", v)
		}
	}
	inner := fmt.Sprintf("%s && cd %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s %s",
		prelude, cwd, uid, uid, strings.Join(env, " "), claude, strings.Join(args, " "))
	argv := append(slices.Clone(wrap), "unshare", "--mount", "--propagation", "private", "sh", "-c", inner)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	return cmd
}

func TestShadowLaunchesRealBinaryInSandbox(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{".ssh", ".claude", ".config/gh", ".config/Code", "project"} {
				if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(home, ".ssh", "id_test"), []byte("PRIVATE KEY"), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", uid, uid), home).CombinedOutput(); err != nil {
				t.Fatalf("chown: %v %s", err, out)
			}
			gitconfig := filepath.Join(home, ".gitconfig")
			if err := os.WriteFile(gitconfig, []byte("[user]\n\tname = Host Identity\n\temail = host@example.org\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			prelude, claude := shadowHost(t, "egress-jail = 0\npass-env = EPICS_CA_ADDR_LIST\n", fakeClaude)
			env := []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "GH_TOKEN=ghp_leak", "ANTHROPIC_API_KEY=sk-leak",
				"SSH_AUTH_SOCK=/tmp/agent", "DISPLAY=:0", "EPICS_CA_ADDR_LIST=10.1.2.3", "TERM=dumb"}
			r := runShadow(t, uid, home, ws, prelude, claude, env, "--chrome", "-p", "hi")
			if r.Code != 3 {
				t.Fatalf("shadow: %v, want the real binary's exit status 3", r)
			}
			out := r.Stdout
			for _, want := range []string{
				"args: --no-chrome -p hi\n",
				"exe: " + home + "/.local/bin/claude\n",
				"env:IS_SANDBOX=1\n", "env:HOME=" + home + "\n", "env:USER=tester\n",
				"env:GH_TOKEN=unset\n", "env:ANTHROPIC_API_KEY=unset\n", "env:SSH_AUTH_SOCK=unset\n", "env:DISPLAY=unset\n",
				"env:GIT_CONFIG_GLOBAL=" + home + "/.gitconfig\n",
				"env:PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + home + "/.local/bin\n",
				"env:EPICS_CA_ADDR_LIST=10.1.2.3\n",
				"git-name: Host Identity\n",
				"workspace-write: ok\n", "outside-write: refused\n",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("inside the shadow's sandbox, missing %q in:\n%s", want, out)
				}
			}
			if strings.Contains(out, "PRIVATE KEY") {
				t.Error("a secret from the host's home is readable inside")
			}
			if !strings.Contains(out, "config: gh glab-cli \n") {
				t.Errorf("~/.config inside must hold only the forge dirs: %s", out)
			}
			homeLine := out[strings.Index(out, "home: "):]
			homeLine = homeLine[:strings.Index(homeLine, "\n")]
			for _, e := range strings.Fields(strings.TrimPrefix(homeLine, "home: ")) {
				switch e {
				case ".claude", ".claude.json", ".config", ".local", ".gitconfig", ".netrc", ".Xauthority", ".ICEauthority", "project":
				default:
					t.Errorf("unexpected entry in the sandbox's home: %s (%s)", e, homeLine)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, "written-inside")); err != nil {
				t.Errorf("the workspace write did not land on the host: %v", err)
			}
			if _, err := os.Stat(filepath.Join(home, ".claude.json")); err != nil {
				t.Errorf("S4: ~/.claude.json was not created: %v", err)
			}
		})
	}
}

func TestShadowRefusesBadConfig(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	home := testutil.MkdirFor(t, 0)
	env := []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
	prelude, claude := shadowHost(t, "egress-jail = 0\nallow-ip = 10.1.2\n", fakeClaude)
	r := runShadow(t, 0, home, home, prelude, claude, env, "-p", "x")
	if r.Code != 1 || !strings.Contains(r.Stderr, "/etc/claude-sandbox.conf:2: allow-ip:") || strings.Contains(r.Stdout, "args:") {
		t.Errorf("malformed config: %v; want exit 1 naming file, line and key, and nothing run", r)
	}
	prelude, claude = shadowHost(t, "egress-jail = 0\n", fakeClaude)
	r = runShadow(t, 0, home, home, prelude+" && chmod 666 /etc/claude-sandbox.conf", claude, env, "-p", "x")
	if r.Code != 1 || !strings.Contains(r.Stderr, "writable by a user other than root") {
		t.Errorf("world-writable config: %v; want it refused", r)
	}
	prelude, claude = shadowHost(t, "egress-jail = 0\n", "")
	r = runShadow(t, 0, home, testutil.MkdirFor(t, 0), prelude, claude, env, "-p", "x")
	if r.Code != 1 || !strings.Contains(r.Stderr, "re-run the installer") {
		t.Errorf("missing real binary: %v; want exit 1 naming the fix", r)
	}
}

// Inside the sandbox (IS_SANDBOX=1), the shadow runs the real binary
// directly: no second sandbox.
func TestShadowRecursionGuard(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	home := testutil.MkdirFor(t, 0)
	prelude, claude := shadowHost(t, "", "#!/bin/sh\necho \"direct: $* ns=$(readlink /proc/self/ns/mnt)\"\n")
	r := runShadow(t, 0, home, "/var/tmp", prelude+" && readlink /proc/self/ns/mnt", claude, []string{"HOME=" + home, "IS_SANDBOX=1", "PATH=/usr/bin:/bin"}, "--chrome", "-p", "x")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], "direct: --no-chrome -p x ns="+lines[0]) {
		t.Errorf("recursion guard: %v; want the real binary run directly, in the caller's mount namespace, with --no-chrome", r)
	}
}
