package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/integration/mockapi"
	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// The real Claude Code CLI, launched as a plain `claude` through the shadow
// with the egress jail on, in the lab network, driven by a mock Messages
// API on a TEST-NET "internet" address. The mock makes the agent run Bash
// commands, and reads back what they printed: the proof comes from inside
// the agent's own tool execution.
func TestClaudeEndToEnd(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	cli := claudeCLI(t)
	// The installed claude-sandbox, as the agent would run it from the
	// session (the shadow's `claude` is a link to this same binary).
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			l := newLab(t)
			l.echoTCP(l.world, labDevice+":22")
			const apiPort = "8080"
			base := "http://" + labInternet + ":" + apiPort

			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{".ssh", "project", ".config/Code"} {
				if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(home, ".ssh", "id_test"), []byte("PRIVATE-KEY-MATERIAL"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := mockapi.WriteSettings(home, base, uid, uid); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", uid, uid), home).CombinedOutput(); err != nil {
				t.Fatalf("chown: %v %s", err, out)
			}

			script := []string{
				`ls -A ~ | tr '\n' ' '`,
				`cat ~/.ssh/id_test 2>&1; echo "GH=${GH_TOKEN:-unset}"`,
				`echo "IS_SANDBOX=$IS_SANDBOX"`,
				`touch /usr/claude-e2e 2>/dev/null && echo outside-written || echo outside-refused; touch ./e2e-inside && echo inside-ok`,
				`timeout 5 bash -c 'echo > /dev/tcp/` + labDevice + `/22' 2>/dev/null && echo lab-open || echo lab-blocked`,
				`timeout 5 bash -c 'echo > /dev/tcp/` + labInternet + `/` + apiPort + `' 2>/dev/null && echo api-open || echo api-blocked`,
				// verify from the agent's own Bash tool: every line that is
				// not PASS or BLOCKED (so the result stays short), then the
				// exit status. A false alarm here is a bug.
				bin + ` verify > /tmp/verify.out 2>&1; echo "verify-exit=$?"; grep -Ev '^[VP][0-9]+ +(PASS|BLOCKED) ' /tmp/verify.out`,
			}
			srv := mockapi.New(script)
			srv.Logf = t.Logf
			var ln net.Listener
			if err := inNetns(l.world, func() (err error) { ln, err = net.Listen("tcp", labInternet+":"+apiPort); return }); err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })

			prelude, claude := shadowHostWith(t, "", cli)
			env := []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "GH_TOKEN=ghp_host_secret", "TERM=dumb"}
			inner := fmt.Sprintf("%s && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && cd %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s -p 'Run the scripted commands.' --allowedTools Bash --dangerously-skip-permissions",
				prelude, ws, uid, uid, strings.Join(env, " "), claude)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "ip", "netns", "exec", l.host, "sh", "-c", inner)
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
			r := testutil.Run(t, cmd)
			res := srv.Results()
			t.Logf("tool results from inside the agent: %q", res)
			if r.Code != 0 || len(res) != len(script) {
				t.Fatalf("claude through the shadow: %v\nresults %q\npaths %q", r, res, srv.Paths())
			}
			for _, e := range strings.Fields(res[0]) {
				switch {
				case strings.HasPrefix(e, ".claude.json.tmp.") || e == ".claude.json.lock":
					// Claude Code's own files while it updates
					// ~/.claude.json, in the sandbox's empty home.
				case e == ".claude" || e == ".claude.json" || e == ".config" || e == ".local" || e == ".gitconfig" ||
					e == ".netrc" || e == ".Xauthority" || e == ".ICEauthority" || e == "project" || e == ".cache":
				default:
					t.Errorf("the agent's home holds %q, not on the allowlist (%q)", e, res[0])
				}
			}
			if strings.Contains(res[1], "PRIVATE-KEY-MATERIAL") || !strings.Contains(res[1], "GH=unset") {
				t.Errorf("host secrets visible to the agent: %q", res[1])
			}
			if !strings.Contains(res[2], "IS_SANDBOX=1") {
				t.Errorf("sandbox marker: %q", res[2])
			}
			if !strings.Contains(res[3], "outside-refused") || !strings.Contains(res[3], "inside-ok") {
				t.Errorf("writes: %q", res[3])
			}
			if _, err := os.Stat(filepath.Join(ws, "e2e-inside")); err != nil {
				t.Errorf("the agent's workspace write did not land on the host: %v", err)
			}
			if _, err := os.Stat("/usr/claude-e2e"); err == nil {
				os.Remove("/usr/claude-e2e")
				t.Error("the agent wrote under /usr on the host")
			}
			if !strings.Contains(res[4], "lab-blocked") {
				t.Errorf("the lab device: %q, want blocked", res[4])
			}
			if !strings.Contains(res[5], "api-open") {
				t.Errorf("the API host itself: %q, want reachable", res[5])
			}
			if v := res[6]; !strings.Contains(v, "verify-exit=0") || !strings.Contains(v, "RESULT: SANDBOX OK") ||
				strings.Contains(v, "ESCAPED") || strings.Contains(v, "LEAKING") || strings.Contains(v, " FAIL ") {
				t.Errorf("claude-sandbox verify in the real Claude Code session (uid %d) raised an alarm:\n%s", uid, v)
			}
			if !strings.Contains(r.Stderr, "blocked") || !strings.Contains(r.Stderr, labDevice) {
				t.Errorf("the launch's block summary does not name the lab device: %q", r.Stderr)
			}
		})
	}
}

