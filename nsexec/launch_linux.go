package nsexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/routes"
)

// TTYMode chooses whether the command gets a pseudo-terminal.
type TTYMode int

const (
	// TTYAuto gives the command a fresh pty, from the sandbox's own devpts,
	// in place of each of its fds 0, 1 and 2 that is a terminal; the
	// others are passed through unchanged. No host terminal descriptor
	// ever reaches the sandbox.
	TTYAuto TTYMode = iota
	// TTYNever never allocates a pty: a terminal among the given stdio
	// reaches the command as it is, with its input queue. Only for an
	// embedder that hands the engine stdio it knows to be safe; the CLI
	// never uses it.
	TTYNever
)

// Jail is the launcher's half of the egress jail (plan.NetJail): the
// userspace network stack that serves the jail's TUN device. The engine
// creates the namespace and the device and applies Routes in it; the Jail
// decides what the traffic may reach.
type Jail interface {
	// Devices are the TUN links to create in the jail's namespace.
	Devices() []TUN
	// Routes is the route plan applied inside the jail's namespace before
	// anything runs there.
	Routes() routes.Plan
	// Attach starts serving the devices, in the order Devices named them.
	// When it returns nil the stack is attached, and only then is the
	// sandbox started.
	Attach(devs []*os.File) error
	// Failed delivers a fatal error of the stack; the sandbox is killed.
	Failed() <-chan error
	// Close stops the stack, after the sandbox has ended.
	Close()
}

// ErrHolderGone is what a LiveJail's apply returns once the jail's holder
// has ended: the jail's namespace and the sandbox in it are gone or going,
// and there is nothing left to update.
var ErrHolderGone = errors.New("the jail's holder ended")

// LiveJail is a Jail whose policy follows the host while the sandbox
// runs. Once the stack is attached, before the command starts, the engine
// calls Live with apply: it installs a new route plan (routes and filter)
// in the jail's namespace, through the holder that owns it, and returns
// when the plan is in force or why it is not. apply is safe to call from
// any goroutine, one call at a time.
type LiveJail interface {
	Jail
	Live(apply func(routes.Plan) error)
}

// Options are the launcher's run-time choices, which are not part of the
// plan because they depend on how the launcher itself was started.
type Options struct {
	Stdin, Stdout, Stderr *os.File // nil means the process's own
	TTY                   TTYMode
	// Warn receives warnings from the stages (nil: printed to Stderr).
	Warn func(string)
	// Jail serves the network of a plan with Net == plan.NetJail.
	Jail Jail
	// ForwardSignals passes the signals this process gets (SIGINT,
	// SIGTERM, SIGHUP, SIGQUIT, and SIGWINCH to the pty) on to the
	// command, as a command-line tool does; [Run] sets it. Without it
	// the process's signals are its own, and [Process.Signal] sends one.
	ForwardSignals bool
	// StageExe is the binary re-executed as the sandbox's stages; empty
	// means this program itself (/proc/self/exe). A program built with
	// cgo (which cannot drop privileges on every thread) can name a
	// static helper built from the same version of this module whose
	// main calls [Init] first: the claude-sandbox binary is one. It must
	// be a path no one else can replace.
	StageExe string
}

// Run builds the sandbox described by p, runs its command to the end and
// returns the status to exit with: the command's own, 128+N if a signal N
// killed it, or one of the Exit* codes with a non-nil error when the
// sandbox could not be built or the command could not be started. The
// signals this process gets (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH)
// are passed on to the command. [Start] is the same in two halves.
func Run(p *plan.Plan, o Options) (int, error) {
	o.ForwardSignals = true
	pr, err := Start(context.Background(), p, o)
	if err != nil {
		return StartErrorCode(err), err
	}
	return pr.Wait()
}

// launch is one run's state on the launcher's side.
type launch struct {
	p *plan.Plan
	o Options

	initParent, initChild *os.File // JSON channel with init
	fdParent, fdChild     *os.File // SEQPACKET: tagged fds (TUN, pty master)
	holderParent          *os.File // JSON channel with the holder (jail only)
	hch                   *channel
	ich                   *channel // init's, once started
	cmd                   *exec.Cmd
	term                  *terminal
	null                  *os.File // the stages' stdio in place of a host terminal
	attached              bool
	fds                   map[byte][]*os.File // received, not yet claimed

	sendMu     sync.Mutex // init's channel: the supervisor and Signal send on it
	mu         sync.Mutex // cmd, initPID and cancelErr, against kill
	initPID    int        // init's pid in this process's PID namespace
	initFD     int        // a pidfd of init when it is not our child, else -1
	cancelErr  error      // set by kill: the start is abandoned
	startedPID int        // the command's pid inside, from init
}

