// Command probe is a test helper run inside the sandbox by the integration
// tests: each subcommand attempts one thing and prints "ok" or "err:EXXX"
// (the errno's name), so tests can tell the sandbox's refusal from the
// kernel's ordinary ones. It is never shipped.
package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"

	"fmt"
	"github.com/vishvananda/netlink"
	"io"
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
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "err:timeout"
	}
	return "err:" + err.Error()
}

func run(cmd string, args []string) error {
	switch cmd {
	case "abstract-listen":
		// Listen on the abstract name args[0], say so, accept forever.
		l, err := net.Listen("unix", "@"+args[0])
		if err != nil {
			return err
		}
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err != nil {
				return err
			}
			c.Close()
		}
	case "abstract-connect":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + args[0]})
	case "signal-cmdline":
		// Wait for a process whose command line is args[0] (its words
		// joined by spaces), then send it SIGTERM.
		for {
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				pid, err := strconv.Atoi(e.Name())
				if err != nil || pid == os.Getpid() {
					continue
				}
				b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
				if strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")) == args[0] {
					return unix.Kill(pid, unix.SIGTERM)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
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
	case "control-status-new":
		// Wait (20 s at most) for a socket to appear in the directory
		// args[0] that was not there at the start, then as
		// control-status: a launcher started after this sandbox, whose
		// socket no mask of the sandbox's view covers.
		before := map[string]bool{}
		ents, err := os.ReadDir(args[0])
		if err != nil {
			return err
		}
		for _, e := range ents {
			before[e.Name()] = true
		}
		fmt.Println("waiting")
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			ents, _ := os.ReadDir(args[0])
			for _, e := range ents {
				if !before[e.Name()] && strings.HasSuffix(e.Name(), ".sock") {
					return run("control-status", []string{args[0] + "/" + e.Name()})
				}
			}
		}
		return errors.New("no new socket")
	case "control-status":
		// Ask a launcher's control socket (internal/control) for its
		// status: ok only when it answers ok.
		c, err := net.DialTimeout("unix", args[0], 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, `{"v":1,"op":"status"}`+"\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.Contains(line, `"ok":true`) {
			return errors.New(strings.TrimSpace(line))
		}
		return nil
	case "connect":
		// Connect only (as nc -z does), within MS milliseconds.
		ms, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", args[0], time.Duration(ms)*time.Millisecond)
		if err != nil {
			return err
		}
		return c.Close()
	case "flows":
		// TCPADDR N UDPADDR: send N bytes over TCP, half-close, read to
		// EOF (printing "tcp-read COUNT"); then a UDP datagram echoed;
		// then hold the UDP socket open until stdin ends (the audit log
		// test reads the records meanwhile).
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write(make([]byte, n)); err != nil {
			return err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		got, err := io.Copy(io.Discard, c)
		c.Close()
		if err != nil {
			return err
		}
		fmt.Println("tcp-read", got)
		u, err := net.Dial("udp", args[2])
		if err != nil {
			return err
		}
		defer u.Close()
		_ = u.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := u.Write([]byte("hello")); err != nil {
			return err
		}
		buf := make([]byte, 64)
		if _, err := u.Read(buf); err != nil {
			return err
		}
		fmt.Println("udp-echoed")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return nil
	case "tcp":
		// Connect, send a line, expect it echoed.
		c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if line != "hello\n" {
			return fmt.Errorf("echo %q", line)
		}
		return nil
	case "udp":
		// Send a datagram, expect it echoed.
		c, err := net.Dial("udp", args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 64)
		for try := 0; try < 3; try++ {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			if _, err := c.Write([]byte("hello")); err != nil {
				return err
			}
			n, err := c.Read(buf)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if err != nil {
				return err
			}
			if string(buf[:n]) != "hello" {
				return fmt.Errorf("echo %q", buf[:n])
			}
			return nil
		}
		return errors.New("timeout")
	case "ping":
		return ping(args[0])
	case "resolve", "resolve-tcp":
		r := &net.Resolver{PreferGo: true}
		if cmd == "resolve-tcp" {
			r.Dial = func(ctx context.Context, _, address string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", address)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		addrs, err := r.LookupHost(ctx, args[0])
		if err != nil {
			return err
		}
		fmt.Print(strings.Join(addrs, ","), " ")
		return nil
	case "route-del-default":
		return netlink.RouteDel(&netlink.Route{Dst: mustCIDR("0.0.0.0/0")})
	case "route-add":
		// A route past the blackholes, through the jail's TUN.
		l, err := netlink.LinkByName("tun0")
		if err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: mustCIDR(args[0])})
	case "route-del":
		return netlink.RouteDel(&netlink.Route{Dst: mustCIDR(args[0]), Type: unix.RTN_UNREACHABLE})
	case "link-add":
		return netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "probe0"}})
	case "io_uring_setup":
		var params [120]byte
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
		if e != 0 {
			return e
		}
		unix.Close(int(fd))
		return nil
	case "keyctl":
		// KEYCTL_GET_KEYRING_ID of the session keyring, creating it.
		_, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 1)
		if e != 0 {
			return e
		}
		return nil
	case "rewrite":
		// Write a file's current content back to it: proves the file is
		// writable without changing anything.
		b, err := os.ReadFile(args[0])
		if err != nil {
			return err
		}
		return os.WriteFile(args[0], b, 0)
	case "mount-rewrite":
		// Mount a fresh FSTYPE (with OPTIONS) and rewrite FILE in it.
		dir, err := os.MkdirTemp("", "probe-mnt-")
		if err != nil {
			return err
		}
		if err := unix.Mount("probe", dir, args[0], 0, args[1]); err != nil {
			return err
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
		return run("rewrite", []string{dir + "/" + args[2]})
	case "forks":
		// Start up to N sleeping children, until the kernel refuses one;
		// print how many ran, then end them.
		max, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		var kids []*os.Process
		defer func() {
			for _, k := range kids {
				_ = k.Kill()
				_, _ = k.Wait()
			}
		}()
		for len(kids) < max {
			p, err := os.StartProcess("/bin/sleep", []string{"sleep", "60"}, &os.ProcAttr{})
			if err != nil {
				fmt.Printf("started %d\n", len(kids))
				return err
			}
			kids = append(kids, p)
		}
		fmt.Printf("started %d\n", len(kids))
		return nil
	case "nested-net", "nested-cgroup":
		// Like nested, with a new network (sysfs) or cgroup namespace too.
		extra := uintptr(unix.CLONE_NEWNET)
		if cmd == "nested-cgroup" {
			extra = unix.CLONE_NEWCGROUP
		}
		c := exec.Command("/proc/self/exe", args...)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | extra}
		if os.Getuid() != 0 {
			c.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
			c.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		} else {
			c.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
		}
		return c.Run()
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

