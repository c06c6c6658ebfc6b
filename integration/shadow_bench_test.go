package integration

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// realCLI returns the installed real Claude Code CLI, or "".
func realCLI() string {
	out, err := exec.Command("bash", testutil.RepoRoot()+"/scripts/install-claude-cli.sh", claudeCLIDir).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// BenchmarkShadowOverhead measures what the shadow adds to a launch:
// `claude --version` through the shadow (egress jail on, in the lab
// network) against the same real binary run directly, in one shell loop
// each so both pay the same process-start costs. The real Claude Code CLI
// is used when the test command installed it, /bin/true otherwise (the
// metric names say which). Target: under 25 ms added. Figures only.
func BenchmarkShadowOverhead(b *testing.B) {
	testutil.NeedsRoot(b)
	real, which := realCLI(), "claude"
	if real == "" {
		real, which = "/bin/true", "true"
	}
	l := newLab(b)
	prelude, claude := shadowHostWith(b, "", real)
	home := testutil.MkdirFor(b, 0)
	ws := testutil.MkdirFor(b, 0)
	n := 20
	script := fmt.Sprintf(`%s && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && cd %s && export HOME=%s &&
t0=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do /usr/libexec/claude-sandbox/claude --version >/dev/null || exit 1; i=$((i+1)); done
t1=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do %s --version >/dev/null || exit 1; i=$((i+1)); done
t2=$(date +%%s%%N); echo $((t1-t0)) $((t2-t1))`, prelude, ws, home, n, n, claude)
	var direct, shadowed float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("ip", "netns", "exec", l.host, "sh", "-c", script)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "IS_SANDBOX=", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		f := strings.Fields(string(out))
		if len(f) < 2 {
			b.Fatalf("unexpected output %q", out)
		}
		d, _ := strconv.ParseFloat(f[len(f)-2], 64)
		s, _ := strconv.ParseFloat(f[len(f)-1], 64)
		direct += d / float64(n) / 1e6
		shadowed += s / float64(n) / 1e6
	}
	b.StopTimer()
	direct /= float64(b.N)
	shadowed /= float64(b.N)
	b.ReportMetric(direct, which+"-direct-ms")
	b.ReportMetric(shadowed, which+"-shadow-ms")
	b.ReportMetric(shadowed-direct, "shadow-added-ms")
	b.ReportMetric(0, "ns/op")
}
