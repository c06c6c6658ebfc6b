package nsexec

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Capability sets, no_new_privs and seccomp filters belong to threads, and
// a Go process has several. The init stage locks its main goroutine to its
// thread (Init) and forks the command from it, so the command inherits that
// thread's state. The drop is made in two tiers, because every
// syscall.AllThreadsSyscall interrupts every thread (tens of microseconds
// a call), so a call per capability would dominate the launch:
//
//   - on the locked thread only: no_new_privs, the bounding set, the ambient
//     set (cheap plain syscalls; the bounding set matters only at exec, and
//     init's only exec is the command's fork from this thread);
//   - on every thread: capset to all-zero (one AllThreadsSyscall; this also
//     empties each thread's ambient set), then the seccomp filter with TSYNC,
//     which also sets no_new_privs on every thread.
//
// So no thread of init keeps a capability while the command runs.
// AllThreadsSyscall refuses to run in a binary built with cgo: the shipped
// binary is built with CGO_ENABLED=0, and anything else fails closed here.

// lastCap returns the highest capability number the kernel knows: from
// /proc/sys/kernel/cap_last_cap, or, where that is hidden (some containers
// mask /proc/sys), by asking the kernel about each number in turn.
func lastCap() (int, error) {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 0 || n > 63 {
			return 0, fmt.Errorf("cap_last_cap: unexpected %q", b)
		}
		return n, nil
	}
	n := -1
	for c := 0; c <= 63; c++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			break
		}
		n = c
	}
	if n < 0 {
		return 0, errors.New("cannot determine the kernel's capability count")
	}
	return n, nil
}

func allThreads(what string, trap, a1, a2, a3 uintptr) error {
	_, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if e == syscall.ENOTSUP {
		return fmt.Errorf("%s: this binary was built with cgo; build it with CGO_ENABLED=0 so privileges can be dropped on every thread", what)
	}
	if e != 0 {
		return fmt.Errorf("%s: %w", what, e)
	}
	return nil
}

// dropPrivileges empties the bounding and ambient sets of the calling
// (locked) thread, sets its no_new_privs, and empties the effective,
// permitted and inheritable sets of every thread. The bounding set goes
// first: dropping from it needs CAP_SETPCAP.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	last, err := lastCap()
	if err != nil {
		return fmt.Errorf("read the capability count: %w", err)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return allThreads("clear capabilities", unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
}

// loadFilter installs a classic BPF seccomp filter on every thread (TSYNC),
// which also sets no_new_privs on each; the caller must have set its own.
func loadFilter(raw []bpf.RawInstruction) error {
	if len(raw) == 0 {
		return errors.New("empty seccomp filter")
	}
	filters := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filters[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	return tsyncResult(r, e)
}

// tsyncResult reads seccomp's answer under TSYNC: a positive value is the
// id of a thread that could not be synchronised, and the filter was then
// installed on no thread at all. Fail closed in both cases.
func tsyncResult(r uintptr, e unix.Errno) error {
	if e != 0 {
		return fmt.Errorf("install seccomp filter: %w", e)
	}
	if r != 0 {
		return fmt.Errorf("install seccomp filter: thread %d could not be synchronised (TSYNC); the filter is on no thread", r)
	}
	return nil
}

// allCaps lists every capability number, for the ambient set that carries
// the init stage's capabilities (inside its own user namespace) across its
// exec when the caller is not root.
func allCaps() ([]uintptr, error) {
	last, err := lastCap()
	if err != nil {
		return nil, err
	}
	caps := make([]uintptr, last+1)
	for i := range caps {
		caps[i] = uintptr(i)
	}
	return caps, nil
}