// ping sends ICMP echo requests from a connected, unprivileged ping
// socket: connected, so an ICMP error (a refusal) is reported as the
// socket's error instead of being ignored.
func ping(addr string) error {
	dst, err := netip.ParseAddr(addr)
	if err != nil {
		return err
	}
	family, proto, reqType := unix.AF_INET, unix.IPPROTO_ICMP, byte(8)
	var sa unix.Sockaddr
	if dst.Is6() {
		family, proto, reqType = unix.AF_INET6, unix.IPPROTO_ICMPV6, 128
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	} else {
		sa = &unix.SockaddrInet4{Addr: dst.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sa); err != nil {
		return err
	}
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	// type, code, checksum (the kernel fills it in for ping sockets), id
	// (the kernel's), sequence, then data.
	msg := []byte{reqType, 0, 0, 0, 0, 0, 0, 1, 'p', 'r', 'o', 'b', 'e'}
	buf := make([]byte, 1500)
	for try := 0; try < 3; try++ {
		if _, err := unix.Write(fd, msg); err != nil {
			return err
		}
		n, err := unix.Read(fd, buf)
		for err == unix.EINTR {
			// A read under SO_RCVTIMEO is not restarted after a
			// signal (the Go runtime's preemption signal among them).
			n, err = unix.Read(fd, buf)
		}
		if err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 && (buf[0] == 0 || buf[0] == 129) { // echo reply
			return nil
		}
		return fmt.Errorf("icmp type %d", buf[0])
	}
	return errors.New("timeout")
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func ioctl(fd int, req uint64, arg uintptr) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), arg)
	if e != 0 {
		return e
	}
	return nil
}
