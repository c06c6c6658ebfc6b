package nsexec

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The holder stage creates the egress jail's network namespace. It is
// started by the launcher in a new user + network namespace, so the
// namespace and its routes belong to the holder's user namespace: the
// sandbox's init is started in a *nested* user namespace, where even a
// process with every capability cannot change them.
//
//	launcher --clone(NEWUSER|NEWNET)--> holder
//	launcher <-clone(CLONE_PARENT|NEWUSER|NEWNS|...)-- holder: init
//
// Order (each step must succeed, or the launch stops):
//  1. start init in the nested namespaces, as the launcher's child, with
//     the launcher's channels: it builds the filesystem view meanwhile,
//     but does not start the command until the launcher says "go";
//  2. run the jail's child driver (netdriver.go) in the new namespace,
//     pass its descriptors to the launcher and report "net-ready";
//  3. exit. The namespaces live on with init, the launcher keeps the
//     descriptors (among them netlink sockets of the jail's namespace,
//     for its live policy).
//
// The launcher sends init "go" only after the driver is done and the jail
// attached, so the command never runs in a half-built jail; if the holder
// fails, it kills init first.

func runHolder(ch *channel, start startHolder) int {
	return reportStage(ch)(holder(ch, start))
}

func holder(ch *channel, start startHolder) (code int, err error) {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return 0, fmt.Errorf("set parent-death signal: %w", err)
	}
	drv := netChild(start.Driver)
	if drv == nil {
		return 0, fmt.Errorf("egress jail: this binary has no network driver %q: the stage binary must be built from the same version of claude-sandbox, with package jail linked in", start.Driver)
	}
	// init starts at once and builds the sandbox's filesystem while the
	// jail is set up here; it starts the command only when the launcher
	// says go, after the driver is done and the jail attached. It is
	// started as the launcher's child (CLONE_PARENT), not ours: so its
	// parent-death signal follows the launcher, the launcher reaps it,
	// and this stage can exit once the jail's namespace is built. (The
	// namespaces it is created in are ours all the same: its user
	// namespace is nested below the jail's.)
	initChan := os.NewFile(initChanFD, "init-channel")
	fdChan := os.NewFile(ptyFD, "fd-channel")
	cmd, err := stageCommand(start.CloneInit|unix.CLONE_PARENT, os.Getuid(), os.Getgid(), []*os.File{initChan, fdChan}, os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, explainCloneError(err)
	}
	// If the jail cannot be completed, init goes first: it may not have
	// armed its parent-death signal yet. (The launcher reaps it.)
	defer func() {
		if err != nil {
			_ = cmd.Process.Kill()
		}
	}()
	initChan.Close()
	if err := ch.send(msgInitStarted, pidMsg{PID: cmd.Process.Pid}); err != nil {
		return 0, err
	}
	warn := func(w string) { _ = ch.send(msgWarning, warning{Text: w}) }
	files, reply, err := drv.Setup(start.Data, warn)
	if err != nil {
		return 0, err
	}
	for _, f := range files {
		err = sendFD(ptyFD, fdTagNet, int(f.Fd()))
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("egress jail: pass the jail's descriptors to the launcher: %w", err)
		}
	}
	fdChan.Close()
	if err := ch.send(msgNetReady, netReady{Files: len(files), Reply: reply}); err != nil {
		return 0, err
	}
	// Done: the launcher holds the jail's descriptors, init runs as its
	// child. Nothing of the holder is left for the sandbox's life.
	return 0, nil
}

// stageEnv is the stages' whole environment (the command's own comes in
// the plan). GOMAXPROCS=1: a stage does its setup on one thread and then
// waits; with one P the runtime starts no spare threads to run goroutines
// in parallel, and its garbage collector works on one core.
var stageEnv = []string{"GOMAXPROCS=1"}

// stageCommand prepares the re-exec of this binary as a stage in new
// namespaces, keeping the caller's uid and gid and carrying its
// capabilities (valid only inside the new user namespace) across exec.
// extra become fds 3, 4, ...
func stageCommand(flags uintptr, uid, gid int, extra []*os.File, stdin, stdout, stderr *os.File) (*stageCmd, error) {
	ambient, err := allCaps()
	if err != nil {
		return nil, fmt.Errorf("read the kernel's capability count: %w", err)
	}
	env, extra := coverStage(stageEnv, extra) // a coverage run's only (cover_linux.go)
	return &stageCmd{
		Path:       "/proc/self/exe",
		Args:       []string{stageMarker},
		Env:        env,
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  flags,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
			// Required for an unprivileged caller to write gid_map.
			GidMappingsEnableSetgroups: false,
			AmbientCaps:                ambient,
			Setsid:                     true,
		},
	}, nil
}

// sendFD passes fd over the SEQPACKET socket sock, tagged.
func sendFD(sock int, tag byte, fd int) error {
	return unix.Sendmsg(sock, []byte{tag}, unix.UnixRights(fd), nil, 0)
}

// receiveFD reads one tagged descriptor passed with SCM_RIGHTS.
func receiveFD(sock *os.File) (byte, *os.File, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return 0, nil, err
	}
	if n == 0 {
		return 0, nil, errors.New("the stage ended before passing it")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return 0, nil, fmt.Errorf("no descriptor received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return 0, nil, fmt.Errorf("no descriptor received (%v)", err)
	}
	if buf[0] == fdTagPTY {
		// The pty master is relayed for the sandbox's whole life: made
		// non-blocking, os.NewFile puts it in the runtime's poller and
		// the relay's read parks without holding an OS thread. (Its
		// Fd method would make it blocking again: use SyscallConn.)
		_ = unix.SetNonblock(fds[0], true)
	}
	return buf[0], os.NewFile(uintptr(fds[0]), "passed-fd"), nil
}
