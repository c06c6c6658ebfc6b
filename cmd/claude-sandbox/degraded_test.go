package main

import (
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
)

func fakeSys(files map[string]string, env map[string]string) sysView {
	return sysView{
		exists:   func(p string) bool { _, ok := files[p]; return ok },
		readFile: func(p string) string { return files[p] },
		getenv:   func(k string) string { return env[k] },
	}
}

// The runtime is told from the usual signs.
func TestDetectRuntime(t *testing.T) {
	for _, c := range []struct {
		files map[string]string
		env   map[string]string
		want  runtimeKind
	}{
		{nil, nil, rtHost},
		{map[string]string{"/.dockerenv": ""}, nil, rtDocker},
		{map[string]string{"/run/.containerenv": ""}, nil, rtPodman},
		{nil, map[string]string{"container": "podman"}, rtPodman},
		{map[string]string{"/proc/1/cgroup": "0::/machine.slice/libpod-abc.scope\n"}, nil, rtPodman},
		{nil, map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, rtKubernetes},
		{map[string]string{"/.dockerenv": "", "/proc/1/cgroup": "0::/kubepods/burstable/pod1/abc\n"}, nil, rtKubernetes},
		{map[string]string{"/proc/1/cgroup": "0::/system.slice/containerd.service/x\n"}, nil, rtContainerd},
		{nil, map[string]string{"container": "lxc"}, rtOther},
	} {
		if got := detectRuntime(fakeSys(c.files, c.env)); got != c.want {
			t.Errorf("%v %v: %q, want %q", c.files, c.env, got, c.want)
		}
	}
}

// Each degraded mode's launch warning names the exact flag for the
// runtime; the /proc fallback never advises seccomp=unconfined (its cause
// is the masked /proc).
func TestWarningHints(t *testing.T) {
	proc := "a fresh /proc was refused (operation not permitted); bound the host's /proc read-only instead: host processes are visible inside"
	for _, c := range []struct {
		w    string
		rt   runtimeKind
		want string
	}{
		{proc, rtDocker, "--security-opt systempaths=unconfined"},
		{proc, rtPodman, "--security-opt unmask=ALL"},
		{proc, rtKubernetes, "procMount: Unmasked"},
		{"no process limit: kernel 6.1 keeps one pid_max", rtDocker, "--pids-limit"},
		{"no process limit: the sandbox's kernel.pid_max could not be written", rtHost, "non-root user"},
		{"egress jail: ping will not work inside (open /proc/sys/net/ipv4/ping_group_range: read-only file system)", rtPodman, "unmask=ALL"},
		{"egress jail: ping will not work inside (permission denied)", rtDocker, `--sysctl net.ipv4.ping_group_range="0 2147483647"`},
		{"egress jail: ping will not work inside (permission denied)", rtPodman, `--sysctl net.ipv4.ping_group_range="0 65535"`},
	} {
		got := warningHint(c.w, c.rt)
		if !strings.HasPrefix(got, "; to fix: ") || !strings.Contains(got, c.want) {
			t.Errorf("%q under %q: %q, want %q", c.w, c.rt, got, c.want)
		}
		if strings.Contains(c.w, "/proc was refused") && strings.Contains(got, "seccomp") {
			t.Errorf("the /proc fallback advises seccomp: %q", got)
		}
	}
	if got := warningHint("something else", rtDocker); got != "" {
		t.Errorf("an unrelated warning got %q", got)
	}
}

// pivot_root refused with EPERM in a container under a seccomp filter:
// the launch names the runtime's seccomp profile and the flag, not the
// missing capability; on a host, or without a filter, nothing is added.
func TestSetupHintPivotRoot(t *testing.T) {
	err := "start the sandbox: pivot_root into scratch /tmp: operation not permitted"
	filtered := fakeSys(map[string]string{"/proc/self/status": "Name:\tx\nSeccomp:\t2\n"}, nil)
	unfiltered := fakeSys(map[string]string{"/proc/self/status": "Name:\tx\nSeccomp:\t0\n"}, nil)
	if got := setupHint(err, rtDocker, filtered); !strings.Contains(got, "seccomp profile") || !strings.Contains(got, "--security-opt seccomp=unconfined") || !strings.Contains(got, "SYS_ADMIN") {
		t.Errorf("Docker: %q", got)
	}
	if got := setupHint(err, rtKubernetes, filtered); !strings.Contains(got, "seccompProfile.type: Unconfined") {
		t.Errorf("Kubernetes: %q", got)
	}
	if got := setupHint(err, rtHost, filtered); got != "" {
		t.Errorf("host: %q", got)
	}
	if got := setupHint(err, rtDocker, unfiltered); got != "" {
		t.Errorf("no seccomp filter in force: %q", got)
	}
	if got := setupHint("start the sandbox: exec: no such file", rtDocker, filtered); got != "" {
		t.Errorf("another failure: %q", got)
	}
}

func TestPingRangeProblem(t *testing.T) {
	if got := pingRangeProblem("1\t0\n", 0); !strings.Contains(got, "without group 0") {
		t.Errorf("off: %q", got)
	}
	if got := pingRangeProblem("0\t2147483647\n", 1000); got != "" {
		t.Errorf("every group: %q", got)
	}
}

// doctor's one process-limit line: a FIX when nsexec.PidsLimitKind finds
// no limit, and also when it finds one but the launch warned of none (the
// two used to be two lines); OK otherwise, whatever else was warned.
func TestPidsLimitFix(t *testing.T) {
	noLimit := nsexec.WarnNoPidsLimit + ": the sandbox's kernel.pid_max could not be written (read-only file system)\n"
	for _, c := range []struct {
		why, warnings string
		want          string
	}{
		{"no pids cgroup", "", "--pids-limit"},
		{"", noLimit, "the launch warned of it"},
		{"", mounts.WarnProcFallback + " (operation not permitted)\n", ""},
		{"", "", ""},
	} {
		got := pidsLimitFix(c.why, c.warnings, rtDocker)
		if c.want == "" && got != "" || c.want != "" && (!strings.Contains(got, c.want) || !strings.Contains(got, "fork bomb")) {
			t.Errorf("why %q, warnings %q: %q, want %q", c.why, c.warnings, got, c.want)
		}
	}
}
