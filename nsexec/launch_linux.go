package nsexec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/plan"
)

// TTYMode chooses whether the command gets a pseudo-terminal.
type TTYMode int

const (
	// TTYAuto gives the command a fresh pty when stdin is a terminal.
	TTYAuto TTYMode = iota
	// TTYNever never allocates a pty.
	TTYNever
)

// Options are the launcher's run-time choices, which are not part of the
// plan because they depend on how the launcher itself was started.
type Options struct {
	Stdin, Stdout, Stderr *os.File // nil means the process's own
	TTY                   TTYMode
	// Warn receives warnings from the stages (nil: printed to Stderr).
	Warn func(string)
}

// Run builds the sandbox described by p, runs its command to the end and
// returns the status to exit with: the command's own, 128+N if a signal N
// killed it, or one of the Exit* codes with a non-nil error when the
// sandbox could not be built or the command could not be started.
func Run(p *plan.Plan, o Options) (int, error) {
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
	ambient, err := allCaps()
	if err != nil {
		return ExitSetup, fmt.Errorf("read the kernel's capability count: %w", err)
	}

	// Catch the forwarded signals from the start: one that arrives while
	// the sandbox is being built waits here, and is passed on once the
	// command runs, instead of killing the launcher.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGWINCH)
	defer signal.Stop(sigs)

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return ExitSetup, fmt.Errorf("stage channel: %w", err)
	}
	parentEnd := os.NewFile(uintptr(fds[0]), "stage-channel")
	childEnd := os.NewFile(uintptr(fds[1]), "stage-channel")
	defer parentEnd.Close()

	useTTY := o.TTY == TTYAuto && isTerminal(o.Stdin)
	extra := []*os.File{childEnd} // becomes fd 3 (stageFD)
	var term *terminal
	var ptyParent *os.File
	if useTTY {
		pfds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			childEnd.Close()
			return ExitSetup, fmt.Errorf("pty channel: %w", err)
		}
		ptyParent = os.NewFile(uintptr(pfds[0]), "pty-channel")
		ptyChild := os.NewFile(uintptr(pfds[1]), "pty-channel")
		defer ptyParent.Close()
		defer ptyChild.Close()
		extra = append(extra, ptyChild) // fd 4 (ptyFD)
		term = &terminal{host: o.Stdin}
		defer term.close()
	}

	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{stageMarker},
		Env:        []string{},
		Stdin:      o.Stdin,
		Stdout:     o.Stdout,
		Stderr:     o.Stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  cloneFlags(p),
			UidMappings: []syscall.SysProcIDMap{{ContainerID: p.UID, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: p.GID, HostID: os.Getgid(), Size: 1}},
			// Required for an unprivileged caller to write gid_map.
			GidMappingsEnableSetgroups: false,
			// The stage keeps its capabilities (inside its own user
			// namespace only) across exec even when its uid is not 0;
			// it drops them all before the command runs.
			AmbientCaps: ambient,
			Setsid:      true,
		},
	}
	err = cmd.Start()
	for _, f := range extra {
		f.Close()
	}
	if err != nil {
		return ExitSetup, explainCloneError(err)
	}

	ch := newChannel(parentEnd)
	start := message{Kind: msgStart, Stage: "init", Plan: p, TTY: useTTY}
	if term != nil {
		start.Winsize, start.Termios = term.state()
	}
	if err := ch.send(start); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return ExitSetup, fmt.Errorf("hand the plan to the sandbox: %w", err)
	}
	for started := false; !started; {
		m, err := ch.recv()
		if err != nil {
			// The stage died without a word: report how.
			_ = cmd.Wait()
			return ExitSetup, fmt.Errorf("sandbox init ended before the command started (%v)", cmd.ProcessState)
		}
		switch m.Kind {
		case msgWarning:
			o.Warn(m.Text)
		case msgError:
			_ = cmd.Wait()
			code := m.Code
			if code == 0 {
				code = ExitSetup
			}
			return code, errors.New(m.Text)
		case msgStarted:
			started = true
		}
	}

	var relay sync.WaitGroup
	if term != nil {
		if term.master, err = receiveFD(ptyParent); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return ExitSetup, fmt.Errorf("receive the sandbox's terminal: %w", err)
		}
		if err := term.makeRaw(); err != nil {
			o.Warn(fmt.Sprintf("cannot put the terminal in raw mode: %v", err))
		}
		term.relay(o.Stdin, o.Stdout, &relay)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == unix.SIGWINCH {
					if term != nil {
						term.syncSize()
					}
					continue
				}
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	werr := cmd.Wait()
	signal.Stop(sigs)
	close(done)
	relay.Wait() // the pty's output, to its last byte
	if term != nil {
		term.restore()
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return ExitSetup, werr
	}
	switch {
	case ws.Exited():
		return ws.ExitStatus(), nil
	case ws.Signaled():
		return 128 + int(ws.Signal()), nil
	}
	return ExitSetup, werr
}

func cloneFlags(p *plan.Plan) uintptr {
	f := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if haveCgroupNS() {
		f |= unix.CLONE_NEWCGROUP
	}
	if p.Net != plan.NetHost {
		f |= unix.CLONE_NEWNET
	}
	return f
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
type terminal struct {
	host   *os.File
	master *os.File
	saved  *unix.Termios
	once   sync.Once
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// state returns the host terminal's size and settings, which the new pty
// starts with.
func (t *terminal) state() (*unix.Winsize, *unix.Termios) {
	ws, _ := unix.IoctlGetWinsize(int(t.host.Fd()), unix.TIOCGWINSZ)
	tio, _ := unix.IoctlGetTermios(int(t.host.Fd()), unix.TCGETS)
	return ws, tio
}

// receiveFD reads one file descriptor passed with SCM_RIGHTS.
func receiveFD(sock *os.File) (*os.File, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("no descriptor received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("no descriptor received (%v)", err)
	}
	return os.NewFile(uintptr(fds[0]), "pty-master"), nil
}

func (t *terminal) syncSize() {
	if t.master == nil {
		return
	}
	if ws, err := unix.IoctlGetWinsize(int(t.host.Fd()), unix.TIOCGWINSZ); err == nil {
		_ = unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

func (t *terminal) makeRaw() error {
	fd := int(t.host.Fd())
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
			_ = unix.IoctlSetTermios(int(t.host.Fd()), unix.TCSETS, t.saved)
		}
	})
}

// relay copies keystrokes in and output out. The output copy ends when the
// last holder of the pty's slave side (the sandbox) is gone.
func (t *terminal) relay(in io.Reader, out io.Writer, wg *sync.WaitGroup) {
	go func() { _, _ = io.Copy(t.master, in) }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(out, t.master)
	}()
}

func (t *terminal) close() {
	t.restore()
	if t.master != nil {
		t.master.Close()
	}
}
