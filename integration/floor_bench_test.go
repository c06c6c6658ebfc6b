package integration

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// BenchmarkGoProcessFloor prints what the smallest Go processes keep,
// the floor under issue 19's per-sandbox memory and thread targets (see
// docs/performance.md, "Issue 19's targets against this design's
// floor"): an idle program, one that catches the forwarded signals with
// os/signal (any per-sandbox process that passes signals on), and one
// that waits for a child in wait4 (a PID 1), each built like the shipped
// binary (static, stripped) and started CLAUDE_SANDBOX_BENCH_SANDBOXES
// times (10 by default here); then, for comparison, claude-sandbox's own
// launcher and init with no network (run --net=none -- sleep). Means per
// process. No packet is sent.
func BenchmarkGoProcessFloor(b *testing.B) {
	testutil.NeedsUserNS(b)
	n := 10
	if testing.Short() {
		n = 3
	}
	type kind struct {
		name string
		argv []string
	}
	kinds := []kind{
		{"idle", []string{testutil.Build(b, "./integration/testdata/floor/idle")}},
		{"signals", []string{testutil.Build(b, "./integration/testdata/floor/signals")}},
		{"waiter", []string{testutil.Build(b, "./integration/testdata/floor/waiter"), "/bin/sleep", "100000"}},
	}
	bin := testutil.Build(b, "./cmd/claude-sandbox")
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			// The whole group: the waiter's child (a sleep) outlives a
			// SIGKILL of the waiter alone, orphaned for 100000 s.
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
	}()
	start := func(argv []string) *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, killed whole
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, cmd)
		return cmd
	}
	byKind := map[string][]*exec.Cmd{}
	for _, k := range kinds {
		for i := 0; i < n; i++ {
			byKind[k.name] = append(byKind[k.name], start(k.argv))
		}
	}
	ours := &sandboxSet{name: "claude-sandbox --net=none"}
	for i := 0; i < n; i++ {
		c := start([]string{bin, "run", "--net=none", "--", "sleep", "100000"})
		ours.roots = append(ours.roots, []int{c.Process.Pid})
	}
	if err := ours.waitStarted(); err != nil {
		b.Fatal(err)
	}
	// As BenchmarkManySandboxes: let the starts settle, then measure.
	time.Sleep(2 * time.Second)
	for _, k := range kinds {
		var sum procMem
		for _, c := range byKind[k.name] {
			m, err := readProcMem(c.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			sum.anon += m.anon
			sum.pss += m.pss
			sum.threads += m.threads
		}
		anon := float64(sum.anon) / float64(n) / 1024
		threads := float64(sum.threads) / float64(n)
		b.Logf("%-8s %5.2f MB anonymous, %4.1f threads (mean of %d)", k.name, anon, threads, n)
		b.ReportMetric(anon, k.name+"-anon-MB")
		b.ReportMetric(threads, k.name+"-threads")
	}
	if err := ours.measure(); err != nil {
		b.Fatal(err)
	}
	ours.report(b, "cs-none")
	// The figures are of processes that sit idle: b.N repeats nothing.
	b.ReportMetric(0, "ns/op")
}
