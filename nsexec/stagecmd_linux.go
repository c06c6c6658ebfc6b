package nsexec

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// stageCmd is the re-exec of a stage, prepared by stageCommand. It stands
// in for exec.Cmd: os.StartProcess first checks, once per process, that
// pidfds work, by starting and reaping a throwaway child of its own (a
// vfork and a wait on every launch's path); syscall.ForkExec asks for the
// stage's pidfd in the same clone instead, and gets -1 from a kernel
// without them.
type stageCmd struct {
	Path        string
	Args        []string
	Env         []string
	Stdin       *os.File // all three set: the launcher's defaults, or /dev/null
	Stdout      *os.File
	Stderr      *os.File
	ExtraFiles  []*os.File // fds 3, 4, ...
	SysProcAttr *syscall.SysProcAttr

	Process      *stageProc  // once started
	ProcessState *stageState // once waited for
}

// Start starts the stage; an error is an *os.PathError, as exec.Cmd's.
func (c *stageCmd) Start() error {
	files := append([]*os.File{c.Stdin, c.Stdout, c.Stderr}, c.ExtraFiles...)
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	pidfd := -1
	sys := *c.SysProcAttr
	sys.PidFD = &pidfd
	// A stage in a new user namespace is started with vfork's sharing
	// (CLONE_VM|CLONE_VFORK) and its id maps are written here, after its
	// exec, rather than by syscall.ForkExec. ForkExec writes them while
	// the child waits, before its exec, and so cannot share the parent's
	// memory: it forks, copying this process's page tables, and every page
	// this process then writes again takes a copy-on-write fault (about
	// 130 a plain launch, at some 25 us of CPU each where faults are dear;
	// issue 33). The stage needs no mapping before its start message,
	// which comes after Start returns: until then it starts its runtime,
	// says hello and waits. Its capabilities in the new namespace reach it
	// across exec as ambient ones (stageCommand), whatever its ids.
	uidMap, gidMap := sys.UidMappings, sys.GidMappings
	setgroups := sys.GidMappingsEnableSetgroups
	mapHere := sys.Cloneflags&unix.CLONE_NEWUSER != 0 && (uidMap != nil || gidMap != nil)
	if mapHere {
		sys.UidMappings, sys.GidMappings = nil, nil
		sys.Cloneflags |= unix.CLONE_VM | unix.CLONE_VFORK
	}
	pid, err := syscall.ForkExec(c.Path, c.Args, &syscall.ProcAttr{Env: c.Env, Files: fds, Sys: &sys})
	runtime.KeepAlive(files)
	if err != nil {
		return &os.PathError{Op: "fork/exec", Path: c.Path, Err: err}
	}
	c.Process = &stageProc{Pid: pid, pidfd: pidfd}
	if mapHere {
		if err := writeIDMaps(pid, uidMap, gidMap, setgroups); err != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
			c.Process, c.ProcessState = nil, nil
			return &os.PathError{Op: "fork/exec", Path: c.Path, Err: err}
		}
	}
	return nil
}

// writeIDMaps writes a started child's user namespace id maps as
// syscall.ForkExec would have before its exec: uid_map, then setgroups
// ("deny" unless enabled: an unprivileged writer may write gid_map only
// then; a kernel without the file is fine) and gid_map.
func writeIDMaps(pid int, uidMap, gidMap []syscall.SysProcIDMap, setgroups bool) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	write := func(name, data string) error {
		f, err := os.OpenFile(dir+name, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	format := func(m []syscall.SysProcIDMap) string {
		var b []byte
		for _, e := range m {
			b = strconv.AppendInt(b, int64(e.ContainerID), 10)
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(e.HostID), 10)
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(e.Size), 10)
			b = append(b, '\n')
		}
		return string(b)
	}
	if uidMap != nil {
		if err := write("uid_map", format(uidMap)); err != nil {
			return err
		}
	}
	if gidMap != nil {
		sg := "deny"
		if setgroups {
			sg = "allow"
		}
		if err := write("setgroups", sg); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := write("gid_map", format(gidMap)); err != nil {
			return err
		}
	}
	return nil
}

// Wait waits for the stage to exit, reaps it and sets ProcessState.
func (c *stageCmd) Wait() error {
	p := c.Process
	if p == nil {
		return os.ErrInvalid
	}
	// Until the stage is reaped its pid cannot be reused: Kill may
	// signal it by pid (without a pidfd) until then.
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return os.ErrProcessDone
	}
	var ws unix.WaitStatus
	var err error
	for {
		if _, err = unix.Wait4(p.Pid, &ws, 0, nil); err != unix.EINTR {
			break
		}
	}
	p.done = true
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
	if err != nil {
		return os.NewSyscallError("wait4", err)
	}
	c.ProcessState = &stageState{ws: ws}
	return nil
}

// stageProc is a started stage.
type stageProc struct {
	Pid   int
	mu    sync.Mutex
	pidfd int // -1: none (or closed once reaped)
	done  bool
}

// Kill sends the stage SIGKILL: through its pidfd when there is one,
// never once it has been reaped.
func (p *stageProc) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return os.ErrProcessDone
	}
	if p.pidfd >= 0 {
		return unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0)
	}
	return unix.Kill(p.Pid, unix.SIGKILL)
}

// stageState is how a stage ended.
type stageState struct {
	ws unix.WaitStatus
}

// String says it as os.ProcessState does ("exit status 1", "signal:
// killed").
func (s *stageState) String() string {
	if s == nil {
		return "<nil>"
	}
	var res string
	switch {
	case s.ws.Exited():
		res = "exit status " + strconv.Itoa(s.ws.ExitStatus())
	case s.ws.Signaled():
		res = "signal: " + s.ws.Signal().String()
	default:
		res = "status " + strconv.Itoa(int(s.ws))
	}
	if s.ws.CoreDump() {
		res += " (core dumped)"
	}
	return res
}

func exitCode(ps *stageState) int {
	if ps == nil {
		return ExitSetup
	}
	return statusCode(ps.ws)
}