// `claude --version` through the shadow prints the real binary's version.
func TestClaudeVersionThroughShadow(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	cli := claudeCLI(t)
	l := newLab(t)
	direct, err := exec.Command(cli, "--version").Output()
	if err != nil || !strings.Contains(string(direct), "Claude Code") {
		t.Fatalf("the real CLI's own --version: %q %v", direct, err)
	}
	prelude, claude := shadowHostWith(t, "", cli)
	home := testutil.MkdirFor(t, 0)
	ws := testutil.MkdirFor(t, 0)
	inner := fmt.Sprintf("%s && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && cd %s && HOME=%s exec %s --version", prelude, ws, home, claude)
	cmd := exec.Command("ip", "netns", "exec", l.host, "sh", "-c", inner)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	r := testutil.Run(t, cmd)
	if r.Code != 0 || r.Stdout != string(direct) {
		t.Errorf("claude --version through the shadow: %v; want %q", r, direct)
	}
}

// The integrity guard with the real CLI: claude-sandbox is installed for
// real (install, at /) into a throwaway view of the system (a mount
// namespace of the test's own, over copies of /etc, /usr/libexec and
// /usr/local/bin). The real binary run directly, outside the shadow, has
// its prompt blocked by the gate hook before any request reaches the API;
// the same prompt through the shadow goes through.
func TestGuardWithRealClaude(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	cli := claudeCLI(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	l := newLab(t)
	const apiPort = "8081"
	base := "http://" + labInternet + ":" + apiPort

	view := testutil.MkdirFor(t, 0)
	var binds []string
	for _, d := range []string{"/etc", "/usr/libexec", "/usr/local/bin"} {
		c := filepath.Join(view, strings.ReplaceAll(d, "/", "_"))
		// Without a host install's files: this test installs its own.
		copyHostDir(t, d, c)
		binds = append(binds, fmt.Sprintf("mkdir -p %s && mount --bind %s %s", d, c, d))
	}
	// The real binary as the Claude Code installer leaves it (a hard link:
	// install moves it away).
	realCopy := filepath.Join(view, "claude-real")
	if exec.Command("cp", "-l", cli, realCopy).Run() != nil {
		if out, err := exec.Command("cp", cli, realCopy).CombinedOutput(); err != nil {
			t.Fatalf("copy the CLI: %v %s", err, out)
		}
	}
	home := testutil.MkdirFor(t, 0)
	ws := filepath.Join(home, "project")
	must(t, os.MkdirAll(ws, 0o755))
	if err := mockapi.WriteSettings(home, base, 0, 0); err != nil {
		t.Fatal(err)
	}

	session := func(claude string) (*mockapi.Server, testutil.Result) {
		srv := mockapi.New([]string{"echo hook-passed"})
		var ln net.Listener
		if err := inNetns(l.world, func() (err error) { ln, err = net.Listen("tcp", labInternet+":"+apiPort); return }); err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		script := strings.Join(binds, " && ") + fmt.Sprintf(
			" && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200"+
				" && (test -e /usr/libexec/claude-sandbox/claude || %s install --real %s --skip-checks >/dev/null)"+
				" && cd %s && exec env -i HOME=%s USER=root PATH=/usr/local/bin:/usr/bin:/bin %s -p 'Run the scripted commands.' --allowedTools Bash --dangerously-skip-permissions",
			bin, realCopy, ws, home, claude)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", l.host, "sh", "-c", script)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		return srv, testutil.Run(t, cmd)
	}
	// Outside the shadow: the real binary, installed off PATH, run by
	// its path. Its settings.json even claims IS_SANDBOX=1.
	srv, r := session("/usr/libexec/claude-sandbox/claude")
	agentic := 0
	for _, req := range srv.Requests() {
		if req.Agentic {
			agentic++
		}
	}
	t.Logf("outside the shadow: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	if agentic != 0 || !strings.Contains(r.Stdout+r.Stderr, "BLOCKED") {
		t.Errorf("claude outside the shadow: %d prompts reached the API; output %v; want it blocked by the gate", agentic, r)
	}
	// Through the shadow (plain `claude` on PATH): the prompt goes through.
	srv, r = session("claude")
	if res := srv.Results(); r.Code != 0 || len(res) != 1 || !strings.Contains(res[0], "hook-passed") {
		t.Errorf("claude through the shadow: %v, results %q; want the session to run", r, res)
	}
}
