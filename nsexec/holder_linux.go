package nsexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/routes"
)

// The holder stage owns the egress jail's network namespace. It is started
// by the launcher in a new user + network namespace, so the namespace and
// its routes belong to the holder's user namespace: the sandbox's init is
// started in a *nested* user namespace, where even a process with every
// capability cannot change them.
//
//	launcher --clone(NEWUSER|NEWNET)--> holder --clone(NEWUSER|NEWNS|...)--> init
//
// Order (each step must succeed, or the launch stops):
//  1. start init in the nested namespaces, with the launcher's channels:
//     it builds the filesystem view meanwhile, but does not start the
//     command until the launcher says "go";
//  2. open /dev/net/tun, create the jail's TUN links (the egress device and
//     the sink for blocked ranges), pass their fds to the launcher;
//  3. apply the route plan: lo up, TUN addressed and up, blocks to the
//     sink, default route and punches (punch failures are warnings);
//     report "routes locked";
//  4. apply the launcher's policy updates, and exit with init's status
//     (the signals that would end it are ignored).
//
// The launcher sends init "go" only after the routes are locked and its
// userstack is attached, so the command never runs in a half-built jail;
// if the holder fails, init dies with it (parent-death signal).

// initChanFD is where the holder receives the launcher's channel for init;
// it becomes init's stageFD.
const initChanFD = 5

// Messages only the holder and launcher exchange.
const (
	msgRoutesLocked msgKind = "routes-locked" // holder -> launcher
	msgGo           msgKind = "go"            // launcher -> init: the jail is ready
	msgInitStarted  msgKind = "init-started"  // holder -> launcher
	// launcher -> holder: a new route plan (Routes) for the running jail;
	// holder -> launcher: msgPolicyApplied, Text the error if it failed.
	msgPolicyUpdate  msgKind = "policy-update"
	msgPolicyApplied msgKind = "policy-applied"
)

// fd-channel tags: which descriptor is arriving.
const (
	fdTagTUN = 't'
	fdTagPTY = 'p'
)

func runHolder(ch *channel, start message) int {
	return reportStage(ch)(holder(ch, start))
}

func holder(ch *channel, start message) (code int, err error) {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return 0, fmt.Errorf("set parent-death signal: %w", err)
	}
	if start.Routes == nil {
		return 0, errors.New("holder started without a route plan")
	}
	if len(start.Devices) == 0 {
		return 0, errors.New("holder started without a TUN device to create")
	}
	// init starts at once and builds the sandbox's filesystem while the
	// jail is set up here; it starts the command only when the launcher
	// says go, after the routes are locked and the stack attached.
	// The signals that would end a Go program are ignored: init drops
	// the ones sent to it directly (see catchAll; the launcher passes
	// the command its signals over init's channel), so forwarding them
	// to init did nothing but keep the holder alive, at the cost of a
	// thread parked for the runtime's signal loop. init inherits the
	// ignored dispositions across exec; the Go runtime keeps only an
	// inherited SIGHUP and SIGINT ignored, and init catches both again
	// (catchAll), so the command gets the defaults (tested).
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	initChan := os.NewFile(initChanFD, "init-channel")
	fdChan := os.NewFile(ptyFD, "fd-channel")
	cmd, err := stageCommand(start.CloneInit, os.Getuid(), os.Getgid(), []*os.File{initChan, fdChan}, os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, explainCloneError(err)
	}
	// If the jail cannot be completed, init goes first: it may not have
	// armed its parent-death signal yet, and must not outlive us.
	defer func() {
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	initChan.Close()
	_ = ch.send(message{Kind: msgInitStarted, PID: cmd.Process.Pid})

	for _, dev := range start.Devices {
		tun, err := openTUN(dev)
		if err != nil {
			return 0, err
		}
		err = sendFD(ptyFD, fdTagTUN, tun)
		unix.Close(tun)
		if err != nil {
			return 0, fmt.Errorf("pass the TUN device to the launcher: %w", err)
		}
	}
	fdChan.Close()
	nl, err := routes.OpenNetlink()
	if err != nil {
		return 0, err
	}
	warnings, err := routes.Apply(*start.Routes, nl)
	for _, w := range warnings {
		_ = ch.send(message{Kind: msgWarning, Text: fmt.Sprintf("egress jail: %v (that destination stays unreachable)", w)})
	}
	if err != nil {
		nl.Close()
		return 0, fmt.Errorf("egress jail: %w (the jail is fail-closed; nothing was started)", err)
	}
	if f := start.Routes.Filter; f != nil {
		err := routes.InstallFilter(f)
		if errors.Is(err, routes.ErrUnrecorded) {
			_ = ch.send(message{Kind: msgWarning, Text: "egress jail: " + err.Error()})
			err = nil
		}
		if err != nil {
			nl.Close()
			return 0, fmt.Errorf("egress jail: %w (the kernel's netfilter (nf_tables) must be available in the jail's network namespace: load the nf_tables module, or use --net=host to run without the jail)", err)
		}
	}
	// Unprivileged ICMP echo (ping sockets) is off in a new namespace;
	// allow it for the caller's group, so ping works without a raw socket.
	gid := os.Getgid()
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(fmt.Sprintf("%d %d", gid, gid)), 0); err != nil {
		_ = ch.send(message{Kind: msgWarning, Text: fmt.Sprintf("egress jail: ping will not work inside (%v)", err)})
	}
	if err := ch.send(message{Kind: msgRoutesLocked}); err != nil {
		return 0, err
	}
	go serveUpdates(ch, nl, *start.Routes)
	settle()
	_ = cmd.Wait()
	return exitCode(cmd.ProcessState), nil
}

// serveUpdates applies the launcher's policy updates to the jail's routes
// and filter while the sandbox runs, answering each with msgPolicyApplied
// (Text empty) or the error; and exits, as init does, when the launcher's
// end of the channel closes. A failed update leaves the jail refusing
// what it refused before and the launcher fails closed (see jail).
func serveUpdates(ch *channel, nl *routes.Netlink, cur routes.Plan) {
	for {
		m, err := ch.recv()
		if err != nil {
			os.Exit(ExitSetup)
		}
		if m.Kind != msgPolicyUpdate || m.Routes == nil {
			continue
		}
		next := *m.Routes
		reply := message{Kind: msgPolicyApplied}
		warnings, err := routes.Update(cur, next, nl)
		for _, w := range warnings {
			_ = ch.send(message{Kind: msgWarning, Text: fmt.Sprintf("egress jail: %v (that destination stays unreachable)", w)})
		}
		if err != nil {
			reply.Text = err.Error()
		} else {
			cur = next
		}
		if err := ch.send(reply); err != nil {
			os.Exit(ExitSetup)
		}
	}
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
func stageCommand(flags uintptr, uid, gid int, extra []*os.File, stdin, stdout, stderr *os.File) (*exec.Cmd, error) {
	ambient, err := allCaps()
	if err != nil {
		return nil, fmt.Errorf("read the kernel's capability count: %w", err)
	}
	env, extra := coverStage(stageEnv, extra) // a coverage run's only (cover_linux.go)
	return &exec.Cmd{
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

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return ExitSetup
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return ExitSetup
	}
	return statusCode(unix.WaitStatus(ws))
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
