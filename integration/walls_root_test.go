package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// The walls of issue 12 that concern the kernel: a root caller's /proc and
// /sys, cgroup hierarchies, the seccomp denylist, signals to PID 1 and the
// process limit. Each test tries the escape from inside and fails if it
// gets through.

// sysctlGuard saves the host's value of a sysctl and puts it back after
// the test if anything changed it. The probes only ever write a file's
// own content back, but a broken wall must not leave the host altered.
func sysctlGuard(t *testing.T, name string) {
	t.Helper()
	path := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read host %s: %v", name, err)
	}
	t.Cleanup(func() {
		after, err := os.ReadFile(path)
		if err == nil && string(after) != string(before) {
			t.Errorf("host %s changed from %q to %q; restoring", name, before, after)
			_ = os.WriteFile(path, before, 0)
		}
	})
}

// TestRootCallerSysctlWrite: a root caller's uid 0 inside is host uid 0;
// /proc/sys must still not be writable (kernel.core_pattern would run a
// program as real root on the host).
func TestRootCallerSysctlWrite(t *testing.T) {
	for _, name := range []string{"kernel.core_pattern", "kernel.randomize_va_space", "vm.overcommit_memory"} {
		sysctlGuard(t, name)
	}
	users(t, func(t *testing.T, s *sandbox) {
		for _, f := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/randomize_va_space", "/proc/sys/vm/overcommit_memory", "/proc/sysrq-trigger"} {
			got := s.probeOut(nil, "rewrite", f)
			if got == "ok" {
				t.Errorf("%s was writable inside: %s", f, got)
			}
		}
	})
}

