package nsexec

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The process limit (plan.PidsLimit) is made by init, while it still holds
// every capability in its own user namespace:
//
//   - Linux 6.14 and later keep kernel.pid_max per PID namespace, and a
//     namespace's init may set its own. The sandbox's pid_max is set to
//     limit+1, so pids 1..limit exist: at most limit tasks are alive at
//     once in the sandbox, and a nested PID namespace cannot exceed it
//     either (every task holds a pid at each level). This works the same
//     for root and non-root callers. The kernel reserves the pids below 300
//     for its own wrap-around, so a limit under 300 is refused (plan).
//   - Older kernels have one pid_max for the whole machine; writing it
//     would change the host, so it is never tried. There, and where the
//     sandbox's pid_max cannot be written (a read-only /proc/sys), the
//     launcher makes a pids cgroup when it may (pidscg_linux.go).
//   - Failing that, a non-root caller gets RLIMIT_NPROC, set here, after
//     the user namespace exists. Since Linux 5.14 the kernel counts it per
//     user in each user namespace (ucounts), so only the sandbox's
//     processes count against the limit inside; but each level above is
//     also checked against the limit its creator had, so the sandbox
//     cannot exceed the caller's own RLIMIT_NPROC either, which counts
//     every process of that user on the host. Before 5.14 the count was
//     the host user's alone: a user with more processes than the limit
//     outside could not fork inside at all. A root caller is exempt from
//     RLIMIT_NPROC (the kernel never enforces it on host uid 0) and gets
//     no limit, with a warning that says what to change.

// minPerNSPidMax is the first kernel with a per-namespace pid_max.
var minPerNSPidMax = [2]int{6, 14}

// kernelAtLeast reports whether release (uname -r, "6.18.44-foo") is at
// least want.
func kernelAtLeast(release string, want [2]int) bool {
	f := strings.FieldsFunc(release, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(f[0])
	min, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > want[0] || maj == want[0] && min >= want[1]
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// pidsBound is the process limit a sandbox gets.
type pidsBound int

const (
	boundPidMax pidsBound = iota // its PID namespace's own kernel.pid_max
	boundCgroup                  // a pids cgroup the launcher made
	boundNproc                   // RLIMIT_NPROC
	boundNone                    // nothing: RLIMIT_NPROC does not bind host root
)

// pidsBoundFor is the one decision between the bounds, in the order they
// are tried: the namespace's pid_max when it can be set, else a pids
// cgroup when one was made, else RLIMIT_NPROC, which binds every uid but
// host root's. limitPids applies it at launch and PidsLimitKind (doctor)
// predicts it, so the two agree.
func pidsBoundFor(pidMax, cgroup, hostRoot bool) pidsBound {
	switch {
	case pidMax:
		return boundPidMax
	case cgroup:
		return boundCgroup
	case hostRoot:
		return boundNone
	}
	return boundNproc
}

// WarnNoPidsLimit begins the warning of a sandbox left without a process
// limit (claude-sandbox's doctor and launch hints look for it).
const WarnNoPidsLimit = "no process limit"

// limitPids bounds the sandbox's tasks to limit (0: no bound). It runs in
// init, in the sandbox's new PID and user namespaces, before the mounts
// are built. With cgroup, the launcher has bounded the sandbox with a pids
// cgroup already (see pidscg_linux.go): pid_max is still tried, and no
// fallback is needed. noCgroup says why there is none, for the warning. It
// returns a warning when the bound is weaker than asked.
func limitPids(limit int, hostRoot, cgroup bool, noCgroup string) (string, error) {
	if limit <= 0 {
		return "", nil
	}
	if noCgroup == "" {
		noCgroup = "no pids cgroup was tried"
	}
	var pidMaxErr error // why pid_max could not be written, where it was tried
	tried := kernelAtLeast(kernelRelease(), minPerNSPidMax)
	if tried {
		pidMaxErr = setNSPidMax(limit + 1)
	}
	switch pidsBoundFor(tried && pidMaxErr == nil, cgroup, hostRoot) {
	case boundNone:
		if tried {
			return fmt.Sprintf(WarnNoPidsLimit+": the sandbox's kernel.pid_max could not be written (%v); %s; RLIMIT_NPROC does not bind root: a fork bomb inside can exhaust the host's pids (see claude-sandbox doctor)", pidMaxErr, noCgroup), nil
		}
		return fmt.Sprintf(WarnNoPidsLimit+": %s; RLIMIT_NPROC does not bind root: a fork bomb inside can exhaust the host's pids (see claude-sandbox doctor)", noCgroup), nil
	case boundNproc:
		if err := setNproc(limit); err != nil {
			return "", err
		}
		if tried {
			return fmt.Sprintf("the sandbox's kernel.pid_max could not be written (%v); the process limit is RLIMIT_NPROC instead", pidMaxErr), nil
		}
	}
	return "", nil
}

// setNSPidMax writes this PID namespace's kernel.pid_max (Linux 6.14+: the
// sysctl is the calling task's namespace's, whichever /proc it is reached
// through) and reads it back. It goes through a fresh, never attached
// procfs first: the /proc this process still sees is the caller's, which a
// container may have made read-only at /proc/sys.
func setNSPidMax(v int) error {
	err := writeSysctl(freshProcFile, v)
	if err == nil {
		return nil
	}
	if err2 := writeSysctl(hostProcFile, v); err2 != nil {
		return fmt.Errorf("%w; through /proc: %w", err, err2)
	}
	return nil
}

const pidMaxPath = "sys/kernel/pid_max"

// freshProcFile opens pid_max in a new procfs instance that is never
// attached anywhere; it goes away with the last descriptor.
func freshProcFile() (*os.File, error) {
	fsfd, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, err
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(mfd)
	fd, err := unix.Openat(mfd, pidMaxPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), pidMaxPath), nil
}

func hostProcFile() (*os.File, error) {
	return os.OpenFile("/proc/"+pidMaxPath, os.O_RDWR, 0)
}

func writeSysctl(open func() (*os.File, error), v int) error {
	f, err := open()
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write([]byte(strconv.Itoa(v))); err != nil {
		return err
	}
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if n == 0 && err != nil {
		return err
	}
	if got := strings.TrimSpace(string(b[:n])); got != strconv.Itoa(v) {
		return fmt.Errorf("pid_max reads %s after writing %d", got, v)
	}
	return nil
}

// setNproc sets RLIMIT_NPROC to limit, or leaves a lower hard limit alone.
func setNproc(limit int) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &rl); err != nil {
		return fmt.Errorf("read RLIMIT_NPROC: %w", err)
	}
	v := uint64(limit)
	if rl.Max < v {
		v = rl.Max
	}
	rl.Cur, rl.Max = v, v
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &rl); err != nil {
		return fmt.Errorf("set RLIMIT_NPROC to %d: %w", v, err)
	}
	return nil
}
