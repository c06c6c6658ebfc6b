package integration

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/integration/mockapi"
	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// claudeCLIDir is where the tests keep their copy of the real Claude Code
// CLI (outside /tmp, which a sandbox replaces, so a sandboxed process can
// run it too).
const claudeCLIDir = "/var/cache/claude-sandbox-test/claude-cli"

var (
	claudeCLIOnce sync.Once
	claudeCLIPath string
	claudeCLIErr  error
)

// claudeCLI returns the path of the real CLI's executable, installing it
// with scripts/install-claude-cli.sh on first use (npm, once per test
// process). It skips the test (fails it when privileged tests are
// required) when the CLI cannot be had.
func claudeCLI(t *testing.T) string {
	t.Helper()
	claudeCLIOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		script := filepath.Join(testutil.RepoRoot(), "scripts", "install-claude-cli.sh")
		cmd := exec.CommandContext(ctx, script, claudeCLIDir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			claudeCLIErr = errors.New(err.Error() + "\n" + stderr.String())
			return
		}
		claudeCLIPath = strings.TrimSpace(string(out))
	})
	if claudeCLIErr != nil || claudeCLIPath == "" {
		msg := "the real Claude Code CLI is not installed (run scripts/install-claude-cli.sh " + claudeCLIDir + "): "
		if claudeCLIErr != nil {
			msg += claudeCLIErr.Error()
		}
		if testutil.RequirePrivileged() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return claudeCLIPath
}

// mockSession is one run of the real CLI against a scripted mock of the
// Messages API, both inside a network namespace that has nothing but
// loopback: the CLI cannot reach anything else.
type mockSession struct {
	t       *testing.T
	ns      *mockapi.Netns
	srv     *mockapi.Server
	baseURL string
	home    string // a scratch HOME for the CLI
	work    string // the CLI's working directory
}

func newMockSession(t *testing.T, script []string) *mockSession {
	t.Helper()
	testutil.NeedsRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("iproute2 is needed for the test network (scripts/test.sh installs it)")
	}
	ns, err := mockapi.NewNetns("cs-mockapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Close(); err != nil {
			t.Error(err)
		}
	})
	ln, err := ns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := mockapi.New(script)
	srv.Logf = t.Logf
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("mock API: %v", err)
		}
	})
	return &mockSession{
		t:       t,
		ns:      ns,
		srv:     srv,
		baseURL: "http://" + ln.Addr().String(),
		home:    testutil.MkdirFor(t, 0),
		work:    testutil.MkdirFor(t, 0),
	}
}

// claudeArgs are the flags of a non-interactive session that may run Bash
// without asking.
func claudeArgs(prompt string) []string {
	return []string{"-p", prompt, "--allowedTools", "Bash", "--dangerously-skip-permissions"}
}

// hideManagedSettings runs its arguments with an empty /etc/claude-code,
// in the mount namespace `ip netns exec` made for them (a slave of the
// host's: nothing reaches the host). A machine where claude-sandbox is
// installed has the integrity guard in its managed settings, whose gate
// would block the CLI these tests run directly; the tests must not depend
// on the host's policy either way.
const hideManagedSettings = `if [ -d /etc/claude-code ]; then mount -t tmpfs -o mode=0755 none /etc/claude-code || exit 125; fi; exec "$@"`

// run runs the CLI with env as its whole environment, in the session's
// namespace, and waits for it (bounded by ctx).
func (s *mockSession) run(ctx context.Context, cli string, env []string, args ...string) testutil.Result {
	s.t.Helper()
	cmd := s.ns.Command(ctx, append([]string{"/bin/sh", "-c", hideManagedSettings, "sh", cli}, args...)...)
	cmd.Env = env
	cmd.Dir = s.work
	cmd.Stdin = strings.NewReader("")
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	r := testutil.Run(s.t, cmd)
	s.t.Logf("claude exited after %v: %s", time.Since(start).Round(time.Millisecond), r)
	s.t.Logf("mock API request paths: %q", s.srv.Paths())
	if ctx.Err() != nil {
		s.t.Fatalf("claude did not finish in time: %v", ctx.Err())
	}
	return r
}

func TestRealClaudeWithMockAPI(t *testing.T) {
	testutil.NeedsRoot(t)
	cli := claudeCLI(t)

	// The CLI runs at all, cut off from every network.
	t.Run("version", func(t *testing.T) {
		s := newMockSession(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		env := append([]string{"HOME=" + s.home, "PATH=/usr/local/bin:/usr/bin:/bin"}, mockapi.Env(s.baseURL)...)
		r := s.run(ctx, cli, env, "--version")
		if r.Code != 0 || !regexp.MustCompile(`^\d+\.\d+\.\d+ \(Claude Code\)\n$`).MatchString(r.Stdout) {
			t.Fatalf("claude --version: %s", r)
		}
		if p := s.srv.Paths(); len(p) != 0 {
			t.Errorf("claude --version made requests: %q", p)
		}
	})

	script := []string{"echo hello-from-bash", "id -u", "pwd"}
	check := func(t *testing.T, s *mockSession, r testutil.Result) {
		t.Helper()
		if r.Code != 0 {
			t.Errorf("claude exited %d", r.Code)
		}
		select {
		case <-s.srv.Done():
		default:
			t.Errorf("the mock never sent its final answer")
		}
		got := s.srv.Results()
		t.Logf("tool results: %q", got)
		if len(got) != len(script) {
			t.Fatalf("got %d tool results, want %d: %q", len(got), len(script), got)
		}
		for i, want := range []string{"hello-from-bash", "0", s.work} {
			if strings.TrimSpace(got[i]) != want {
				t.Errorf("step %d (%s): result %q, want %q", i, script[i], got[i], want)
			}
			if s.srv.ResultIsError(i) {
				t.Errorf("step %d (%s): result flagged is_error", i, script[i])
			}
		}
		if !strings.Contains(r.Stdout, mockapi.FinalText) {
			t.Errorf("claude's output lacks the final answer %q", mockapi.FinalText)
		}
		for _, p := range s.srv.Paths() {
			if !strings.HasPrefix(p, "/v1/messages") {
				t.Logf("note: the CLI also requested %s", p)
			}
		}
	}

	// The mock's address and key in the CLI's environment.
	t.Run("env", func(t *testing.T) {
		s := newMockSession(t, script)
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		env := append([]string{"HOME=" + s.home, "PATH=/usr/local/bin:/usr/bin:/bin", "TERM=dumb"}, mockapi.Env(s.baseURL)...)
		r := s.run(ctx, cli, env, claudeArgs("Run the scripted commands.")...)
		check(t, s, r)
	})

	// Only in ~/.claude/settings.json: the environment holds nothing but
	// HOME and PATH (as in a sandbox, which clears it).
	t.Run("settings", func(t *testing.T) {
		s := newMockSession(t, script)
		if err := mockapi.WriteSettings(s.home, s.baseURL, -1, -1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		env := []string{"HOME=" + s.home, "PATH=/usr/local/bin:/usr/bin:/bin"}
		r := s.run(ctx, cli, env, claudeArgs("Run the scripted commands.")...)
		check(t, s, r)
	})
}