// receive returns the next descriptor tagged tag from the fd channel; the
// holder (TUN links) and init (the pty) both send on it, in any order.
func (l *launch) receive(tag byte) (*os.File, error) {
	if q := l.fds[tag]; len(q) > 0 {
		l.fds[tag] = q[1:]
		return q[0], nil
	}
	for {
		t, f, err := receiveFD(l.fdParent)
		if err != nil {
			return nil, err
		}
		if t == tag {
			return f, nil
		}
		if l.fds == nil {
			l.fds = map[byte][]*os.File{}
		}
		l.fds[t] = append(l.fds[t], f)
	}
}

func (l *launch) closeAll() {
	for _, f := range []*os.File{l.initParent, l.initChild, l.fdParent, l.fdChild, l.holderParent, l.null} {
		if f != nil {
			f.Close()
		}
	}
	for _, q := range l.fds {
		for _, f := range q {
			f.Close()
		}
	}
	if l.term != nil {
		l.term.close()
	}
	if l.attached {
		l.o.Jail.Close()
	}
	if l.initFD >= 0 {
		unix.Close(l.initFD)
		l.initFD = -1
	}
}

// socketPair returns the launcher's end and the stage's end of a new
// socket pair. A SOCK_STREAM pair carries the JSON messages: the
// launcher's end is non-blocking, so that os.NewFile hands it to the
// runtime's poller and a goroutine waiting on it does not hold an OS
// thread for the sandbox's whole life. The SEQPACKET fd channel is read
// with recvmsg directly and stays blocking.
func socketPair(typ int, name string) (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if typ == unix.SOCK_STREAM {
		if err := unix.SetNonblock(fds[0], true); err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name), nil
}

func (l *launch) channels() (err error) {
	if l.initParent, l.initChild, err = socketPair(unix.SOCK_STREAM, "init-channel"); err != nil {
		return err
	}
	l.fdParent, l.fdChild, err = socketPair(unix.SOCK_SEQPACKET, "fd-channel")
	return err
}

func initCloneFlags(p *plan.Plan) uintptr {
	f := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if haveCgroupNS() {
		f |= unix.CLONE_NEWCGROUP
	}
	if p.Net == plan.NetNone {
		f |= unix.CLONE_NEWNET
	}
	return f
}

// start creates the stages and runs init up to the command's start.
func (l *launch) start() (int, error) {
	p, o := l.p, l.o
	if o.TTY == TTYAuto {
		l.term = newTerminal(o.Stdin, o.Stdout, o.Stderr)
	}
	useTTY := l.term != nil
	if useTTY {
		// The stages never hold the host terminal: where the command
		// gets the pty, they get /dev/null.
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return ExitSetup, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		l.null = null
	}
	ch := newChannel(l.initParent)
	l.ich = ch
	if p.Net == plan.NetJail {
		if code, err := l.startHolder(); err != nil {
			return code, err
		}
	} else {
		if err := l.startStage(initCloneFlags(p), l.initChild, l.fdChild); err != nil {
			return ExitSetup, err
		}
		l.setInit(l.cmd.Process.Pid, false)
	}
	l.initChild.Close()
	l.fdChild.Close()
	l.initChild, l.fdChild = nil, nil
	if p.Net != plan.NetJail {
		// Our copies of its ends are closed: a stage that exits without
		// a word is seen at once.
		if err := l.awaitHello(ch); err != nil {
			return ExitSetup, err
		}
	}

	start := message{Kind: msgStart, Stage: "init", Plan: p, TTY: useTTY, WaitGo: p.Net == plan.NetJail}
	if l.term != nil {
		start.PTYFds = l.term.fds
		start.Winsize, start.Termios = l.term.state()
	}
	if err := ch.send(start); err != nil {
		return l.abort(fmt.Errorf("hand the plan to the sandbox: %w", err))
	}
	if p.Net == plan.NetJail {
		// init builds the filesystem view while the jail is completed.
		if code, err := l.completeJail(); err != nil {
			return code, err
		}
		// If init already failed, this send fails too; its error message
		// is read below.
		_ = ch.send(message{Kind: msgGo})
	}
	for {
		m, err := ch.recv()
		if err != nil {
			_ = l.cmd.Wait()
			if err := l.cancelled(); err != nil {
				return ExitSetup, err
			}
			return ExitSetup, fmt.Errorf("sandbox init ended before the command started (%v)", l.cmd.ProcessState)
		}
		switch m.Kind {
		case msgWarning:
			o.Warn(m.Text)
			continue
		case msgError:
			_ = l.cmd.Wait()
			code := m.Code
			if code == 0 {
				code = ExitSetup
			}
			return code, errors.New(m.Text)
		case msgStarted:
			l.startedPID = m.PID
		default:
			continue
		}
		break
	}
	if l.term != nil {
		master, err := l.receive(fdTagPTY)
		if err != nil {
			return l.abort(fmt.Errorf("receive the sandbox's terminal: %w", err))
		}
		l.term.master = master
	}
	return 0, nil
}

