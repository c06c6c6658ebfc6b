package verify

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// wallProbes try the kernel surface a root caller's uid 0 could reach by
// file ownership alone (sysctls, sysfs), the calls the seccomp denylist
// refuses, and the sandbox's init.
func wallProbes() []Item {
	return []Item{
		{"P50", "write a kernel sysctl through /proc/sys", func(e *Env) (Status, string) {
			return rewriteProbe(e, "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/randomize_va_space", "/proc/sys/vm/overcommit_memory")
		}},
		{"P51", "write a sysfs attribute", func(e *Env) (Status, string) {
			return rewriteProbe(e, "/sys/kernel/mm/ksm/pages_to_scan", "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/module/printk/parameters/time")
		}},
		{"P52", "use io_uring and the kernel keyring", func(e *Env) (Status, string) {
			var params [120]byte
			fd, _, e1 := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
			if e1 == 0 {
				unix.Close(int(fd))
				return Escaped, "io_uring_setup succeeded"
			}
			_, _, e2 := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0) // the session keyring
			if e2 == 0 || e2 == unix.ENOKEY {
				return Escaped, fmt.Sprintf("keyctl answered (%v); io_uring_setup: %v", e2, e1)
			}
			for _, e := range []unix.Errno{e1, e2} {
				if e != unix.ENOSYS && e != unix.EPERM {
					return Inconclusive, fmt.Sprintf("io_uring_setup: %v, keyctl: %v (neither success nor a refusal)", e1, e2)
				}
			}
			return Blocked, fmt.Sprintf("io_uring_setup: %v, keyctl: %v", e1, e2)
		}},
		{"P53", "crash the sandbox's init with a signal", func(e *Env) (Status, string) {
			// If this escapes in a real sandbox, init dies and the
			// session ends with it: that is the escape.
			target := e.InitPID
			if target == 0 {
				target = 1
			}
			sigs := []unix.Signal{unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE, unix.SIGILL, unix.SIGABRT, unix.SIGTRAP, unix.SIGSYS, unix.SIGSTKFLT, unix.SIGUSR1, unix.SIGPIPE}
			for _, s := range sigs {
				if err := unix.Kill(target, s); err != nil {
					return refused(fmt.Sprintf("signal %d %v", target, s), err, unix.EPERM, unix.ESRCH)
				}
			}
			for i := 0; i < 50; i++ {
				if !alive(e, target) {
					return Escaped, fmt.Sprintf("process %d died of a signal sent from inside", target)
				}
				time.Sleep(10 * time.Millisecond)
			}
			return Blocked, fmt.Sprintf("process %d still runs after SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGSTKFLT, SIGUSR1 and SIGPIPE", target)
		}},
		{"P60", "signal a process outside the sandbox (init's threads, outside its Landlock domain)", signalScopeProbe},
		{"P54", "leave a set-user-ID program owned by host root in the workspace", func(e *Env) (Status, string) {
			return setIDProbe(e)
		}},
	}
}

// rewriteProbe writes each file's own content back to it (nothing
// changes): any success is an escape. Files absent here are passed over.
func rewriteProbe(e *Env, files ...string) (Status, string) {
	var tried []string
	for _, f := range files {
		b, err := os.ReadFile(e.path(f))
		if err != nil {
			continue
		}
		fd, err := unix.Open(e.path(f), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd, b)
			unix.Close(fd)
		}
		if err == nil {
			return Escaped, f + " was written"
		}
		st, ev := refused("write "+f, err, unix.EROFS, unix.EACCES, unix.EPERM)
		if st != Blocked {
			return st, ev
		}
		tried = append(tried, ev)
	}
	if len(tried) == 0 {
		return Inconclusive, "none of " + strings.Join(files, ", ") + " exists here"
	}
	return Blocked, strings.Join(tried, "; ")
}

// alive reports whether pid runs (not gone, not a zombie).
func alive(e *Env, pid int) bool {
	b, err := os.ReadFile(e.path(fmt.Sprintf("/proc/%d/stat", pid)))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// setIDProbe creates a file in the workspace and sets its set-user-ID
// bit. A root caller's files there are owned by host root, so a set-ID
// program left behind would run as root for any local user: ESCAPED when
// the bit holds on a file owned by uid 0 that is host uid 0. The file is
// removed.
func setIDProbe(e *Env) (Status, string) {
	if e.Workspace == "" {
		return Skip, "no workspace known"
	}
	dir := e.path(e.Workspace)
	f, err := os.CreateTemp(dir, ".claude-sandbox-verify-setid-")
	if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) {
		return Skip, "the workspace is not writable here: " + err.Error()
	}
	if err != nil {
		return Inconclusive, "cannot create a file in the workspace: " + err.Error()
	}
	name := f.Name()
	defer os.Remove(name)
	defer f.Close()
	if err := unix.Fchmod(int(f.Fd()), 0o4755); err != nil {
		return refused("chmod 4755 in the workspace", err, unix.EPERM)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Inconclusive, err.Error()
	}
	if st.Mode&unix.S_ISUID == 0 {
		return Blocked, "chmod 4755 left no set-user-ID bit"
	}
	if st.Uid == 0 && mapsRootToRoot() {
		return Escaped, "a set-user-ID file owned by host root stayed in the workspace (" + name + ")"
	}
	return Blocked, fmt.Sprintf("the bit holds on a file of uid %d, which is not host root: it runs as the caller, no more", st.Uid)
}

// mapsRootToRoot reports whether this user namespace maps uid 0 to host
// uid 0 (a root caller's sandbox).
func mapsRootToRoot() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true // unknown: assume the worst
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "0" && f[1] == "0" {
			return true
		}
	}
	return false
}
