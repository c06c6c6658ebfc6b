package verify

import (
	"errors"
	"fmt"
	"os"
	"strconv"
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
	if host, known := hostUID(e, st.Uid); known && host == 0 {
		return Escaped, "a set-user-ID file owned by host root stayed in the workspace (" + name + ")"
	}
	return Blocked, fmt.Sprintf("the bit holds on a file of uid %d, which is not host root: it runs as the caller, no more", st.Uid)
}

// CallerUIDMapEnv is the variable the launcher sets inside to the chain
// of uid maps above the sandbox: its own /proc/self/uid_map (the
// caller's namespace in its parent), then what it found in the same
// variable (the levels above a nested launcher). Levels are separated by
// "|", a level's lines by ",". Nothing inside could read them otherwise:
// a user namespace's /proc/self/uid_map shows one level only, and its
// parent is out of reach. Under rootless Podman the sandbox maps uid 0 to
// the container's uid 0, which is the rootless user on the host: only
// the whole chain says so, as the launcher decides (nsexec.CallerIsHostRoot
// reads the caller's level).
const CallerUIDMapEnv = "CLAUDE_SANDBOX_CALLER_UID_MAP"

// CallerUIDMaps is CallerUIDMapEnv's value for a sandbox this process
// starts: its own uid map, then the chain it was given, if any. It is ""
// (the variable is not set) in the initial user namespace, whose map is
// the identity and has no level above, and when the map is unreadable.
func CallerUIDMaps(getenv func(string) string) string {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			lines = append(lines, strings.Join(f, " "))
		}
	}
	if len(lines) == 1 && lines[0] == "0 0 4294967295" {
		return ""
	}
	v := strings.Join(lines, ",")
	if up := getenv(CallerUIDMapEnv); up != "" {
		v += "|" + up
	}
	return v
}

// hostUID maps uid, as this namespace sees it, up through the whole chain
// of uid maps: this namespace's own, then the levels the launchers
// recorded (CallerUIDMapEnv); the last level's parent counts as the host.
// known is false when this namespace's map cannot be read (the caller
// assumes the worst). A level that does not map the uid leaves it the
// overflow uid, no one's: not host root.
func hostUID(e *Env, uid uint32) (host uint32, known bool) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return uid, uid == 0
	}
	levels := []string{string(b)}
	if e.Getenv != nil {
		if up := e.Getenv(CallerUIDMapEnv); up != "" {
			for _, l := range strings.Split(up, "|") {
				levels = append(levels, strings.ReplaceAll(l, ",", "\n"))
			}
		}
	}
	for _, m := range levels {
		next, ok := mapUID(m, uid)
		if !ok {
			return 65534, true
		}
		uid = next
	}
	return uid, true
}

// mapUID maps uid through one uid_map's text (inside outside count lines).
func mapUID(uidMap string, uid uint32) (uint32, bool) {
	for _, line := range strings.Split(uidMap, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.ParseUint(f[0], 10, 32)
		out, err2 := strconv.ParseUint(f[1], 10, 32)
		n, err3 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if uint64(uid) >= in && uint64(uid) < in+n {
			return uint32(out + uint64(uid) - in), true
		}
	}
	return 0, false
}