// startStage starts the launcher's direct child stage (init, or the
// holder) in new namespaces with the given clone flags; extra become its
// fds 3, 4, ... The caller's host ids map to the plan's.
func (l *launch) startStage(flags uintptr, extra ...*os.File) error {
	stdio := []*os.File{l.o.Stdin, l.o.Stdout, l.o.Stderr}
	if l.term != nil {
		for _, fd := range l.term.fds {
			stdio[fd] = l.null
		}
	}
	cmd, err := stageCommand(flags, l.p.UID, l.p.GID, extra, stdio[0], stdio[1], stdio[2])
	if err != nil {
		return err
	}
	cmd.SysProcAttr.UidMappings[0].HostID = os.Getuid()
	cmd.SysProcAttr.GidMappings[0].HostID = os.Getgid()
	if l.o.StageExe != "" {
		cmd.Path = l.o.StageExe
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancelErr != nil {
		return l.cancelErr
	}
	if err := cmd.Start(); err != nil {
		return explainCloneError(err)
	}
	l.cmd = cmd
	return nil
}

// setInit records init's pid; when init is not this process's child (the
// holder started it), a pidfd of it too, so that the end of the run can
// wait for init, and with it every process of the sandbox, to be gone.
func (l *launch) setInit(pid int, grandchild bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initPID = pid
	if grandchild && l.initFD < 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			l.initFD = fd
		}
	}
	if l.cancelErr != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// kill ends the sandbox at once, whatever stage it is in. With the jail,
// once init is known, only init is killed: the holder reaps it and exits
// with its status, so no zombie is left to the host's init. Before that,
// the launcher's child goes (a holder's death kills init too, by its
// parent-death signal). A start still under way fails with err.
func (l *launch) kill(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancelErr == nil {
		l.cancelErr = err
	}
	if l.initFD >= 0 && unix.PidfdSendSignal(l.initFD, unix.SIGKILL, nil, 0) == nil {
		return
	}
	if l.cmd != nil && l.cmd.Process != nil {
		_ = l.cmd.Process.Kill()
	}
}

// cancelled returns the error kill was given, if it was called.
func (l *launch) cancelled() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancelErr
}

// helloTimeout bounds the wait for a re-executed stage's first message.
// A stage sends it as its first act, milliseconds after exec; only a
// program that never runs the stage (main without Init) stays silent.
var helloTimeout = 30 * time.Second

// awaitHello reads the direct child stage's first message, which says
// that the re-executed binary did run the stage: a program whose main
// forgot to call Init runs its own main instead, and says nothing.
func (l *launch) awaitHello(ch *channel) error {
	var late atomic.Bool
	t := time.AfterFunc(helloTimeout, func() {
		late.Store(true)
		_ = l.cmd.Process.Kill()
	})
	m, err := ch.recv()
	t.Stop()
	if err == nil && m.Kind == msgHello {
		return nil
	}
	_ = l.cmd.Process.Kill()
	_ = l.cmd.Wait()
	if err := l.cancelled(); err != nil {
		return err
	}
	exe := l.o.StageExe
	if exe == "" {
		exe = "this program"
	}
	how := fmt.Sprintf("it ended (%v) without a word", l.cmd.ProcessState)
	if late.Load() {
		how = fmt.Sprintf("it said nothing for %v", helloTimeout)
	} else if err == nil {
		how = fmt.Sprintf("it answered %q instead", m.Kind)
	}
	return fmt.Errorf("the sandbox's stage did not start: %s was re-executed to run it, but %s. "+
		"Call sandbox.Init() (or nsexec.Init()) as the first statement of main, before flags or anything else, "+
		"and build the stage binary from the same version of claude-sandbox", exe, how)
}

