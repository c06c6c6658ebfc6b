package nsexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/plan"
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
	// ThreadsNeverEnd says that no thread of this process ends while the
	// sandbox runs (no goroutine locked to its thread returns). The
	// stages are then started from the calling thread, as it is. Without
	// it they are started from a thread that lives as long as the process
	// (the main thread when the caller is on it, else one kept for this),
	// because their parent-death signal follows the thread that started
	// them, not the process. The claude-sandbox command sets it; a
	// program that cannot promise it must leave it unset.
	ThreadsNeverEnd bool
	// StageExe is the binary re-executed as the sandbox's stages; empty
	// means this program itself (/proc/self/exe). A program built with
	// cgo (which cannot drop privileges on every thread) can name a
	// static helper built from the same version of this module whose
	// main calls [Init] first: the claude-sandbox binary is one. It must
	// be a path no one else can replace.
	StageExe string
	// Logger, when set, receives every stage message the launcher sends
	// and receives, at debug level (see protocol.go); nil: none.
	Logger *slog.Logger
	// Clipboard lets the command write the host terminal's clipboard
	// (OSC 52) when that terminal is also its input (an interactive
	// session, in which Claude Code copies that way). Off, or when the
	// terminal is only the command's output, those writes are dropped;
	// clipboard reads never pass. See termFilter.
	Clipboard bool
	// Early is init started ahead of the plan by [Prestart]: [Start]
	// (or [Run]) takes it when it suits the plan, and stops it
	// otherwise.
	Early *Early
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
	cmd                   *stageCmd
	term                  *terminal
	cg                    *pidsCgroup // the process limit, where pid_max cannot be set
	null                  *os.File    // the stages' stdio in place of a host terminal
	flush                 []*os.File  // the host terminals among stdio, duplicated: their input is discarded at the end
	attached              bool
	fds                   map[byte][]*os.File // received, not yet claimed

	sendMu     sync.Mutex // init's channel: the supervisor and Signal send on it
	mu         sync.Mutex // cmd, initPID and cancelErr, against kill
	initPID    int        // init's pid in this process's PID namespace
	initFD     int        // with the jail: a pidfd of init, else -1
	initChan   uint64     // with the jail: the inode of init's end of its channel
	holderDone chan struct{}
	waited     bool
	status     int    // init's exit status, once waited for
	statusText string // how init ended, for messages
	cancelErr  error  // set by kill: the start is abandoned
	startedPID int    // the command's pid inside, from init
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
	for _, f := range append([]*os.File{l.initParent, l.initChild, l.fdParent, l.fdChild, l.holderParent, l.null}, l.flush...) {
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
	if l.cg != nil {
		l.cg.remove() // init is reaped by now, or killed and reaped by abort
		l.cg = nil
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

// terminalSetup decides which of the command's fds get a pty and opens
// the /dev/null the stages get in their place.
func (l *launch) terminalSetup() error {
	if l.o.TTY == TTYAuto {
		l.term = newTerminal(l.o.Stdin, l.o.Stdout, l.o.Stderr, l.o.Clipboard)
	}
	// Kept by descriptors of our own: an embedder may close its stdio
	// files once the sandbox has started (package sandbox does), and a
	// number reused meanwhile must not be flushed.
	if l.flush == nil {
		l.flush = dupTerminals(l.o.Stdin, l.o.Stdout, l.o.Stderr)
	}
	if l.term != nil {
		// The stages never hold the host terminal: where the command
		// gets the pty, they get /dev/null.
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		l.null = null
	}
	return nil
}

// spawnInit starts init directly (no jail) and closes the launcher's
// copies of its ends of the channels.
func (l *launch) spawnInit() error {
	if err := l.startStage(initCloneFlags(l.p), false, l.initChild, l.fdChild); err != nil {
		return err
	}
	l.setInit(l.cmd.Process.Pid, false)
	l.closeChildEnds()
	return nil
}

// closeChildEnds closes the launcher's copies of the stage's ends of its
// channels, once a stage holds them.
func (l *launch) closeChildEnds() {
	l.initChild.Close()
	l.fdChild.Close()
	l.initChild, l.fdChild = nil, nil
}

// start creates the stages and runs init up to the command's start. With
// spawned, init was started already (see [Prestart]).
func (l *launch) start(spawned bool) (int, error) {
	p := l.p
	if !spawned {
		if err := l.terminalSetup(); err != nil {
			return ExitSetup, err
		}
	}
	useTTY := l.term != nil
	ch := l.newChannel(l.initParent, "init")
	l.ich = ch
	if p.Net == plan.NetJail {
		if code, err := l.startHolder(); err != nil {
			return code, err
		}
		l.closeChildEnds()
	} else if !spawned {
		if err := l.spawnInit(); err != nil {
			return ExitSetup, err
		}
	}
	// Encoded while init is still starting, off the launch's path.
	start := startInit{Plan: p, TTY: useTTY, WaitGo: p.Net == plan.NetJail, Ignored: startIgnored}
	if l.term != nil {
		start.PTYFds = l.term.fds
		start.Winsize, start.Termios = l.term.state()
	}
	if p.PidsLimit > 0 {
		if unsettable, why := pidMaxUnsettable(); unsettable {
			cg, err := newPidsCgroup(p.PidsLimit)
			if err != nil {
				start.PidsNoCgroup = fmt.Sprintf("%s, and no pids cgroup could be made (%v)", why, err)
			} else {
				l.cg, start.PidsCgroup = cg, true
			}
		}
	}
	startMsg, err := encodeMsg(msgStartInit, start)
	if err != nil {
		return l.abort(fmt.Errorf("hand the plan to the sandbox: %w", err))
	}
	if p.Net != plan.NetJail {
		// Our copies of its ends are closed: a stage that exits without
		// a word is seen at once.
		if err := l.awaitHello(ch); err != nil {
			return ExitSetup, err
		}
		// Before init has the plan: it forks nothing before.
		if err := l.enterCgroup(); err != nil {
			return l.abort(err)
		}
	}
	sendErr := ch.sendEncoded(startMsg)
	if sendErr != nil && p.Net != plan.NetJail {
		return l.abort(fmt.Errorf("hand the plan to the sandbox: %w", sendErr))
	}
	if p.Net == plan.NetJail {
		// init builds the filesystem view while the jail is completed.
		// (If init is gone already, the holder killed it on failing:
		// its reason comes first.)
		if code, err := l.completeJail(); err != nil {
			return code, err
		}
		if sendErr != nil {
			return l.abort(fmt.Errorf("hand the plan to the sandbox: %w", sendErr))
		}
		// init's hello was sent before it read its start (sent above,
		// buffered meanwhile); it is read here, once the jail is done.
		if err := l.awaitHello(ch); err != nil {
			return ExitSetup, err
		}
		// Before "go": init forks nothing before it.
		if err := l.enterCgroup(); err != nil {
			return l.abort(err)
		}
		// If init already failed, this send fails too; its error
		// message is read below.
		_ = ch.send(msgGo, nil)
	}
	var started pidMsg
	if err := ch.expect(msgStarted, &started); err != nil {
		return l.stageFailed(err, "sandbox init ended before the command started")
	}
	l.startedPID = started.PID
	if l.term != nil {
		master, err := l.receive(fdTagPTY)
		if err != nil {
			return l.abort(fmt.Errorf("receive the sandbox's terminal: %w", err))
		}
		l.term.master = master
	}
	return 0, nil
}

// enterCgroup moves init into the sandbox's pids cgroup, if it has one.
func (l *launch) enterCgroup() error {
	if l.cg == nil {
		return nil
	}
	l.mu.Lock()
	pid := l.initPID
	l.mu.Unlock()
	return l.cg.add(pid)
}

// newChannel opens the launcher's end of a stage's channel: warnings go
// to the user, every message to the debug log.
func (l *launch) newChannel(f *os.File, peer string) *channel {
	ch := newChannel(f, peer)
	ch.warn, ch.log = l.o.Warn, l.o.Logger
	return ch
}

// stageFailed turns what expect returned while the launch waited on a
// stage into the launch's result: the stage's own error and status, a
// protocol error, or (the stage ended without a word) what the exit
// status says, after ended.
func (l *launch) stageFailed(err error, ended string) (int, error) {
	if err == nil {
		// The stage went on as if nothing failed: stop it.
		return l.abort(errors.New(ended))
	}
	var f *stageFailure
	if errors.As(err, &f) {
		if l.p.Net == plan.NetJail {
			// The holder exits once set up, init when it failed; the
			// other stage must not live on.
			l.killStages()
		}
		l.wait()
		if cerr := l.cancelled(); cerr != nil {
			return ExitSetup, cerr
		}
		return f.exitCode(), errors.New(f.Text)
	}
	var pe *protocolError
	if errors.As(err, &pe) {
		return l.abort(err)
	}
	if l.p.Net == plan.NetJail {
		l.killStages()
	}
	l.wait()
	if cerr := l.cancelled(); cerr != nil {
		return ExitSetup, cerr
	}
	return ExitSetup, fmt.Errorf("%s (%s)", ended, l.statusText)
}

// startStage starts the launcher's direct child stage (init, or the
// holder when holder is set) in new namespaces with the given clone
// flags; extra become its fds 3, 4, ... The caller's host ids map to the
// plan's.
func (l *launch) startStage(flags uintptr, holder bool, extra ...*os.File) error {
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
	if holder {
		cmd.Args = append(cmd.Args, holderArg)
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
	start := cmd.Start
	if !l.o.ThreadsNeverEnd {
		start = func() error { return onLastingThread(cmd.Start) }
	}
	if err := start(); err != nil {
		return explainCloneError(err)
	}
	l.cmd = cmd
	return nil
}

// setInit records init's pid; when the holder started it (init is then
// this process's child all the same, see holder), a pidfd of it too, to
// kill it by.
func (l *launch) setInit(pid int, jailed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initPID = pid
	if jailed && l.initFD < 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			l.initFD = fd
		}
	}
	if l.cancelErr != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// kill ends the sandbox at once, whatever stage it is in: init (every
// process of the sandbox dies with it) and, with the jail, the holder if
// it is still setting up. A start still under way fails with err.
func (l *launch) kill(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancelErr == nil {
		l.cancelErr = err
	}
	l.killStagesLocked()
}

// killStages kills the stages without cancelling the start.
func (l *launch) killStages() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.killStagesLocked()
}

func (l *launch) killStagesLocked() {
	if l.initFD >= 0 {
		_ = unix.PidfdSendSignal(l.initFD, unix.SIGKILL, nil, 0)
	}
	if l.cmd != nil && l.cmd.Process != nil {
		_ = l.cmd.Process.Kill()
	}
}

// wait reaps the stages once they end and returns init's exit status.
// Without the jail init is the launcher's child stage. With it the holder
// is, and init is a child of the launcher too (the holder starts it with
// CLONE_PARENT and exits after setup): both are reaped, so no zombie is
// left to the host's init; reaping init means every process of the
// sandbox is gone (the kernel empties a PID namespace before its init's
// exit completes).
func (l *launch) wait() int {
	if l.waited {
		return l.status
	}
	l.waited = true
	if l.p.Net != plan.NetJail {
		awaitExit(l.cmd.Process.Pid) // in the poller, not on a thread
		_ = l.cmd.Wait()
		l.status, l.statusText = exitCode(l.cmd.ProcessState), fmt.Sprint(l.cmd.ProcessState)
		return l.status
	}
	if l.holderDone != nil {
		<-l.holderDone
	} else {
		_ = l.cmd.Wait()
	}
	l.mu.Lock()
	pid := l.initPID
	l.mu.Unlock()
	if pid == 0 {
		// The holder died before it could say init's pid (killed right
		// after starting it): init, if it started, is our child all
		// the same and must not be left behind.
		if pid = l.findInit(); pid == 0 {
			l.status, l.statusText = exitCode(l.cmd.ProcessState), "holder "+fmt.Sprint(l.cmd.ProcessState)
			return l.status
		}
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	awaitExit(pid)
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err != unix.EINTR {
			if err != nil {
				l.status, l.statusText = ExitSetup, fmt.Sprintf("init not reaped: %v", err)
				return l.status
			}
			break
		}
	}
	l.status = statusCode(ws)
	l.statusText = fmt.Sprintf("exit status %d", ws.ExitStatus())
	if ws.Signaled() {
		l.statusText = "signal: " + ws.Signal().String()
	}
	return l.status
}

// findInit returns the pid of this launch's init among this process's
// children (the one holding init's end of its channel), or 0.
func (l *launch) findInit() int {
	if l.initChan == 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := fmt.Sprintf("socket:[%d]", l.initChan)
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		if ppid, _ := statusPids(string(b)); ppid != self {
			continue
		}
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, stageFD)); err == nil && link == want {
			return pid
		}
	}
	return 0
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
		l.killStages()
	})
	err := ch.expect(msgHello, nil)
	t.Stop()
	if err == nil {
		return nil
	}
	l.killStages()
	l.wait()
	if err := l.cancelled(); err != nil {
		return err
	}
	exe := l.o.StageExe
	if exe == "" {
		exe = "this program"
	}
	how := fmt.Sprintf("it ended (%s) without a word", l.statusText)
	var f *stageFailure
	var pe *protocolError
	switch {
	case late.Load():
		how = fmt.Sprintf("it said nothing for %v", helloTimeout)
	case errors.As(err, &f):
		// A stage that runs but failed before its hello: its own words.
		return errors.New(f.Text)
	case errors.As(err, &pe):
		how = fmt.Sprintf("it answered out of turn (%v)", pe.err)
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
	// init's end of its channel names init among our children, should
	// the holder die before it says init's pid (see wait).
	var st unix.Stat_t
	if unix.Fstat(int(l.initChild.Fd()), &st) == nil {
		l.initChan = st.Ino
	}
	// fds: 3 holder channel, 4 fd channel, 5 init's channel (initChanFD).
	if err := l.startStage(unix.CLONE_NEWUSER|unix.CLONE_NEWNET, true, holderChild, l.fdChild, l.initChild); err != nil {
		return ExitSetup, err
	}
	holderChild.Close()
	l.fdChild.Close()
	l.fdChild = nil
	l.hch = l.newChannel(holderParent, "holder")
	if err := l.awaitHello(l.hch); err != nil {
		return ExitSetup, err
	}
	driver, data, err := o.Jail.Child()
	if err != nil {
		return l.abort(fmt.Errorf("egress jail: %w", err))
	}
	if err := l.hch.send(msgStartHolder, startHolder{Driver: driver, Data: data, CloneInit: initCloneFlags(p)}); err != nil {
		return l.abort(fmt.Errorf("start the jail: %w", err))
	}
	var started pidMsg
	if err := l.hch.expect(msgInitStarted, &started); err != nil {
		return l.stageFailed(err, "egress jail: the holder ended before it started the sandbox")
	}
	l.setInit(started.PID, true)
	return 0, nil
}

