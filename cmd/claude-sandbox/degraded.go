package main

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/jail/netchild"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
)

// The sandbox runs at full strength, or in a degraded mode that a
// container runtime's defaults cause: each has a cost and one flag that
// removes it, which depends on the runtime. doctor names them as FIX
// lines, and the launch's warnings and setup failures end with them.

// runtimeKind is the container runtime this process runs under ("" on a
// host).
type runtimeKind string

const (
	rtHost       runtimeKind = ""
	rtDocker     runtimeKind = "Docker"
	rtPodman     runtimeKind = "Podman"
	rtKubernetes runtimeKind = "Kubernetes"
	rtContainerd runtimeKind = "containerd"
	rtOther      runtimeKind = "a container"
)

// sysView is what runtime detection reads (the real system, or a test's).
type sysView struct {
	exists   func(string) bool
	readFile func(string) string
	getenv   func(string) string
}

var realSys = sysView{
	exists:   func(p string) bool { _, err := os.Lstat(p); return err == nil },
	readFile: func(p string) string { b, _ := os.ReadFile(p); return string(b) },
	getenv:   os.Getenv,
}

// detectRuntime tells the container runtime from the usual signs:
// Kubernetes' service variables and account mount, Podman's
// /run/.containerenv, Docker's /.dockerenv, the container variable, and
// the names in /proc/1/cgroup (kubepods, libpod, docker, containerd).
func detectRuntime(s sysView) runtimeKind {
	cg := s.readFile("/proc/1/cgroup") + s.readFile("/proc/self/cgroup")
	switch {
	case s.getenv("KUBERNETES_SERVICE_HOST") != "" || s.exists("/var/run/secrets/kubernetes.io") || strings.Contains(cg, "kubepods"):
		return rtKubernetes
	case s.exists("/run/.containerenv") || s.getenv("container") == "podman" || strings.Contains(cg, "libpod"):
		return rtPodman
	case s.exists("/.dockerenv") || s.getenv("container") == "docker" || strings.Contains(cg, "docker"):
		return rtDocker
	case strings.Contains(cg, "containerd") || strings.Contains(cg, "nerdctl"):
		return rtContainerd
	case s.getenv("container") != "":
		return rtOther
	}
	return rtHost
}

// A degraded mode.
type degradedMode int

const (
	modeProcFallback   degradedMode = iota // the host's /proc bound read-only
	modeNoNestedUserNS                     // nothing inside can make a user namespace
	modeNoPidsLimit                        // no process limit
	modeNoPing                             // ping does not work inside
	modeSeccompRefuses                     // the runtime's seccomp refuses mount/pivot_root/clone
)

// modeCost says what a degraded mode costs.
func modeCost(m degradedMode) string {
	return map[degradedMode]string{
		modeProcFallback:   "the sandbox falls back to this machine's /proc, read-only: its processes are visible inside, and nothing inside can create a user namespace (Claude Code's own bubblewrap sandbox cannot work)",
		modeNoNestedUserNS: "nothing inside the sandbox can create a user namespace: Claude Code's own sandbox (bubblewrap) and nested sandboxes fail",
		modeNoPidsLimit:    "launches by root get no process limit: a fork bomb inside can exhaust the machine's pids",
		modeNoPing:         "ping does not work inside the sandbox",
		modeSeccompRefuses: "the container's seccomp profile refuses the calls the sandbox is built with (mount, pivot_root, clone of namespaces)",
	}[m]
}

