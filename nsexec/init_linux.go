package nsexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// Init runs the stage this process was started as and exits, or returns at
// once when the process is not a stage. Call it first thing in main.
func Init() {
	if len(os.Args) == 0 || os.Args[0] != stageMarker {
		return
	}
	if code, ran := runStage(); ran {
		os.Exit(code)
	}
}

// InitEarly is Init for a package's init function (see package
// stageinit, which a program imports for its side effect). A stage run
// from there costs less, for the sandbox's whole life: it starts before
// the packages it does not use are initialised (the netstack's among
// them, whose tables and buffers would otherwise be allocated in every
// init), and it runs on the main thread, which the runtime keeps locked
// to the main goroutine during initialisation, so init need not lock
// its thread itself; locking it would start the runtime's template
// thread, one more thread kept in every sandbox. Threads the runtime
// starts later are cloned directly from one of init's threads, in
// whatever state that thread has reached, which is only ever narrower
// than the one it started with (the bounding and ambient sets and
// no_new_privs of the main thread; the capability sets and the seccomp
// filter are set on every thread anyway). The command is still forked
// from the main thread. The holder runs here too when the network driver
// it names is registered already; otherwise it is left to the driver's
// package, which registers it from its own init function and then calls
// InitHeldEarly (the jail's does), or else to Init. main must still call
// Init.
func InitEarly() {
	if noEarlyInit {
		return
	}
	atPackageInit = true
	Init()
	atPackageInit = false
}

// InitHeldEarly runs a holder's start that InitEarly left for want of its
// network driver, once that driver is registered: a driver's package calls
// it from its init function right after RegisterNetChild (the jail's,
// package netchild, does). It does nothing in a process that is not a
// holder started that way, or whose driver is still missing. So
// nsexec/stageinit need not link the jail's driver, and init, which never
// uses it, starts before the driver's imports (net, the netlink package)
// are initialised, while the holder still starts from package
// initialisation.
func InitHeldEarly() {
	if held == nil || noEarlyInit || !holderDriverReady(held.m) {
		return
	}
	atPackageInit = true
	code, _ := runStage()
	os.Exit(code)
}

// NoEarlyInit makes InitEarly do nothing, leaving every stage to Init
// from main. For a coverage build (internal/covrun): a stage that ends
// during package initialisation ends before the main package's init has
// set up coverage's exit hook, so it would write no counters.
func NoEarlyInit() { noEarlyInit = true }

var noEarlyInit bool

// atPackageInit: Init was called from package initialisation (InitEarly).
var atPackageInit bool

// heldStart is a start message InitEarly received and left to Init.
type heldStart struct {
	ch         *channel
	m          envelope
	cloexecErr error
}

var held *heldStart

// holderDriverReady says whether the network driver a holder's start
// names is registered already. A driver is registered by its own
// package's init function, which may not have run yet (the jail's,
// package netchild, initialises after nsexec/stageinit, which does not
// link it), so its holder waits for that package's InitHeldEarly, or for
// main. A start that does not decode is left
// to dispatchStage to report.
func holderDriverReady(m envelope) bool {
	var start struct {
		Driver string `json:"driver"`
	}
	if err := json.Unmarshal(m.Body, &start); err != nil {
		return true
	}
	return netChild(start.Driver) != nil
}

