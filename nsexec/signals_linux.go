package nsexec

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// The kernel delivers a signal sent from inside a PID namespace to its
// init only if init handles it, and the Go runtime installs a handler for
// nearly every signal. For most of them the runtime's handler drops a
// signal nobody asked for; for SIGHUP, SIGINT and SIGTERM it exits, and
// for SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV,
// SIGSTKFLT and SIGSYS it crashes with a goroutine trace on init's stderr
// (the host's terminal). So init asks for exactly those (fatalSignals) and
// SIGCHLD, reaps on SIGCHLD and drops the rest: asking for all 64 would
// cost about 3 ms of launch time (each signal.Notify of a new signal is a
// round trip to the runtime's signal thread) for no gain. SIGKILL and
// SIGSTOP never reach a namespace's init from inside. The signals are
// caught, not ignored: an ignored disposition would be inherited by the
// command across exec, a caught one is reset to the default. The
// integration test sends every signal from 1 to 64, so a runtime that
// changes its table is caught.
//
// The signals the launcher forwards (SIGINT, SIGTERM, SIGHUP, SIGQUIT and,
// without a pty, SIGWINCH) reach init as msgSignal messages on its channel
// instead, so a process inside cannot make init signal the command by
// signalling init: init drops whatever it gets by kill().

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

// catchAll routes SIGCHLD and the fatal signals to c.
func catchAll(c chan<- os.Signal) {
	signal.Notify(c, append([]os.Signal{unix.SIGCHLD}, fatalSignals...)...)
}