// startHolder starts the jail's holder stage and attaches the userstack to
// its TUN device; on success init is running inside the jail.
func (l *launch) startHolder() (int, error) {
	p, o := l.p, l.o
	holderParent, holderChild, err := socketPair(unix.SOCK_STREAM, "holder-channel")
	if err != nil {
		return ExitSetup, err
	}
	l.holderParent = holderParent
	defer holderChild.Close()
	// fds: 3 holder channel, 4 fd channel, 5 init's channel (initChanFD).
	if err := l.startStage(unix.CLONE_NEWUSER|unix.CLONE_NEWNET, holderChild, l.fdChild, l.initChild); err != nil {
		return ExitSetup, err
	}
	holderChild.Close()
	l.fdChild.Close()
	l.fdChild = nil
	l.hch = newChannel(holderParent)
	if err := l.awaitHello(l.hch); err != nil {
		return ExitSetup, err
	}
	rp := o.Jail.Routes()
	if err := l.hch.send(message{Kind: msgStart, Stage: "holder", Routes: &rp, Devices: o.Jail.Devices(), CloneInit: initCloneFlags(p)}); err != nil {
		return l.abort(fmt.Errorf("start the jail: %w", err))
	}
	return 0, nil
}

// holderFailed reports why the holder ended: its error message if it sent
// one, else fallback.
func (l *launch) holderFailed(fallback error) (int, error) {
	for {
		m, err := l.hch.recv()
		if err != nil {
			break
		}
		if m.Kind == msgWarning {
			l.o.Warn(m.Text)
		}
		if m.Kind == msgError {
			_ = l.cmd.Wait()
			return ExitSetup, errors.New(m.Text)
		}
	}
	return l.abort(fallback)
}

// completeJail receives the jail's TUN links, waits for the holder's
// routes to be locked, and attaches the userstack.
func (l *launch) completeJail() (int, error) {
	var tuns []*os.File
	defer func() {
		for _, f := range tuns {
			f.Close()
		}
	}()
	for range l.o.Jail.Devices() {
		tun, err := l.receive(fdTagTUN)
		if err != nil {
			return l.holderFailed(fmt.Errorf("egress jail: no TUN device from the holder (%w)", err))
		}
		tuns = append(tuns, tun)
	}
	for locked := false; !locked; {
		m, err := l.hch.recv()
		if err != nil {
			return l.holderFailed(fmt.Errorf("egress jail: the holder ended while locking routes (%w)", err))
		}
		switch m.Kind {
		case msgWarning:
			l.o.Warn(m.Text)
		case msgError:
			_ = l.cmd.Wait()
			return ExitSetup, errors.New(m.Text)
		case msgRoutesLocked:
			locked = true
		case msgInitStarted:
			l.setInit(m.PID, true)
		}
	}
	if err := l.o.Jail.Attach(tuns); err != nil {
		return l.abort(fmt.Errorf("egress jail: the userstack cannot attach to the TUN device: %w; %s", err, tunFixes))
	}
	l.attached = true
	if lj, ok := l.o.Jail.(LiveJail); ok {
		lj.Live(l.holderUpdates())
	}
	return 0, nil
}

// holderUpdates reads the holder's channel from now on (its warnings,
// and its answers to policy updates) and returns the function that sends
// it an update and waits for the answer.
func (l *launch) holderUpdates() func(routes.Plan) error {
	answers := make(chan string)
	go func() {
		defer close(answers)
		for {
			m, err := l.hch.recv()
			if err != nil {
				return
			}
			switch m.Kind {
			case msgWarning:
				l.o.Warn(m.Text)
			case msgPolicyApplied:
				answers <- m.Text
			}
		}
	}()
	var mu sync.Mutex
	return func(rp routes.Plan) error {
		mu.Lock()
		defer mu.Unlock()
		if err := l.hch.send(message{Kind: msgPolicyUpdate, Routes: &rp}); err != nil {
			return fmt.Errorf("%w (%v)", ErrHolderGone, err)
		}
		text, ok := <-answers
		if !ok {
			return ErrHolderGone
		}
		if text != "" {
			return errors.New(text)
		}
		return nil
	}
}

