// Package nsexec is the engine: it starts a command inside fresh Linux
// namespaces, as described by a plan.Plan, and stays with it until it exits.
//
// A Go process is multi-threaded, so it cannot unshare a user namespace for
// itself. nsexec instead re-executes the running binary (/proc/self/exe)
// with clone flags, in a named stage. The stage's name and inputs travel as
// typed JSON messages over an inherited socket (fd 3; protocol.go has the
// ladder of every message), never through argv or
// the environment; argv[0] only carries a marker so [Init] can recognise a
// stage at all.
//
//	launcher (caller's namespaces)
//	  | socketpair, plan; pty relay; signal forwarding; exit status
//	  v   clone: NEWUSER NEWNS NEWPID NEWIPC NEWUTS NEWCGROUP [NEWNET]
//	init = PID 1 of the sandbox
//	  | process limit (its own pid_max), then mounts.Setup (read-only root,
//	  |   /dev, /proc, binds, masks, a host-root caller's covers, pivot_root)
//	  | lo up, hostname; drop every capability, no_new_privs, seccomp
//	  | fork+exec the command; reap; pass on the launcher's signals (sent
//	  |   over the channel; signals sent to init itself are dropped); exit
//	  |   with its status
//
// [Run] runs a plan to its end; [Start] is the same in two halves (it
// returns a [Process] once the command runs, to wait for, signal, kill or
// cancel through its context). [Prestart] clones init before the plan is
// built (without the jail), so the two overlap; Start takes that init only
// when it suits the plan. Programs should embed the sandbox through
// package sandbox, which builds the plan and the jail for them.
//
// A process that is root on the host ([CallerIsHostRoot]) must hand [Run]
// a plan built with plan.Options.HostRoot: [Run] refuses one without.
//
// Programs that embed the engine must call [Init] first thing in main, so
// that the re-executed binary becomes the stage instead of running main.
// Each stage's first message is a "hello": a binary that runs its own
// main instead says nothing, and the launch fails naming the fix.
//
// What it does not do: decide what the sandbox contains (that is the plan's
// builder), or build the network: with the egress jail, a holder stage
// creates the jail's user and network namespaces between the launcher and
// init, runs the network driver the program supplies there
// (netdriver.go), hands its descriptors to the launcher and exits. It needs Linux with unprivileged user
// namespaces, kernel 5.12 or later (the new mount API), and a binary built
// with CGO_ENABLED=0 (privileges are dropped on every thread with
// syscall.AllThreadsSyscall, which cgo binaries cannot use).
package nsexec