// TestRootCallerProcCovers: the covers are in the plan (so embedders get
// them) for a root caller only, and the masked files read empty inside.
func TestRootCallerProcCovers(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		r := testutil.Run(t, testutil.As(s.uid, s.env(), s.bin, "plan", "--json", "--net=none", "--", "true"))
		if r.Code != 0 {
			t.Fatalf("plan: %v", r)
		}
		var p struct {
			HostRoot bool `json:"hostRoot"`
			Mounts   []struct {
				Kind, Dst string
			} `json:"mounts"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
			t.Fatal(err)
		}
		covers := map[string]string{}
		for _, m := range p.Mounts {
			// The cgroup op is every caller's base view, not a cover.
			if (strings.HasPrefix(m.Dst, "/proc/") || strings.HasPrefix(m.Dst, "/sys/")) && m.Kind != "cgroup" {
				covers[m.Dst] = m.Kind
			}
		}
		if s.uid != 0 {
			if p.HostRoot || len(covers) != 0 {
				t.Errorf("a non-root caller got covers (hostRoot %v): %v", p.HostRoot, covers)
			}
			return
		}
		if !p.HostRoot || covers["/proc/sys"] != "read-only" || covers["/proc/keys"] != "mask" || covers["/sys/firmware"] != "mask" {
			t.Errorf("root caller's plan lacks the covers (hostRoot %v): %v", p.HostRoot, covers)
		}
		out := s.sh("cat /proc/keys /proc/timer_list /proc/sched_debug 2>/dev/null | wc -c; ls -A /sys/firmware | wc -l")
		if strings.Fields(out)[0] != "0" || strings.Fields(out)[1] != "0" {
			t.Errorf("masked files show content inside: %q", out)
		}
	})
}

// TestRootCallerNestedSysfs: from a nested user + network namespace, a
// fresh sysfs (whose files belong to host root) must not be writable.
func TestRootCallerNestedSysfs(t *testing.T) {
	const f = "kernel/mm/ksm/pages_to_scan"
	if _, err := os.Stat("/sys/" + f); err != nil {
		t.Skipf("this kernel has no /sys/%s to try", f)
	}
	users(t, func(t *testing.T, s *sandbox) {
		if got := s.probeOut(nil, "rewrite", "/sys/"+f); got == "ok" {
			t.Errorf("/sys/%s writable inside", f)
		}
		r := s.run("--", s.probe, "nested-net", "mount-rewrite", "sysfs", "", f)
		if strings.HasPrefix(r.Stdout, "ok") {
			t.Errorf("a nested sysfs was writable: %v", r)
		}
	})
}

// TestRootCallerNestedCgroup: a nested user + cgroup namespace must not
// let a root caller mount a cgroup hierarchy and write the launcher's own
// limits (the files belong to host root).
func TestRootCallerNestedCgroup(t *testing.T) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	fstype, opts, file := "cgroup2", "", "cgroup.max.depth"
	if strings.Contains(string(b), " - cgroup cgroup ") && strings.Contains(string(b), "memory") {
		fstype, opts, file = "cgroup", "memory", "memory.limit_in_bytes"
	}
	users(t, func(t *testing.T, s *sandbox) {
		r := s.run("--", s.probe, "nested-cgroup", "mount-rewrite", fstype, opts, file)
		if strings.HasPrefix(r.Stdout, "ok") {
			t.Errorf("a nested %s hierarchy was writable: %v", fstype, r)
		}
		if s.uid == 0 && !strings.HasPrefix(r.Stdout, "err:EPERM") {
			t.Errorf("root caller: a new cgroup namespace should be refused with EPERM: %v", r)
		}
	})
}

// TestSeccompDenylist: io_uring and the keyring answer ENOSYS, for every
// caller, while ordinary programs keep working.
func TestSeccompDenylist(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		for _, c := range []string{"io_uring_setup", "keyctl"} {
			if got := s.probeOut(nil, c); got != "err:ENOSYS" {
				t.Errorf("%s inside: %s, want err:ENOSYS", c, got)
			}
		}
		// The workloads the denylist must not break.
		work := []string{"git --version", "python3 -c 'import subprocess,os; subprocess.run([\"true\"], check=True); os.listdir(\"/\")'"}
		if _, err := exec.LookPath("node"); err == nil {
			work = append(work, `node -e 'require("fs").readFile("/etc/hostname", (e) => { if (e) process.exit(3); require("child_process").execFileSync("true"); console.log("node ok") })'`)
		}
		for _, w := range work {
			if r := s.run("--", "/bin/sh", "-c", w); r.Code != 0 {
				t.Errorf("%s inside: %v", w, r)
			}
		}
	})
}

// TestNestedBwrapNonRoot: a non-root caller's sandbox keeps nested
// sandboxes working (Claude Code starts bwrap inside): no cover over its
// /proc, and the denylist spares what bwrap needs.
func TestNestedBwrapNonRoot(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bubblewrap is not installed")
	}
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	home := testutil.MkdirFor(t, testutil.Nobody)
	s := &sandbox{t: t, uid: testutil.Nobody, bin: bin, home: home}
	// bwrap's own init is PID 1 of its namespace, the shell PID 2.
	out := s.sh(bwrap + " --unshare-all --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp -- /bin/sh -c 'echo nested $$'")
	if strings.TrimSpace(out) != "nested 2" {
		t.Errorf("bwrap inside: %q, want \"nested 2\"", out)
	}
}

// TestPID1SurvivesSignals: every signal a process inside can send to the
// sandbox's init leaves it running, the command finishes normally with
// its own status, and no Go trace reaches the launcher's stderr.
func TestPID1SurvivesSignals(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		script := `for n in $(seq 1 64); do [ $n = 9 ] || [ $n = 19 ] || kill -$n 1 || echo "kill $n failed"; done; sleep 0.3; echo done; exit 7`
		r := s.run("--", "/bin/sh", "-c", script)
		if r.Code != 7 || strings.TrimSpace(r.Stdout) != "done" {
			t.Errorf("after signals to PID 1: %v, want exit 7 and \"done\"", r)
		}
		for _, bad := range []string{"goroutine", "SIGSEGV", "SIGQUIT", "panic", "PC="} {
			if strings.Contains(r.Stderr, bad) {
				t.Errorf("launcher stderr holds %q:\n%s", bad, r.Stderr)
			}
		}
	})
}

// TestSignalForwardingKept: the launcher still passes SIGTERM on to the
// command.
func TestSignalForwardingKept(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		c := s.cmd("--", "/bin/sh", "-c", `trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
		stdout, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(stdout)
		if line, err := br.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("no ready line: %q %v", line, err)
		}
		_ = c.Process.Signal(syscall.SIGTERM)
		rest, _ := io.ReadAll(br)
		err = c.Wait()
		if !strings.Contains(string(rest), "got-term") || c.ProcessState.ExitCode() != 3 {
			t.Errorf("SIGTERM to the launcher: output %q, %v; want got-term and exit 3", rest, err)
		}
	})
}

// TestPidsLimit: a fork bomb inside stops at the limit with EAGAIN, a
// nested PID namespace counts against it too, and the host can still
// fork.
func TestPidsLimit(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		const limit = 400
		r := s.run("--pids-limit", strconv.Itoa(limit), "--", s.probe, "forks", "2000")
		started, errLine := forkResult(t, r)
		if errLine != "err:EAGAIN" || started >= limit {
			t.Errorf("fork bomb under --pids-limit %d: started %d, %s; want fewer than %d and err:EAGAIN (%v)", limit, started, errLine, limit, r)
		}
		if s.uid != 0 {
			// A nested user + PID namespace of its own does not escape it.
			r = s.run("--pids-limit", strconv.Itoa(limit), "--", "unshare", "-Urpf", s.probe, "forks", "2000")
			started, errLine = forkResult(t, r)
			if errLine != "err:EAGAIN" || started >= limit {
				t.Errorf("nested PID namespace: started %d, %s; want fewer than %d and err:EAGAIN (%v)", started, errLine, limit, r)
			}
		}
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Errorf("the host cannot fork after the bomb: %v", err)
		}
	})
}

func forkResult(t *testing.T, r testutil.Result) (int, string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) < 2 {
		t.Fatalf("forks probe: %v", r)
	}
	var n int
	if _, err := fmt.Sscanf(lines[0], "started %d", &n); err != nil {
		t.Fatalf("forks probe: %v", r)
	}
	return n, lines[1]
}