// completeJail waits for the jail's child driver to finish setting up
// the namespace, receives what it passed, and attaches the jail.
func (l *launch) completeJail() (int, error) {
	var ready netReady
	if err := l.hch.expect(msgNetReady, &ready); err != nil {
		return l.stageFailed(err, "egress jail: the holder ended while setting up the jail's network")
	}
	// The holder's work is done: it exits now. Reaped in the background
	// (its wait parks in the poller, not on a thread).
	holder := l.cmd
	l.holderDone = make(chan struct{})
	go func() {
		defer close(l.holderDone)
		awaitExit(holder.Process.Pid)
		_ = holder.Wait()
	}()
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for range ready.Files {
		f, err := l.receive(fdTagNet)
		if err != nil {
			return l.abort(fmt.Errorf("egress jail: a descriptor from the holder is missing (%w)", err))
		}
		files = append(files, f)
	}
	if a, ok := l.o.Jail.(InitAware); ok {
		l.mu.Lock()
		pid := l.initPID
		l.mu.Unlock()
		a.SetInitPID(pid)
	}
	if err := l.o.Jail.Attach(files, ready.Reply); err != nil {
		return l.abort(fmt.Errorf("egress jail: %w", err))
	}
	l.attached = true
	return 0, nil
}

// abort kills the stage and reports err. Closing init's channel first
// ends an init that has not armed its parent-death signal yet.
func (l *launch) abort(err error) (int, error) {
	if l.initParent != nil {
		l.initParent.Close()
		l.initParent = nil
	}
	if l.cmd != nil && l.cmd.Process != nil {
		l.killStages()
		l.wait()
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
				// signals it is sent directly (see dropSignals).
				_ = l.sendInit(msgSignal, signalMsg{Signal: int(s.(unix.Signal))})
			case err := <-failed:
				// Fail closed: without its stack the jail must not live on.
				mu.Lock()
				stackErr = err
				mu.Unlock()
				l.killStages()
				failed = nil
			case <-done:
				return
			}
		}
	}()
	code := l.wait()
	close(done)
	relay.Wait() // the pty's output, to its last byte
	if l.term != nil {
		l.term.restore()
	}
	flushInput(l.flush)
	mu.Lock()
	defer mu.Unlock()
	if stackErr != nil {
		return ExitSetup, fmt.Errorf("egress jail: the userstack failed (%w); the sandbox was stopped", stackErr)
	}
	if cerr := l.cancelled(); cerr != nil {
		return code, cerr
	}
	return code, nil
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
		const unmask = "run the outermost container with an unmasked /proc (Docker: --security-opt systempaths=unconfined; Podman: --security-opt unmask=ALL)"
		masked := procMasked()
		if masked && (!seccompFiltered() || insideSandbox()) {
			// Seccomp is not the cause to name here (a sandbox inside a
			// sandbox in the /proc fallback runs under its own filter,
			// which allows this; or no filter is in force): /proc is.
			return "this /proc is read-only or partly masked (a container runtime's masks, or a sandbox running in the /proc fallback): the kernel refuses new user namespaces a fresh procfs here; " + unmask
		}
		if !seccompFiltered() {
			return "unprivileged user namespaces seem unavailable, and no seccomp filter is in force here: check user.max_user_namespaces and the container's capabilities and user namespace setup"
		}
		h := "unprivileged user namespaces seem unavailable (in a container, run it with --security-opt seccomp=unconfined or a profile that allows clone with CLONE_NEWUSER; check user.max_user_namespaces)"
		if masked {
			h += "; and for full strength " + unmask
		}
		return h
	}
	return strings.Join(hints, "; ")
}

