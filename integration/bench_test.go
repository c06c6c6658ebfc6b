package integration

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// ensureBwrap installs Debian's bubblewrap for the comparison when it is
// missing (root only), and returns its path.
func ensureBwrap(b *testing.B) string {
	if p, err := exec.LookPath("bwrap"); err == nil {
		return p
	}
	testutil.NeedsRoot(b)
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "bubblewrap"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("apt-get %v: %v\n%s", args, err, out)
		}
	}
	p, err := exec.LookPath("bwrap")
	if err != nil {
		b.Fatal("bubblewrap installed but bwrap not found")
	}
	return p
}

// BenchmarkLaunch measures the launch time of a sandboxed /bin/true with
// claude-sandbox and with bubblewrap, interleaved in the same run so both
// see the same machine state, and reports each mean and their ratio.
// Target: claude-sandbox within 1.5x of bwrap. Figures only, no assertion.
func BenchmarkLaunch(b *testing.B) {
	testutil.NeedsUserNS(b)
	bin := testutil.Build(b, "./cmd/claude-sandbox")
	bwrap := ensureBwrap(b)
	ours := []string{bin, "run", "--net=none", "--", "/bin/true"}
	theirs := []string{bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--", "/bin/true"}
	run := func(argv []string) time.Duration {
		t0 := time.Now()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = "/"
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return time.Since(t0)
	}
	run(ours) // warm the page cache for both
	run(theirs)
	var sumOurs, sumTheirs time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sumOurs += run(ours)
		sumTheirs += run(theirs)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / float64(time.Millisecond) }
	b.ReportMetric(ms(sumOurs), "claude-sandbox-ms")
	b.ReportMetric(ms(sumTheirs), "bwrap-ms")
	b.ReportMetric(float64(sumOurs)/float64(sumTheirs), "ratio")
	b.ReportMetric(0, "ns/op")
}
