// Command probe is a test helper run inside the sandbox by the integration
// tests: each subcommand attempts one thing and prints "ok" or "err:EXXX"
// (the errno's name), so tests can tell the sandbox's refusal from the
// kernel's ordinary ones. It is never shipped.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe SUBCOMMAND [ARGS]")
		os.Exit(2)
	}
	fmt.Println(result(run(os.Args[1], os.Args[2:])))
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return "err:" + unix.ErrnoName(errno)
	}
	return "err:" + err.Error()
}

func run(cmd string, args []string) error {
	switch cmd {
	case "tiocsti", "tiocsti-high":
		// Push one byte into the input queue of the terminal on fd 0.
		req := uint64(unix.TIOCSTI)
		if cmd == "tiocsti-high" {
			req |= 1 << 32 // the kernel ignores the high half
		}
		c := byte('#')
		return ioctl(0, req, uintptr(unsafe.Pointer(&c)))
	case "tioclinux":
		sub := byte(2) // TIOCL_SETSEL: would start a console selection
		return ioctl(0, unix.TIOCLINUX, uintptr(unsafe.Pointer(&sub)))
	case "kill0":
		pid, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		return unix.Kill(pid, 0)
	case "sethostname":
		return unix.Sethostname([]byte(args[0]))
	case "create":
		f, err := os.OpenFile(args[0], os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
		}
		return err
	case "remount-rw":
		return unix.Mount("", args[0], "", unix.MS_REMOUNT|unix.MS_BIND, "")
	case "bind-over":
		return unix.Mount(args[0], args[1], "", unix.MS_BIND, "")
	case "umount":
		return unix.Unmount(args[0], unix.MNT_DETACH)
	case "open-ptmx":
		f, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return err
	case "nested":
		// Re-run this probe in a new user + mount namespace where it
		// holds every capability, then attempt args there. A non-root
		// caller maps itself to root. Root cannot: mapping uid 0 of the
		// parent namespace needs CAP_SETFCAP there (a kernel rule since
		// 5.12), which the sandbox has dropped; root gets an unmapped
		// namespace and keeps CAP_SYS_ADMIN across exec as ambient.
		c := exec.Command("/proc/self/exe", args...)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS}
		if os.Getuid() != 0 {
			c.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
			c.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		} else {
			c.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
		}
		return c.Run()
	}
	return fmt.Errorf("unknown probe %q", cmd)
}

func ioctl(fd int, req uint64, arg uintptr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), arg)
	if e != 0 {
		return e
	}
	return nil
}
