package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// manySandboxes is how many idle sandboxes BenchmarkManySandboxes keeps
// running: CLAUDE_SANDBOX_BENCH_SANDBOXES, 50 by default.
func manySandboxes(b *testing.B) int {
	n := 50
	if v := os.Getenv("CLAUDE_SANDBOX_BENCH_SANDBOXES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("CLAUDE_SANDBOX_BENCH_SANDBOXES=%q: want a count of at least 1", v)
		}
	}
	return n
}

// procInfo is one process of the host's /proc.
type procInfo struct {
	pid, ppid int
	comm      string
}

// procTable reads every process's parent and name.
func procTable() map[int]procInfo {
	ents, _ := os.ReadDir("/proc")
	t := make(map[int]procInfo, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		open, cl := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || cl < open {
			continue
		}
		f := strings.Fields(s[cl+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		t[pid] = procInfo{pid: pid, ppid: ppid, comm: s[open+1 : cl]}
	}
	return t
}

// sandboxProcs returns the processes of the sandbox rooted at roots (their
// descendants included) that are not the command, which is named cmd, nor
// its descendants; and whether the command is running yet. Each comes
// with its depth below its root.
func sandboxProcs(t map[int]procInfo, cmd string, roots ...int) (procs []procInfo, depth []int, started bool) {
	kids := map[int][]int{}
	for _, p := range t {
		kids[p.ppid] = append(kids[p.ppid], p.pid)
	}
	var walk func(pid, d int)
	walk = func(pid, d int) {
		p, ok := t[pid]
		if !ok {
			return
		}
		if p.comm == cmd {
			started = true
			return
		}
		procs = append(procs, p)
		depth = append(depth, d)
		for _, k := range kids[pid] {
			walk(k, d+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return procs, depth, started
}

// procMem is what one process costs: proportional and proportional
// anonymous memory (kB, /proc/PID/smaps_rollup) and threads.
type procMem struct {
	pss, anon, threads int
}

func readProcMem(pid int) (procMem, error) {
	var m procMem
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return m, err
	}
	haveAnon := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "Pss:":
			m.pss = v
		case "Pss_Anon:":
			m.anon, haveAnon = v, true
		case "Anonymous:":
			if !haveAnon {
				m.anon = v
			}
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			m.threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return m, nil
}

// sandboxSet is the idle sandboxes of one kind and what they cost.
type sandboxSet struct {
	name  string
	roots [][]int // each sandbox's root processes
	// totals over every sandbox, and by role (depth and name)
	total  procMem
	procs  int
	byRole map[string]*roleMem
}

type roleMem struct {
	procMem
	n int
}

// waitStarted waits until every sandbox runs its command (sleep).
func (s *sandboxSet) waitStarted() error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		t := procTable()
		pending := 0
		for _, r := range s.roots {
			if _, _, ok := sandboxProcs(t, "sleep", r...); !ok {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d sandboxes did not start their command", s.name, pending, len(s.roots))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// measure sums the memory and threads of every process of every sandbox
// but the command.
func (s *sandboxSet) measure() error {
	t := procTable()
	s.total, s.procs, s.byRole = procMem{}, 0, map[string]*roleMem{}
	for _, r := range s.roots {
		procs, depth, _ := sandboxProcs(t, "sleep", r...)
		for i, p := range procs {
			m, err := readProcMem(p.pid)
			if err != nil {
				return fmt.Errorf("%s: pid %d (%s): %v", s.name, p.pid, p.comm, err)
			}
			s.total.pss += m.pss
			s.total.anon += m.anon
			s.total.threads += m.threads
			s.procs++
			role := fmt.Sprintf("%d:%s", depth[i], p.comm)
			rm := s.byRole[role]
			if rm == nil {
				rm = &roleMem{}
				s.byRole[role] = rm
			}
			rm.pss += m.pss
			rm.anon += m.anon
			rm.threads += m.threads
			rm.n++
		}
	}
	return nil
}

func (s *sandboxSet) report(b *testing.B, prefix string) {
	n := float64(len(s.roots))
	b.ReportMetric(float64(s.total.pss)/1024/n, prefix+"-pss-MB/sandbox")
	b.ReportMetric(float64(s.total.anon)/1024/n, prefix+"-anon-MB/sandbox")
	b.ReportMetric(float64(s.total.threads)/n, prefix+"-threads/sandbox")
	b.ReportMetric(float64(s.procs)/n, prefix+"-procs/sandbox")
	roles := make([]string, 0, len(s.byRole))
	for r := range s.byRole {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	for _, r := range roles {
		rm := s.byRole[r]
		k := float64(rm.n)
		b.Logf("%s %-22s x%-3d pss %6.0f kB  anon %6.0f kB  threads %4.1f (means)", s.name, r, rm.n,
			float64(rm.pss)/k, float64(rm.anon)/k, float64(rm.threads)/k)
	}
}

// percentile returns the q-th percentile (nearest rank) of ds, in ms.
func percentile(ds []time.Duration, q float64) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(q*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return float64(s[i]) / float64(time.Millisecond)
}

// BenchmarkManySandboxes keeps many jailed sandboxes running `sleep`
// (CLAUDE_SANDBOX_BENCH_SANDBOXES, 50 by default), and as many bubblewrap
// sandboxes with slirp4netns, both in a lab network namespace of the
// benchmark's own (no packet is sent). It reports, for each kind, the
// proportional (PSS) and proportional anonymous memory and the threads of
// all the processes of one sandbox except the command (launcher and
// init; bwrap's two processes and slirp4netns), and the p50 and p99
// of b.N further launches of /bin/true with both sets running,
// interleaved. Figures only, no assertion.
func BenchmarkManySandboxes(b *testing.B) {
	testutil.NeedsRoot(b)
	testutil.NeedsUserNS(b)
	testutil.NeedsTUN(b)
	n := manySandboxes(b)
	bin := testutil.Build(b, "./cmd/claude-sandbox")
	bwrap := ensureBwrap(b)
	_, slirp := ensureNetPeers(b)
	l := newLab(b)
	logf, err := os.Create(filepath.Join(b.TempDir(), "sandboxes.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()

	ours := &sandboxSet{name: "claude-sandbox"}
	theirs := &sandboxSet{name: "bwrap+slirp4netns"}
	var oursCmds []*exec.Cmd
	var theirsRuns []*bwrapSlirp
	defer func() {
		for _, c := range oursCmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		for _, s := range theirsRuns {
			s.kill()
		}
	}()
	var oursTimes, theirsTimes []time.Duration
	err = testutil.InNetns(l.host, func() error {
		for i := 0; i < n; i++ {
			cmd := exec.Command(bin, "run", "--net=jail", "--", "sleep", "100000")
			cmd.Dir = "/"
			cmd.Stdout, cmd.Stderr = logf, logf
			if err := cmd.Start(); err != nil {
				return err
			}
			oursCmds = append(oursCmds, cmd)
			ours.roots = append(ours.roots, []int{cmd.Process.Pid})
			s, err := startBwrapSlirp(bwrap, slirp, []string{"--die-with-parent"}, "sleep", "100000")
			if err != nil {
				return err
			}
			theirsRuns = append(theirsRuns, s)
			theirs.roots = append(theirs.roots, []int{s.cmd.Process.Pid, s.slirp.Process.Pid})
		}
		for _, s := range []*sandboxSet{ours, theirs} {
			if err := s.waitStarted(); err != nil {
				logf.Sync()
				out, _ := os.ReadFile(logf.Name())
				return fmt.Errorf("%v\n%s", err, out)
			}
		}
		// Let the starts settle (a Go process's background work after
		// its setup), then measure.
		time.Sleep(2 * time.Second)
		for _, s := range []*sandboxSet{ours, theirs} {
			if err := s.measure(); err != nil {
				return err
			}
		}
		launchOurs := func() error {
			cmd := exec.Command(bin, "run", "--net=jail", "--", "/bin/true")
			cmd.Dir = "/"
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %v\n%s", cmd.Args, err, out)
			}
			return nil
		}
		launchTheirs := func() error {
			s, err := startBwrapSlirp(bwrap, slirp, nil, "/bin/true")
			if err != nil {
				return err
			}
			return s.wait()
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for _, r := range []struct {
				f     func() error
				times *[]time.Duration
			}{{launchOurs, &oursTimes}, {launchTheirs, &theirsTimes}} {
				t0 := time.Now()
				if err := r.f(); err != nil {
					return err
				}
				*r.times = append(*r.times, time.Since(t0))
			}
		}
		b.StopTimer()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d sandboxes of each kind running", n)
	ours.report(b, "cs")
	theirs.report(b, "bwrap")
	b.ReportMetric(percentile(oursTimes, 0.5), "cs-launch-p50-ms")
	b.ReportMetric(percentile(oursTimes, 0.99), "cs-launch-p99-ms")
	b.ReportMetric(percentile(theirsTimes, 0.5), "bwrap-launch-p50-ms")
	b.ReportMetric(percentile(theirsTimes, 0.99), "bwrap-launch-p99-ms")
	b.ReportMetric(0, "ns/op")
}