// runStage runs the stage and returns its exit status, or ran false when
// it left a holder's start to Init (see InitEarly).
func runStage() (code int, ran bool) {
	if h := held; h != nil {
		held = nil
		return dispatchStage(h.ch, h.m, h.cloexecErr), true
	}
	// The channel is made non-blocking first, so that os.NewFile puts it
	// in the runtime's poller: the goroutine that waits on it for the
	// sandbox's whole life (the launcher's signals, policy updates) then
	// parks without holding an OS thread. Only this stage uses its end.
	_ = unix.SetNonblock(stageFD, true)
	f := os.NewFile(stageFD, "stage-channel")
	if f == nil {
		fmt.Fprintln(os.Stderr, "claude-sandbox: started as a stage without its channel (fd 3); this binary's stages are internal")
		return ExitSetup, true
	}
	// Nothing this process inherited beyond stdio may reach the command:
	// not the stage's channels (with them the command could talk to the
	// launcher as if it were init), and not whatever descriptors the
	// caller's own parent leaked to it (a terminal, a daemon's socket).
	// Every fd from 3 up is made close-on-exec; the stages pass on what
	// they mean to, explicitly.
	cloexecErr := closeExtraOnExec()
	ch := newChannel(f, "launcher")
	// First of all: tell the parent that this binary runs the stage (a
	// program that forgot Init would run its own main instead).
	if err := ch.send(msgHello, nil); err != nil {
		fmt.Fprintln(os.Stderr, "claude-sandbox: stage channel:", err)
		return ExitSetup, true
	}
	// While the launcher answers: a start message's first decoding is
	// mostly the building of its types' decoders, once per process.
	if len(os.Args) < 2 || os.Args[1] != holderArg {
		warmStartDecoders()
	}
	m, err := ch.recv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "claude-sandbox: stage channel: no start message:", err)
		return ExitSetup, true
	}
	if atPackageInit && m.Kind == msgStartHolder && !holderDriverReady(m) {
		held = &heldStart{ch: ch, m: m, cloexecErr: cloexecErr}
		return 0, false
	}
	return dispatchStage(ch, m, cloexecErr), true
}

// dispatchStage runs the stage m starts.
func dispatchStage(ch *channel, m envelope, cloexecErr error) int {
	if cloexecErr != nil {
		// A descriptor that would reach the command: refuse the launch.
		_ = ch.send(msgError, stageFailure{Text: cloexecErr.Error(), Code: ExitSetup})
		return ExitSetup
	}
	switch m.Kind {
	case msgStartInit:
		var start startInit
		if err := ch.decode(m, &start); err != nil {
			return reportStage(ch)(0, err)
		}
		if !atPackageInit {
			runtime.LockOSThread()
		}
		return runInit(ch, start)
	case msgStartHolder:
		var start startHolder
		if err := ch.decode(m, &start); err != nil {
			return reportStage(ch)(0, err)
		}
		if !atPackageInit {
			runtime.LockOSThread()
		}
		return runHolder(ch, start)
	}
	_ = ch.send(msgError, stageFailure{Text: (&protocolError{peer: "launcher", err: fmt.Errorf("%q arrived where a start was due", m.Kind)}).Error(), Code: ExitSetup})
	return ExitSetup
}

// stageError is a failure inside a stage, with the exit status it maps to.
type stageError struct {
	code int
	err  error
}

func (e *stageError) Error() string { return e.err.Error() }

func fail(code int, format string, a ...any) error {
	return &stageError{code: code, err: fmt.Errorf(format, a...)}
}

// runInit is PID 1 of the sandbox. It never returns while the command runs.
func runInit(ch *channel, start startInit) int {
	return reportStage(ch)(initSandbox(ch, start))
}

// reportStage returns a function that turns a stage's result into its exit
// status, telling the parent why when it failed.
func reportStage(ch *channel) func(int, error) int {
	return func(code int, err error) int {
		if err == nil {
			return code
		}
		se := &stageError{code: ExitSetup, err: err}
		errors.As(err, &se)
		_ = ch.send(msgError, stageFailure{Text: se.err.Error(), Code: se.code})
		return se.code
	}
}

