package nsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/plan"
)

// StartError is a sandbox that could not be started: Code is the exit
// status a command-line tool reports for it (ExitSetup, ExitCannotExec or
// ExitNotFound).
type StartError struct {
	Code int
	Err  error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// StartErrorCode returns the exit status for an error of [Start]:
// the StartError's code, or ExitSetup.
func StartErrorCode(err error) int {
	var se *StartError
	if errors.As(err, &se) {
		return se.Code
	}
	return ExitSetup
}

// Process is a sandbox started by [Start], running its command.
type Process struct {
	l    *launch
	done chan struct{}
	code int
	err  error

	cmdOnce sync.Once
	cmdPID  int
	nsPID   int // the command's pid inside the sandbox
}

// Start builds the sandbox described by p and starts its command; it
// returns once the command runs (or with a *StartError when the sandbox
// could not be built or the command not started). Cancelling ctx kills
// the sandbox, while it is being built as well as after: init, the
// command and everything else inside die with their PID namespace.
//
// Call [Process.Wait] to learn how it ended and release its resources.
func Start(ctx context.Context, p *plan.Plan, o Options) (*Process, error) {
	early := o.Early
	o.Early = nil
	pr, err := start(ctx, p, o, early)
	if err != nil {
		early.Abort() // unless it was taken: then the launch stopped it
	}
	return pr, err
}

// withDefaults fills in the process's own stdio and the default warning
// printer.
func (o *Options) withDefaults() {
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Warn == nil {
		stderr := o.Stderr
		o.Warn = func(s string) { fmt.Fprintln(stderr, "claude-sandbox: warning:", s) }
	}
}

// isStageWithoutInit says whether this process was re-executed to run a
// stage but its main did not call Init: starting a sandbox (or its init,
// Prestart) from here would re-execute it again, and again.
func isStageWithoutInit() bool {
	return len(os.Args) > 0 && os.Args[0] == stageMarker
}

func start(ctx context.Context, p *plan.Plan, o Options, early *Early) (*Process, error) {
	if isStageWithoutInit() {
		return nil, &StartError{ExitSetup, errors.New("this process was started as a sandbox stage, but main did not call sandbox.Init() (or nsexec.Init()) first: add it as the first statement of main")}
	}
	o.withDefaults()
	if !p.HostRoot && CallerIsHostRoot() {
		return nil, &StartError{ExitSetup, errors.New("this process is root on the host but the plan was built without plan.Options.HostRoot: the sandbox's uid 0 would be host root with a writable /proc/sys; build the plan with HostRoot set to nsexec.CallerIsHostRoot()")}
	}
	if p.Net == plan.NetJail && o.Jail == nil {
		return nil, &StartError{ExitSetup, errors.New("the plan asks for the egress jail but no jail was given to the engine")}
	}
	if err := ctx.Err(); err != nil {
		return nil, &StartError{ExitSetup, err}
	}
	// Catch the forwarded signals from the start: one that arrives while
	// the sandbox is being built waits here, and is passed on once the
	// command runs, instead of killing the launcher.
	var sigs chan os.Signal
	if o.ForwardSignals {
		sigs = make(chan os.Signal, 8)
		signal.Notify(sigs, forwardedSignals...)
	}
	// init started ahead of the plan, if it suits it; else a new one.
	l := early.take(p, o)
	spawned := l != nil
	if !spawned {
		l = &launch{p: p, o: o, initFD: -1}
	}
	stopCancel := context.AfterFunc(ctx, func() { l.kill(ctx.Err()) })
	fail := func(code int, err error) (*Process, error) {
		stopCancel()
		if sigs != nil {
			signal.Stop(sigs)
		}
		l.closeAll()
		return nil, &StartError{code, err}
	}
	if !spawned {
		if err := l.channels(); err != nil {
			return fail(ExitSetup, err)
		}
	}
	code, err := l.start(spawned)
	if err == nil {
		// Cancelled at the very end of the start: the kill may have come
		// before the command existed; the run ends at once.
		err = l.cancelled()
		if err != nil {
			l.wait()
			code = ExitSetup
		}
	}
	if err != nil {
		return fail(code, err)
	}
	pr := &Process{l: l, done: make(chan struct{}), nsPID: l.startedPID}
	go func() {
		pr.code, pr.err = l.supervise(sigs)
		stopCancel()
		l.closeAll()
		close(pr.done)
		// After Wait returns: undoing the forwarding is a round trip to
		// the runtime's signal thread per signal (about 0.2 ms in all),
		// which a command-line tool that exits with the status need not
		// wait for. The command is gone: a signal in between would have
		// reached nothing either way. (Gosched: with one P, the
		// goroutine Wait readies runs first, not after the round trips.)
		if sigs != nil {
			runtime.Gosched()
			signal.Stop(sigs)
		}
	}()
	return pr, nil
}

// Wait waits for the command to end and for the whole sandbox to be gone,
// and returns the status to exit with: the command's own, 128+N if signal
// N killed it, ExitSetup with an error if the sandbox had to be stopped
// (its egress stack failed); after a cancellation, the context's error.
func (pr *Process) Wait() (int, error) {
	<-pr.done
	return pr.code, pr.err
}

// Done is closed when the sandbox is gone (Wait then returns at once).
func (pr *Process) Done() <-chan struct{} { return pr.done }

// Signal sends sig to the command (its process, not its group). SIGKILL
// kills the whole sandbox instead, as [Process.Kill] does.
func (pr *Process) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		pr.Kill()
		return nil
	}
	select {
	case <-pr.done:
		return os.ErrProcessDone
	default:
	}
	if sig <= 0 || sig >= 65 {
		return fmt.Errorf("signal %d out of range", int(sig))
	}
	return pr.l.sendInit(msgSignal, signalMsg{Signal: int(sig)})
}

