package integration

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// BenchmarkFlowOwnerCPS measures the jail's TCP connection rate (the
// netbench client's cps step against the lab's greeting server) without
// and with --audit-log, which looks up the process behind every flow let
// through. Every packet stays in the lab's namespaces. Figures only; run
// with -benchtime Nx: N launches each, interleaved, medians reported.
// CLAUDE_SANDBOX_BENCH_BASE, when set, names another claude-sandbox
// binary (one built before the change) measured too, audit log off.
func BenchmarkFlowOwnerCPS(b *testing.B) {
	testutil.NeedsRoot(b)
	testutil.NeedsUserNS(b)
	testutil.NeedsTUN(b)
	bin := testutil.Build(b, "./cmd/claude-sandbox")
	client := testutil.Build(b, "./integration/netbench")
	l := newLab(b)
	l.benchServers(b)
	if out, err := exec.Command("ip", "netns", "exec", l.host, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1").CombinedOutput(); err != nil {
		b.Fatalf("sysctl tcp_tw_reuse: %v\n%s", err, out)
	}
	dir := testutil.MkdirFor(b, 0)
	base := os.Getenv("CLAUDE_SANDBOX_BENCH_BASE")
	run := func(opts ...string) (float64, float64) {
		exe := bin
		if len(opts) > 0 && opts[0] == "base" {
			exe, opts = base, opts[1:]
		}
		argv := append(append([]string{"run"}, opts...), "--", client, "cps", net.JoinHostPort(labInternet, nbGreet), netbenchCPS)
		out, err := l.jailCmd(0, exe, argv...).Output()
		if err != nil {
			b.Fatalf("%v: %v\n%s", argv, err, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			// "cps ADDR RATE FAILED P50 P99 MAX"
			f := strings.Fields(sc.Text())
			if len(f) == 7 && f[0] == "cps" {
				rate, _ := strconv.ParseFloat(f[2], 64)
				p50, _ := strconv.ParseFloat(f[4], 64)
				return rate, p50
			}
		}
		b.Fatalf("no cps figure in %q", out)
		return 0, 0
	}
	var off, on, offP50, onP50, was, wasP50, wasOn, wasOnP50 []float64
	for i := 0; i < b.N; i++ {
		if base != "" {
			r, p := run("base")
			was, wasP50 = append(was, r), append(wasP50, p)
			r, p = run("base", "--audit-log", filepath.Join(dir, "base-audit-"+strconv.Itoa(i)+".jsonl"))
			wasOn, wasOnP50 = append(wasOn, r), append(wasOnP50, p)
		}
		r, p := run()
		off, offP50 = append(off, r), append(offP50, p)
		r, p = run("--audit-log", filepath.Join(dir, "audit-"+strconv.Itoa(i)+".jsonl"))
		on, onP50 = append(on, r), append(onP50, p)
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	if base != "" {
		b.ReportMetric(med(was), "base-conn/s")
		b.Logf("the base binary: audit log off %.0f (p50 %.0f us), on %.0f (p50 %.0f us); off runs %v, on runs %v", med(was), med(wasP50), med(wasOn), med(wasOnP50), was, wasOn)
	}
	b.ReportMetric(med(off), "off-conn/s")
	b.ReportMetric(med(on), "audit-conn/s")
	b.Logf("connections a second (median of %d launches, %s connections each): audit log off %.0f (p50 %.0f us), on %.0f (p50 %.0f us); off runs %v, on runs %v", b.N, netbenchCPS, med(off), med(offP50), med(on), med(onP50), off, on)
}
