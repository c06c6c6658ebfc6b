package verify

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// landlockABI is the kernel's Landlock ABI version (0: none).
func landlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// landlockScopes reports whether the kernel can scope abstract sockets
// and signals (Landlock ABI 6), which the sandbox then does.
func landlockScopes() bool { return landlockABI() >= 6 }

// signalScopeProbe signals (signal 0: the permission check alone) each
// thread of init but its first. The sandbox's init enters the Landlock
// domain on the thread that forks the command, the first; its other
// threads stay outside it, like any host process, so the signal scope
// refuses them. In a PID namespace nested inside the sandbox, PID 1 is
// not the sandbox's init: skipped.
func signalScopeProbe(e *Env) (Status, string) {
	if !landlockScopes() {
		return Skip, "the kernel has no Landlock scopes (ABI 6, Linux 6.12): signals are confined by the PID namespace alone"
	}
	pid := e.InitPID
	if pid == 0 {
		pid = 1
		cmd, _ := os.ReadFile(e.path("/proc/1/cmdline"))
		if !bytes.HasPrefix(cmd, []byte("claude-sandbox:stage")) {
			return Skip, "PID 1 is not the sandbox's init (a nested PID namespace)"
		}
	}
	ents, err := os.ReadDir(e.path(fmt.Sprintf("/proc/%d/task", pid)))
	if err != nil {
		return Inconclusive, err.Error()
	}
	tried := 0
	for _, ent := range ents {
		tid, err := strconv.Atoi(ent.Name())
		if err != nil || tid == pid {
			continue
		}
		err = unix.Tgkill(pid, tid, 0)
		switch {
		case err == nil:
			return Escaped, fmt.Sprintf("signal 0 to thread %d of process %d, outside the sandbox's Landlock domain, was allowed", tid, pid)
		case errors.Is(err, unix.ESRCH):
			continue
		case !errors.Is(err, unix.EPERM):
			return Inconclusive, fmt.Sprintf("tgkill %d %d: %v", pid, tid, err)
		}
		tried++
	}
	if tried == 0 {
		return Inconclusive, fmt.Sprintf("process %d has no thread besides its first to try", pid)
	}
	return Blocked, fmt.Sprintf("EPERM for %d threads of process %d (outside the sandbox's Landlock domain)", tried, pid)
}
