package mockapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// DummyAPIKey is the API key the CLI is given: any non-empty value works,
// the mock never checks it.
const DummyAPIKey = "sk-ant-api03-mockapi-dummy-key"

// QuietEnv turns off everything the CLI would otherwise send besides its
// API calls (telemetry, error reports, update checks, ...).
// IS_SANDBOX=1 lets root use --dangerously-skip-permissions.
var QuietEnv = map[string]string{
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
	"DISABLE_TELEMETRY":                        "1",
	"DISABLE_ERROR_REPORTING":                  "1",
	"DISABLE_AUTOUPDATER":                      "1",
	"DISABLE_BUG_COMMAND":                      "1",
	"IS_SANDBOX":                               "1",
}

// EnvMap is what the CLI needs to talk to the mock at baseURL
// ("http://127.0.0.1:PORT"): QuietEnv plus ANTHROPIC_BASE_URL and
// ANTHROPIC_API_KEY.
func EnvMap(baseURL string) map[string]string {
	m := map[string]string{
		"ANTHROPIC_BASE_URL": baseURL,
		"ANTHROPIC_API_KEY":  DummyAPIKey,
	}
	for k, v := range QuietEnv {
		m[k] = v
	}
	return m
}

// Env is EnvMap as KEY=VALUE entries, for exec.Cmd.Env.
func Env(baseURL string) []string {
	var env []string
	for k, v := range EnvMap(baseURL) {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// WriteSettings writes (replaces) home/.claude/settings.json with
// EnvMap(baseURL) as its "env" map, so the CLI finds the mock, stays
// quiet and lets root skip permissions even when its environment has
// been cleared: the CLI applies that map to its own environment at
// startup (and its Bash tool's commands inherit it). It also writes
// home/.claude.json marking onboarding and the bypass-permissions
// warning as done: `claude -p` does not need that, an interactive
// session would otherwise stop at the first-run dialogs. uid and gid own
// what it creates (pass -1, -1 to leave ownership alone).
func WriteSettings(home, baseURL string, uid, gid int) error {
	dir := filepath.Join(home, ".claude")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	settings, err := json.MarshalIndent(map[string]any{"env": EnvMap(baseURL)}, "", "  ")
	if err != nil {
		return err
	}
	state, err := json.MarshalIndent(map[string]any{
		"hasCompletedOnboarding":        true,
		"bypassPermissionsModeAccepted": true,
	}, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		filepath.Join(dir, "settings.json"): settings,
		filepath.Join(home, ".claude.json"): state,
	}
	for p, b := range files {
		if err := os.WriteFile(p, append(b, '\n'), 0o600); err != nil {
			return err
		}
	}
	if uid >= 0 || gid >= 0 {
		for _, p := range []string{dir, filepath.Join(dir, "settings.json"), filepath.Join(home, ".claude.json")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// Netns is a network namespace holding nothing but a loopback interface:
// a process in it cannot reach any other network. It needs root and
// iproute2's ip.
type Netns struct {
	Name string
}

// NewNetns creates a fresh isolated namespace named prefix-RANDOM, with
// lo up. Close deletes it.
func NewNetns(prefix string) (*Netns, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := &Netns{Name: prefix + "-" + hex.EncodeToString(b)}
	if out, err := exec.Command("ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "-n", n.Name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		n.Close()
		return nil, fmt.Errorf("ip -n %s link set lo up: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return n, nil
}

// Close deletes the namespace.
func (n *Netns) Close() error {
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Listen opens a listener inside the namespace (e.g. "tcp",
// "127.0.0.1:0"): the socket stays in the namespace it was created in,
// whichever thread later accepts on it.
func (n *Netns) Listen(network, addr string) (l net.Listener, err error) {
	err = n.Do(func() error {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Do runs f on a thread switched into the namespace, then switches back.
// f must not start goroutines that expect to be in the namespace.
func (n *Netns) Do(f func() error) error { return testutil.InNetns(n.Name, f) }

// Command returns a command running argv inside the namespace (through
// `ip netns exec`, which also binds /etc/netns/NAME files if any).
func (n *Netns) Command(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}