// procMasked reports whether /proc is mounted read-only or has mounts over
// parts of it (a container runtime's masks, such as /dev/null over
// /proc/kcore, or the read-only /proc/sys): a test replaces it.
var procMasked = func() bool {
	var st unix.Statfs_t
	if unix.Statfs("/proc", &st) == nil && st.Flags&unix.ST_RDONLY != 0 {
		return true
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], "/proc/") && !strings.HasPrefix(f[4], "/proc/sys/fs/binfmt_misc") {
			return true
		}
	}
	return false
}

// insideSandbox reports whether this process runs in a claude-sandbox
// sandbox (no_new_privs and the marker): a test replaces it.
var insideSandbox = func() bool {
	b, _ := os.ReadFile("/proc/self/status")
	if !strings.Contains(string(b), "NoNewPrivs:\t1") {
		return false
	}
	_, err := os.Lstat("/tmp/.claude-sandbox")
	return err == nil || os.Getenv("IS_SANDBOX") == "1"
}

// seccompFiltered reports whether a seccomp filter is in force here
// (/proc/self/status Seccomp: 2): a test replaces it.
var seccompFiltered = func() bool {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return true
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
//
// The output goes through a termFilter: when the terminal it reaches is
// not the command's input (stdin is not that terminal), whatever would
// make the terminal answer is dropped, since the answer would be typed
// into the host's shell; when it is, the answers come back to the
// command, and only what touches the clipboard (or outlives the session)
// is dropped.
type terminal struct {
	host   *os.File      // the terminal whose size and settings the pty copies
	in     *os.File      // stdin, when it is the terminal
	out    *filterWriter // where the pty's output goes
	fds    []int         // the command's fds that get the pty
	input  bool          // stdin is a terminal: relay keystrokes, raw mode
	master *os.File
	saved  *unix.Termios
	once   sync.Once
}

// newTerminal returns the pty plan for the launcher's stdio, or nil when
// none of it is a terminal.
func newTerminal(stdin, stdout, stderr *os.File, clipboard bool) *terminal {
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
	// Answers reach the command only where the terminal written to is
	// the one read from.
	interactive := t.input && sameTerminal(stdin, outTTY)
	t.out = &filterWriter{f: newTermFilter(interactive, clipboard), w: &dropOnError{w: outTTY}}
	return t
}

// sameTerminal reports whether a and b are the same terminal device.
func sameTerminal(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Rdev == sb.Rdev && sa.Mode&unix.S_IFMT == unix.S_IFCHR && sb.Mode&unix.S_IFMT == unix.S_IFCHR
}

// flushInput discards what is pending in the input of each terminal of
// terms (dupTerminals' duplicates of the launcher's stdio: one per
// terminal device) once the sandbox has ended: an answer the terminal
// gave to something the command wrote, or anything typed for the command
// and not read, is not left for the host's shell to run. A terminal whose
// foreground job is not this process's is left alone (tcflush from the
// background stops the process with SIGTTOU, and the input is that job's).
func flushInput(terms []*os.File) {
	for _, f := range terms {
		fd := int(f.Fd())
		if pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && pg != unix.Getpgrp() {
			continue
		}
		_ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH)
	}
}

// dupTerminals returns a close-on-exec duplicate of each terminal among
// files, one per terminal device (what flushInput flushes at the end).
func dupTerminals(files ...*os.File) []*os.File {
	var out []*os.File
	seen := map[uint64]bool{}
	for _, f := range files {
		if f == nil || !isTerminal(f) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) != nil || seen[st.Rdev] {
			continue
		}
		seen[st.Rdev] = true
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			continue
		}
		out = append(out, os.NewFile(uintptr(fd), f.Name()))
	}
	return out
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
		_ = t.out.Close()
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