// Kill ends the sandbox at once: init and every process inside die with
// their PID namespace. Wait then reports 128+9.
func (pr *Process) Kill() { pr.l.kill(nil) }

// InitPID is the pid of the sandbox's init (its PID 1) in this process's
// PID namespace.
func (pr *Process) InitPID() int {
	pr.l.mu.Lock()
	defer pr.l.mu.Unlock()
	return pr.l.initPID
}

// CommandPID is the command's pid in this process's PID namespace, or 0
// once it has ended (or where /proc cannot tell). It is found once, on
// the first call, from the processes whose parent is init.
func (pr *Process) CommandPID() int {
	pr.cmdOnce.Do(func() { pr.cmdPID = findChild(pr.InitPID(), pr.nsPID) })
	return pr.cmdPID
}

// CommandNSPID is the command's pid inside the sandbox.
func (pr *Process) CommandNSPID() int { return pr.nsPID }

// NamespaceKinds are the namespaces [Process.Namespaces] reports, by the
// names /proc/PID/ns gives them.
var NamespaceKinds = []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}

// Namespaces returns the inode number of each of the sandbox's
// namespaces (see NamespaceKinds), read from init's /proc entry: valid
// while the sandbox runs.
func (pr *Process) Namespaces() (map[string]uint64, error) {
	pid := pr.InitPID()
	out := map[string]uint64{}
	for _, k := range NamespaceKinds {
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, k), &st); err != nil {
			if errors.Is(err, unix.ENOENT) && k == "cgroup" {
				continue // a kernel without cgroup namespaces
			}
			return nil, fmt.Errorf("namespaces of the sandbox's init (pid %d): %w", pid, err)
		}
		out[k] = st.Ino
	}
	return out, nil
}

// sendInit sends m on init's channel; the supervisor and Signal share it.
func (l *launch) sendInit(kind msgKind, body any) error {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	return l.ich.send(kind, body)
}

// findChild returns the pid (in this PID namespace) of the child of
// parent whose innermost pid is nsPID, or 0.
func findChild(parent, nsPID int) int {
	if parent <= 0 || nsPID <= 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		ppid, nspid := statusPids(string(b))
		if ppid == parent && nspid == nsPID {
			return pid
		}
	}
	return 0
}

// statusPids reads PPid and the innermost NSpid from /proc/PID/status.
func statusPids(status string) (ppid, nspid int) {
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "PPid":
			ppid, _ = strconv.Atoi(f[0])
		case "NSpid":
			nspid, _ = strconv.Atoi(f[len(f)-1])
		}
	}
	return ppid, nspid
}
