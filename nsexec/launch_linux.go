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

	"github.com/creack/pty"
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

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return ExitSetup, fmt.Errorf("stage channel: %w", err)
	}
	parentEnd := os.NewFile(uintptr(fds[0]), "stage-channel")
	childEnd := os.NewFile(uintptr(fds[1]), "stage-channel")
	defer parentEnd.Close()

	useTTY := o.TTY == TTYAuto && isTerminal(o.Stdin)
	var term *terminal
	stdin, stdout, stderr := o.Stdin, o.Stdout, o.Stderr
	if useTTY {
		term, err = openTerminal(o.Stdin)
		if err != nil {
			childEnd.Close()
			return ExitSetup, err
		}
		defer term.close()
		stdin, stdout, stderr = term.slave, term.slave, term.slave
	}

	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{stageMarker},
		Env:        []string{},
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: []*os.File{childEnd}, // becomes fd 3 (stageFD)
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
	childEnd.Close()
	if term != nil {
		term.slave.Close()
	}
	if err != nil {
		return ExitSetup, explainCloneError(err)
	}

	ch := newChannel(parentEnd)
	if err := ch.send(message{Kind: msgStart, Stage: "init", Plan: p, TTY: useTTY}); err != nil {
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
		if err := term.makeRaw(); err != nil {
			o.Warn(fmt.Sprintf("cannot put the terminal in raw mode: %v", err))
		}
		term.relay(o.Stdin, o.Stdout, &relay)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGWINCH)
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

// terminal is the pty the command runs on, and the host terminal state to
// restore.
type terminal struct {
	host   *os.File
	master *os.File
	slave  *os.File
	saved  *unix.Termios
	once   sync.Once
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func openTerminal(host *os.File) (*terminal, error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	t := &terminal{host: host, master: master, slave: slave}
	// The new pty starts with the host terminal's settings and size.
	if tio, err := unix.IoctlGetTermios(int(host.Fd()), unix.TCGETS); err == nil {
		_ = unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio)
	}
	t.syncSize()
	return t, nil
}

func (t *terminal) syncSize() {
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
	t.master.Close()
}