func initSandbox(ch *channel, start startInit) (int, error) {
	// If the launcher dies, so do we, and with PID 1 gone the kernel kills
	// every process of the namespace. Set before anything else; the
	// channel watch below covers a launcher that died before this line.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return 0, fmt.Errorf("set parent-death signal: %w", err)
	}
	p := start.Plan
	if p == nil || len(p.Argv) == 0 {
		return 0, errors.New("start message without a plan")
	}
	// Before the mounts: a root caller's view makes /proc/sys read-only.
	if w, err := limitPids(p.PidsLimit, p.HostRoot, start.PidsCgroup, start.PidsNoCgroup); err != nil {
		return 0, err
	} else if w != "" {
		_ = ch.send(msgWarning, warning{Text: w})
	}
	warnings, err := mounts.Setup(p.Mounts)
	for _, w := range warnings {
		_ = ch.send(msgWarning, warning{Text: w})
	}
	if err != nil {
		return 0, err
	}
	if p.Net == plan.NetNone {
		if err := loopbackUp(); err != nil {
			return 0, fmt.Errorf("bring up lo: %w", err)
		}
	}
	if p.Hostname != "" {
		if err := unix.Sethostname([]byte(p.Hostname)); err != nil {
			return 0, fmt.Errorf("set hostname: %w", err)
		}
	}
	if err := unix.Chdir(p.Dir); err != nil {
		if p.DirStrict {
			return 0, fmt.Errorf("--chdir %s: %w", p.Dir, err)
		}
		if err := unix.Chdir("/"); err != nil {
			return 0, fmt.Errorf("chdir /: %w", err)
		}
		// Quoted: the path may hold bytes that are not UTF-8.
		_ = ch.send(msgWarning, warning{Text: fmt.Sprintf("the current directory %q is not visible inside (%v): starting in /; bind it, or name a directory with --chdir", p.Dir, err)})
	}
	if err := dropPrivileges(); err != nil {
		return 0, err
	}
	// On this (locked) thread, from which the command is forked; after
	// no_new_privs, which it needs.
	if w, err := scopeLandlock(p.Net == plan.NetHost); err != nil {
		return 0, err
	} else if w != "" {
		_ = ch.send(msgWarning, warning{Text: w})
	}
	if err := installFilter(p.HostRoot); err != nil {
		return 0, err
	}
	// Not dumpable: the command (same uid) cannot ptrace init, nor read
	// its memory through /proc, to speak to the launcher in its name.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("make init undumpable: %w", err)
	}
	if start.WaitGo {
		// The jail's routes and stack are being set up meanwhile; the
		// command runs only once the launcher has seen both done.
		if err := ch.expect(msgGo, nil); err != nil {
			return 0, fmt.Errorf("the egress jail was not completed (%v)", err)
		}
	}
	// Looked up only now, with no privilege left, so it sees what the
	// command will see.
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	var slave *os.File
	ctty := 0
	if start.TTY {
		if slave, err = sendPTY(start); err != nil {
			return 0, fmt.Errorf("open the sandbox's terminal: %w", err)
		}
		defer slave.Close()
		// The pty replaces exactly the fds that were terminals on the
		// host (the launcher gave us /dev/null for those); the others
		// pass through.
		fds := start.PTYFds
		if len(fds) == 0 {
			fds = []int{0, 1, 2}
		}
		for _, fd := range fds {
			if fd >= 0 && fd < len(stdio) {
				stdio[fd] = slave
			}
		}
		ctty = fds[0]
	}
	path, ok := plan.LookPath(p.Argv[0], p.Env, isExecutable)
	if !ok {
		return 0, fail(ExitNotFound, "%s: command not found in the sandbox (PATH %s)", p.Argv[0], searchPath(p.Env))
	}
	// syscall.ForkExec, not os.StartProcess: the latter first checks,
	// once per process, that pidfds work, by starting and reaping a child
	// of its own, and init reaps by wait4 and has no use for a pidfd.
	fds := make([]uintptr, len(stdio))
	for i, f := range stdio {
		fds[i] = f.Fd()
	}
	ignoreForCommand(start.Ignored)
	target, err := syscall.ForkExec(path, p.Argv, &syscall.ProcAttr{
		Env:   p.Env,
		Files: fds,
		Sys: &syscall.SysProcAttr{
			// Its own session; with a pty, that pty becomes its
			// controlling terminal. Never the host's terminal.
			Setsid:  true,
			Setctty: start.TTY,
			Ctty:    ctty,
		},
	})
	runtime.KeepAlive(stdio)
	if err != nil {
		code := ExitCannotExec
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return 0, fail(code, "start %s: %v", p.Argv[0], err)
	}
	if start.TTY {
		// Only the command may hold the pty's slave side: when it and
		// its children are gone, the launcher's relay sees the end.
		slave.Close()
	}
	if err := ch.send(msgStarted, pidMsg{PID: target}); err != nil {
		return 0, fmt.Errorf("report start: %w", err)
	}
	// From now on the signals that would end init are ignored (see
	// dropSignals); the command, started above, has its defaults.
	dropSignals()
	go relayLauncher(ch, target)
	// No collection here (there was one, to give the setup's garbage
	// back): in a heap this small, under the collector's 4 MB floor, a
	// collection's own bookkeeping (mark bits, work buffers) and the
	// thread its worker woke kept more than the garbage it freed: init
	// held 1,040-1,070 kB anonymous and 3-4 threads with it, 936-944 kB
	// and 3 without (four sandboxes each way, issue 19).
	return reap(target), nil
}

