package nsexec

import (
	"os"
	"os/signal"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel delivers a signal sent from inside a PID namespace to its
// init only if init handles it (an ignored one is dropped), and the Go
// runtime installs a handler for nearly every signal. For most of them
// the runtime's handler drops a signal nobody asked for; for SIGHUP,
// SIGINT and SIGTERM it exits, and for SIGQUIT, SIGILL, SIGTRAP, SIGABRT,
// SIGBUS, SIGFPE, SIGSEGV, SIGSTKFLT and SIGSYS it crashes with a
// goroutine trace on init's stderr (the host's terminal). So once the
// command runs, init ignores exactly those (fatalSignals): the kernel then
// drops them, from inside or from the host. Ignored, not caught: catching
// (os/signal) keeps two threads for the sandbox's life, one to receive
// and one to manage signal masks. They are ignored only after the command
// has started, because an ignored disposition is inherited across fork
// and exec and the command must start with the defaults; a command that
// signals PID 1 in the microseconds before can only end its own sandbox.
// SIGKILL and SIGSTOP never reach a namespace's init from inside. The
// integration test sends every signal from 1 to 64, so a runtime that
// changes its table is caught.
//
// The signals the launcher forwards (SIGINT, SIGTERM, SIGHUP, SIGQUIT and,
// without a pty, SIGWINCH) reach init as signal messages on its channel
// instead, so a process inside cannot make init signal the command by
// signalling init: init drops whatever it gets by kill().

// The command starts with the dispositions a command started in the
// launcher's place would have, and a process inherits ignored signals
// across exec: `nohup claude-sandbox run -- cmd` must leave cmd ignoring
// SIGHUP as `nohup cmd` does, and a background job of a script
// ignoring SIGINT likewise. The Go runtime keeps an inherited SIG_IGN
// only for SIGHUP and SIGINT (every other signal gets its handler, and a
// handled signal is back at its default after exec); the launcher's own
// signal.Notify of them then makes them caught, and the holder and init
// it starts after that inherit the default. So the launcher notes the
// two as its process started (package initialisation, before any
// Notify) and init ignores them again just before it starts the command.
var startIgnored = ignoredAtStart()

func ignoredAtStart() []int {
	var out []int
	for _, s := range []unix.Signal{unix.SIGHUP, unix.SIGINT} {
		if signal.Ignored(s) {
			out = append(out, int(s))
		}
	}
	return out
}

// ignoreForCommand makes init ignore sigs (the launcher's startIgnored)
// so that the command it starts next inherits them ignored. Init ignores
// these and more once the command runs anyway (dropSignals).
func ignoreForCommand(sigs []int) {
	for _, s := range sigs {
		if s == int(unix.SIGHUP) || s == int(unix.SIGINT) {
			signal.Ignore(unix.Signal(s))
		}
	}
}

// forwardedSignals are the ones the launcher passes on.
var forwardedSignals = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGWINCH}

func forwarded(s os.Signal) bool {
	for _, f := range forwardedSignals {
		if s == f {
			return true
		}
	}
	return false
}

// fatalSignals are the signals the Go runtime exits or crashes on when
// they arrive unasked (its sigtable: _SigKill, _SigThrow, _SigPanic).
var fatalSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGTERM,
	unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGBUS,
	unix.SIGFPE, unix.SIGSEGV, unix.SIGSTKFLT, unix.SIGSYS,
}

// dropSignals makes init ignore the signals that would end it.
func dropSignals() {
	signal.Ignore(fatalSignals...)
	ignoreUnhandled()
}

// ignoreUnhandled makes init ignore every signal still at its default
// action where that action ends the process: the ones the Go runtime
// installs no handler for (today 32 and 34; 33 is the runtime's own, for
// AllThreadsSyscall), whatever a runtime version leaves there. The kernel
// drops such a signal sent to a PID namespace's init from inside, but not
// always: about one launch in ten, init died of a `kill -32 1` or `kill
// -34 1` sent by the command long after the start (TestPID1SurvivesSignals
// failed with exit 160 or 162, the code before this change too; 3 and 6
// in 30 by hand). Likely when the signal finds it blocked in the thread
// it is sent to (the runtime blocks signals around its own clones), so
// that it is not dropped there and another thread takes it as fatal to
// the whole group. Ignored, it is dropped in every case (0 in 40 after).
// os/signal cannot ignore these (it touches only the signals it may
// notify), so the disposition is read and set directly. Like dropSignals,
// only once the command has started: an ignored disposition is inherited
// across fork and exec.
func ignoreUnhandled() {
	for sig := 1; sig <= 64; sig++ {
		if !defaultEndsProcess(sig) {
			continue
		}
		var cur kernelSigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&cur)), 8, 0, 0); e != 0 || cur.handler != sigDFL {
			continue
		}
		ign := kernelSigaction{handler: sigIGN}
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&ign)), 0, 8, 0, 0)
	}
}

// kernelSigaction is struct sigaction as rt_sigaction takes it: handler,
// flags, restorer, an 8-byte mask (two words, so no padding on 32-bit
// ABIs).
type kernelSigaction struct {
	handler, flags, restorer uintptr
	mask                     [2]uint32
}

const (
	sigDFL = 0
	sigIGN = 1
)

// defaultEndsProcess reports whether sig's default action ends the
// process and the signal can be ignored: not SIGKILL or SIGSTOP, not the
// ones ignored by default (SIGCHLD, SIGCONT, SIGURG, SIGWINCH), not the
// stop signals (a namespace's init is never stopped from inside).
func defaultEndsProcess(sig int) bool {
	switch unix.Signal(sig) {
	case unix.SIGKILL, unix.SIGSTOP, unix.SIGCHLD, unix.SIGCONT, unix.SIGURG, unix.SIGWINCH,
		unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return false
	}
	return true
}