// abort kills the stage and reports err. Closing init's channel first
// ends an init that has not armed its parent-death signal yet.
func (l *launch) abort(err error) (int, error) {
	if l.initParent != nil {
		l.initParent.Close()
		l.initParent = nil
	}
	if l.cmd != nil && l.cmd.Process != nil {
		_ = l.cmd.Process.Kill()
		_ = l.cmd.Wait()
	}
	if cerr := l.cancelled(); cerr != nil {
		return ExitSetup, cerr
	}
	return ExitSetup, err
}

// supervise relays the terminal and signals until the sandbox ends.
func (l *launch) supervise(sigs chan os.Signal) (int, error) {
	var relay sync.WaitGroup
	if l.term != nil {
		if l.term.input {
			if err := l.term.makeRaw(); err != nil {
				l.o.Warn(fmt.Sprintf("cannot put the terminal in raw mode: %v", err))
			}
		}
		l.term.relay(&relay)
	}
	var failed <-chan error
	if l.attached {
		failed = l.o.Jail.Failed()
	}
	var stackErr error
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == unix.SIGWINCH {
					if l.term != nil {
						l.term.syncSize()
					}
					continue
				}
				// Over init's channel, not kill(): init drops the
				// signals it is sent directly (see catchAll).
				_ = l.sendInit(message{Kind: msgSignal, Code: int(s.(unix.Signal))})
			case err := <-failed:
				// Fail closed: without its stack the jail must not live on.
				mu.Lock()
				stackErr = err
				mu.Unlock()
				_ = l.cmd.Process.Kill()
				failed = nil
			case <-done:
				return
			}
		}
	}()
	awaitExit(l.cmd.Process.Pid)
	werr := l.cmd.Wait()
	close(done)
	l.waitInitGone()
	relay.Wait() // the pty's output, to its last byte
	if l.term != nil {
		l.term.restore()
	}
	mu.Lock()
	defer mu.Unlock()
	if stackErr != nil {
		return ExitSetup, fmt.Errorf("egress jail: the userstack failed (%w); the sandbox was stopped", stackErr)
	}
	if cerr := l.cancelled(); cerr != nil {
		return exitCode(l.cmd.ProcessState), cerr
	}
	if l.cmd.ProcessState == nil {
		return ExitSetup, werr
	}
	return exitCode(l.cmd.ProcessState), nil
}

// awaitExit returns once the child pid has ended (it stays to be reaped).
// It waits in the runtime's poller on a pidfd: os.Process.Wait blocks in
// waitid, which holds an OS thread for the sandbox's whole life. Where
// pidfds are missing it returns at once, and Wait blocks as before.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		// Not yet: WNOHANG leaves info zeroed. Any error ends the wait
		// here; Wait then reports it or blocks.
		return err != nil || info.Signo != 0
	})
}

var haveCgroupNS = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/ns/cgroup")
	return err == nil
})

// explainCloneError turns a failed clone into a message that names the
// likely cause and the fix.
func explainCloneError(err error) error {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("start the sandbox: %w", err)
	}
	return fmt.Errorf("start the sandbox: %w: %s", err, userNSHint(readSysctl))
}

