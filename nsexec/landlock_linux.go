package nsexec

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock scopes (Linux 6.12, Landlock ABI 6): a process in a domain that
// scopes them can neither connect to an abstract Unix socket created
// outside its domain nor signal a process outside it. Init restricts its
// own (locked, main) thread just before it forks the command, after
// no_new_privs, so the command and everything it starts are in the domain
// and nothing outside it is: under --net=host the host's abstract sockets
// (X11, D-Bus, ...) share the network namespace and would otherwise be
// reachable, and a host process that joins the sandbox's PID namespace
// (a debugger, nsenter) could otherwise be signalled. Scopes restrict no
// mount and no filesystem access, so nested sandboxes (Claude Code's
// bubblewrap) work inside as before.

// minScopeABI is the first Landlock ABI with scopes.
const minScopeABI = 6

// landlockABI returns the kernel's Landlock ABI version (0: none, or
// Landlock disabled at boot).
func landlockABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// scopeLandlock puts the calling thread in a new Landlock domain that
// scopes abstract Unix sockets and signals, and handles no access right
// (no filesystem or network rule). It returns a warning, not an error,
// where the kernel lacks scopes and it matters (hostNet: the host's
// abstract sockets are in reach; elsewhere the sandbox's network namespace
// is its own, and only a host process that joins its PID namespace could
// be signalled).
func scopeLandlock(hostNet bool) (string, error) {
	abi := landlockABI()
	if abi < minScopeABI {
		if !hostNet {
			return "", nil
		}
		why := "Landlock is off or missing"
		if abi > 0 {
			why = fmt.Sprintf("Landlock ABI %d, scopes need 6 (Linux 6.12)", abi)
		}
		return fmt.Sprintf("abstract Unix sockets and signals are not confined to the sandbox (%s): with --net=host the host's abstract sockets are reachable", why), nil
	}
	// The kernel reads only the fields its ABI knows of the size given:
	// the first three (handled fs, handled net, scoped).
	attr := unix.LandlockRulesetAttr{Scoped: unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL}
	size := unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return "", fmt.Errorf("create the Landlock ruleset (scopes): %w", e)
	}
	defer unix.Close(int(fd))
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return "", fmt.Errorf("enter the Landlock domain (scopes): %w", e)
	}
	return "", nil
}