// relayLauncher is watchLauncher for init: it also passes the launcher's
// forwarded signals on to the command.
func relayLauncher(ch *channel, target int) {
	for {
		// Only signals come now; anything else (or the launcher's end
		// closing) ends the sandbox: init cannot tell what it missed.
		var s signalMsg
		if err := ch.expect(msgSignal, &s); err != nil {
			os.Exit(ExitSetup)
		}
		// Any signal the launcher asks for: the channel is the
		// launcher's alone (an embedder's Signal may send others than
		// the forwarded set).
		if s.Signal > 0 && s.Signal < 65 {
			_ = unix.Kill(target, unix.Signal(s.Signal))
		}
	}
}

// reap reaps every child (orphans in the namespace are re-parented to
// us) until the command itself exits, and returns its status. It waits
// in wait4 on init's main thread, which has nothing else to do: no
// signal handling machinery (which would keep two more threads) is
// needed to learn of a child's end.
func reap(target int) int {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return ExitSetup
		}
		if pid == target {
			return statusCode(ws)
		}
	}
}

func statusCode(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return ExitSetup
}

func isExecutable(path string) bool {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return false
	}
	return unix.Access(path, unix.X_OK) == nil
}

func searchPath(env []string) string {
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			return kv[5:]
		}
	}
	return plan.DefaultPath
}

// loopbackUp sets lo up in a fresh network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// sendPTY opens a pseudo-terminal in the sandbox's own devpts (so the
// command's ttyname resolves inside), gives it the host terminal's settings
// and size, and hands the master side to the launcher over ptyFD.
func sendPTY(start startInit) (*os.File, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(m)
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if e != 0 {
		return nil, fmt.Errorf("open pty peer: %w", e)
	}
	slave := os.NewFile(r, "pty")
	if start.Termios != nil {
		_ = unix.IoctlSetTermios(int(r), unix.TCSETS, start.Termios)
	}
	if start.Winsize != nil {
		_ = unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, start.Winsize)
	}
	if err := sendFD(ptyFD, fdTagPTY, m); err != nil {
		slave.Close()
		return nil, fmt.Errorf("pass the pty to the launcher: %w", err)
	}
	unix.Close(ptyFD)
	return slave, nil
}

// closeExtraOnExec marks every descriptor from 3 up close-on-exec, or
// says why it could not: the launch must then fail, not run the command
// with whatever it inherited.
func closeExtraOnExec() error {
	return markCloseOnExec(func() error { return unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) }, "/proc/self/fd")
}

// markCloseOnExec does closeExtraOnExec's work with closeRange, or, where
// that fails (kernels before 5.11), by walking the descriptor table in
// fdDir.
func markCloseOnExec(closeRange func() error, fdDir string) error {
	crErr := closeRange()
	if crErr == nil {
		return nil
	}
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return fmt.Errorf("cannot make inherited descriptors close-on-exec (close_range: %w; listing %s: %w): is /proc mounted?", crErr, fdDir, err)
	}
	for _, e := range ents {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil || fd < 3 {
			continue
		}
		// EBADF: the listing's own descriptor, closed since.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("cannot make inherited descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

// startSample is a start-init message with a field of every type that
// needs a decoder of its own.
const startSample = `{"kind":"start-init","body":{"plan":{"argv":["a"],"env":["a=b"],"dir":"/","dirStrict":true,"uid":1,"gid":1,"hostname":"h","net":"none","egress":{},"mounts":[{"kind":"bind","src":"/","dst":"/","mode":"0755","optional":true,"exact":true}],"hostRoot":true,"pidsLimit":1},"tty":true,"ptyFds":[0],"winsize":{"Row":1},"termios":{"Iflag":1},"waitGo":true}}`

// warmStartDecoders decodes startSample the way the channel decodes a
// start, into values thrown away: the decoders it builds make the real
// start's decoding a parse only. Nothing of it is used.
func warmStartDecoders() {
	_, _ = decodeStartSample()
}

// decodeStartSample decodes startSample as a channel decodes a start.
func decodeStartSample() (startInit, error) {
	var s startInit
	c := newChannel(struct {
		io.Reader
		io.Writer
	}{strings.NewReader(startSample), io.Discard}, "sample")
	e, err := c.recv()
	if err == nil {
		err = c.decode(e, &s)
	}
	return s, err
}