func readSysctl(name string) (string, bool) {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// userNSHint says why user namespaces may be unavailable, from the sysctls
// known to switch them off.
func userNSHint(sysctl func(string) (string, bool)) string {
	var hints []string
	if v, ok := sysctl("user.max_user_namespaces"); ok && v == "0" {
		hints = append(hints, "user namespaces are disabled (user.max_user_namespaces = 0): sysctl -w user.max_user_namespaces=15000")
	}
	if v, ok := sysctl("kernel.unprivileged_userns_clone"); ok && v == "0" {
		hints = append(hints, "unprivileged user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1")
	}
	if v, ok := sysctl("kernel.apparmor_restrict_unprivileged_userns"); ok && v == "1" {
		hints = append(hints, "AppArmor restricts unprivileged user namespaces: install an AppArmor profile for this binary, or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")
	}
	if len(hints) == 0 {
		return "unprivileged user namespaces seem unavailable (in a container, run it with --security-opt seccomp=unconfined or a profile that allows clone with CLONE_NEWUSER; check user.max_user_namespaces)"
	}
	return strings.Join(hints, "; ")
}

// terminal is the host side of the command's pty: the master (opened by
// init inside the sandbox's devpts and passed back) and the host terminal
// state to restore.
//
// The pty stands in for exactly those of the command's fds 0, 1 and 2 that
// were terminals (fds); the rest are passed through as they are, so a
// redirected stream stays a plain pipe or file. Keystrokes are relayed
// only when stdin was the terminal (input); otherwise the host terminal is
// never read and never put in raw mode.
type terminal struct {
	host   *os.File  // the terminal whose size and settings the pty copies
	in     *os.File  // stdin, when it is the terminal
	out    io.Writer // where the pty's output goes
	fds    []int     // the command's fds that get the pty
	input  bool      // stdin is a terminal: relay keystrokes, raw mode
	master *os.File
	saved  *unix.Termios
	once   sync.Once
}

// newTerminal returns the pty plan for the launcher's stdio, or nil when
// none of it is a terminal.
func newTerminal(stdin, stdout, stderr *os.File) *terminal {
	t := &terminal{}
	stdio := []*os.File{stdin, stdout, stderr}
	var outTTY *os.File
	for fd, f := range stdio {
		if !isTerminal(f) {
			continue
		}
		t.fds = append(t.fds, fd)
		if t.host == nil {
			t.host = f
		}
		if fd > 0 && outTTY == nil {
			outTTY = f
		}
	}
	if len(t.fds) == 0 {
		return nil
	}
	t.input = t.fds[0] == 0
	if t.input {
		t.in = stdin
	}
	if outTTY == nil {
		// Only stdin is the terminal: its echo goes back to it. A
		// terminal opened read-only refuses the write; the output is
		// then dropped rather than left to fill the pty.
		outTTY = stdin
	}
	t.out = &dropOnError{w: outTTY}
	return t
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// state returns the host terminal's size and settings, which the new pty
// starts with. When the host terminal stays in cooked mode (stdin is not
// the terminal), it translates newlines itself, so the pty's output
// processing is switched off: one translation, not two.
func (t *terminal) state() (*unix.Winsize, *unix.Termios) {
	ws, _ := unix.IoctlGetWinsize(int(t.host.Fd()), unix.TIOCGWINSZ)
	tio, _ := unix.IoctlGetTermios(int(t.host.Fd()), unix.TCGETS)
	if tio != nil && !t.input {
		tio.Oflag &^= unix.OPOST
	}
	return ws, tio
}

func (t *terminal) syncSize() {
	if t.master == nil {
		return
	}
	ws, err := unix.IoctlGetWinsize(int(t.host.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return
	}
	// Not master.Fd(), which would take the master out of non-blocking
	// mode (see receiveFD).
	if rc, err := t.master.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) })
	}
}

// makeRaw puts the host terminal (stdin) in raw mode: the pty inside does
// the line discipline.
func (t *terminal) makeRaw() error {
	fd := int(t.in.Fd())
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	saved := *tio
	t.saved = &saved
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag &^= unix.CSIZE | unix.PARENB
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN] = 1
	tio.Cc[unix.VTIME] = 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, tio)
}

// restore puts the host terminal back the way it was; safe to call twice.
func (t *terminal) restore() {
	t.once.Do(func() {
		if t.saved != nil {
			_ = unix.IoctlSetTermios(int(t.in.Fd()), unix.TCSETS, t.saved)
		}
	})
}

// relay copies keystrokes in (stdin is the terminal only) and output out.
// The output copy ends when the last holder of the pty's slave side (the
// sandbox) is gone.
func (t *terminal) relay(wg *sync.WaitGroup) {
	if t.input {
		go func() { _, _ = io.Copy(t.master, t.in) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(t.out, t.master)
	}()
}

func (t *terminal) close() {
	t.restore()
	if t.master != nil {
		t.master.Close()
	}
}

// dropOnError writes to w until a write fails, then discards: the pty is
// still drained, so the command never blocks on a full terminal buffer.
type dropOnError struct {
	w      io.Writer
	failed bool
}

func (d *dropOnError) Write(p []byte) (int, error) {
	if !d.failed {
		if _, err := d.w.Write(p); err != nil {
			d.failed = true
		}
	}
	return len(p), nil
}