// modeFix is the exact remedy for a degraded mode under runtime rt.
func modeFix(m degradedMode, rt runtimeKind) string {
	switch m {
	case modeProcFallback, modeNoNestedUserNS:
		// Both come from a masked /proc (the runtime's over-mounts of
		// /proc/kcore and the like, a read-only /proc/sys): the kernel
		// refuses a fresh procfs where one is partly covered.
		switch rt {
		case rtDocker:
			return "run the container with --security-opt systempaths=unconfined (its masked /proc is the cause)"
		case rtPodman:
			return "run the container with --security-opt unmask=ALL (its masked /proc is the cause)"
		case rtKubernetes:
			return "give the container securityContext.procMount: Unmasked (with hostUsers: false; the ProcMountType feature)"
		case rtContainerd:
			return "run the container with an unmasked /proc (nerdctl: --security-opt systempaths=unconfined)"
		case rtOther:
			return "run the container with an unmasked /proc (the runtime's option for it: Docker's systempaths=unconfined, Podman's unmask=ALL)"
		}
		return "something over-mounts parts of /proc here: unmount them (a container runtime's masks: run the container with an unmasked /proc)"
	case modeNoPidsLimit:
		switch rt {
		case rtDocker, rtPodman, rtContainerd, rtOther:
			return "run Claude Code as a non-root user in the container (RLIMIT_NPROC binds it), or bound the container itself with --pids-limit N; kernel 6.14 or later bounds root too"
		case rtKubernetes:
			return "run Claude Code as a non-root user in the container (securityContext.runAsUser), or rely on the pod's pids limit; kernel 6.14 or later bounds root too"
		}
		return "run Claude Code as a non-root user (RLIMIT_NPROC binds it); kernel 6.14 or later bounds root too"
	case modeNoPing:
		switch rt {
		case rtPodman:
			// Within the gids the container maps (rootless Podman: 65,536
			// by default); a wider range is refused when it starts.
			return `run the container with --sysctl net.ipv4.ping_group_range="0 65535"`
		case rtDocker, rtContainerd, rtOther:
			return `run the container with --sysctl net.ipv4.ping_group_range="0 2147483647"`
		case rtKubernetes:
			return `set the pod's securityContext.sysctls net.ipv4.ping_group_range to "0 2147483647"`
		}
		return `sysctl -w net.ipv4.ping_group_range="0 2147483647" (and persist it in /etc/sysctl.d)`
	case modeSeccompRefuses:
		switch rt {
		case rtDocker:
			return "run the container with --security-opt seccomp=unconfined (Docker's default profile refuses these calls even with --cap-add SYS_ADMIN), and --security-opt systempaths=unconfined for a full-strength /proc"
		case rtPodman:
			return "run the container with --security-opt seccomp=unconfined (or a profile that allows mount, pivot_root and clone with namespace flags), and --security-opt unmask=ALL"
		case rtKubernetes:
			return "give the container securityContext.seccompProfile.type: Unconfined (or a Localhost profile allowing mount, pivot_root and clone with namespace flags)"
		}
		return "run the container without a seccomp profile that refuses mount, pivot_root and clone with namespace flags (Docker and Podman: --security-opt seccomp=unconfined)"
	}
	return ""
}

// seccompFiltered reports whether this process runs under a seccomp
// filter (/proc/self/status Seccomp: 2).
func seccompFiltered(s sysView) bool {
	for _, l := range strings.Split(s.readFile("/proc/self/status"), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n != 0
		}
	}
	return false
}

// warningMode is the degraded mode the launch warning w reports, told by
// the prefix its source exports (so a reworded warning keeps its hint).
func warningMode(w string) (degradedMode, bool) {
	switch {
	case strings.HasPrefix(w, mounts.WarnProcFallback):
		return modeProcFallback, true
	case strings.HasPrefix(w, nsexec.WarnNoPidsLimit):
		return modeNoPidsLimit, true
	case strings.HasPrefix(w, netchild.WarnNoPing):
		return modeNoPing, true
	}
	return 0, false
}

// warnedMode reports whether one of the launch warnings (lines) reports m.
func warnedMode(lines string, m degradedMode) bool {
	for _, w := range strings.Split(lines, "\n") {
		if got, ok := warningMode(w); ok && got == m {
			return true
		}
	}
	return false
}

// currentRuntime is detectRuntime of this machine, looked for once and
// only when asked: a launch asks only for a warning or a failure to hint
// at (the look reads /proc/1/cgroup and stats four paths: 0.17 ms in a
// Docker container, on every launch before).
var currentRuntime = sync.OnceValue(func() runtimeKind { return detectRuntime(realSys) })

// launchWarning is the launch warning w with its remedy under this
// machine's runtime, when it reports a degraded mode.
func launchWarning(w string) string {
	if _, ok := warningMode(w); !ok {
		return w
	}
	return w + warningHint(w, currentRuntime())
}

// warningHint is what a launch warning gets appended: the remedy for the
// degraded mode it reports, under this runtime ("" for other warnings).
func warningHint(w string, rt runtimeKind) string {
	m, ok := warningMode(w)
	if !ok {
		return ""
	}
	if m == modeNoPing && strings.Contains(w, unix.EROFS.Error()) {
		// The jail's namespace cannot set its sysctl: /proc/sys is
		// mounted read-only (a container runtime's mask).
		m = modeProcFallback
	}
	return "; to fix: " + modeFix(m, rt)
}

// setupHint names the real cause of a launch that failed setting up the
// sandbox with EPERM on mount or pivot_root inside a container: the
// runtime's seccomp profile (capabilities do not help: Docker's default
// profile refuses pivot_root even with --cap-add SYS_ADMIN). "" when the
// pattern does not match.
func setupHint(err string, rt runtimeKind, s sysView) string {
	if rt == rtHost || !strings.Contains(err, "operation not permitted") {
		return ""
	}
	if !strings.Contains(err, "pivot_root") && !strings.Contains(err, "mount") {
		return ""
	}
	if !seccompFiltered(s) {
		return ""
	}
	return "the likely cause: " + string(rt) + "'s seccomp profile refuses mount and pivot_root (a capability such as SYS_ADMIN does not lift that); " + modeFix(modeSeccompRefuses, rt)
}
