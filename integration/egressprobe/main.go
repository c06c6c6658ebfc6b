// Command egressprobe is a test helper run inside the egress jail by the
// integration tests: each probe tries one way out that picks its own
// interface (SO_BINDTODEVICE, IP_UNICAST_IF, a scoped IPv6 address) or
// one change of the kernel layer's filter, and prints "ok" or "err:EXXX".
// It is never shipped.
//
//	egressprobe PROBE ARGS...          one probe
//	egressprobe batch "PROBE ARGS"...  several, one line each: "PROBE ARGS => RESULT"
//	egressprobe serve                  probes read from stdin, one a line, answered on stdout
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/routes"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: egressprobe PROBE [ARGS]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "batch":
		for _, c := range os.Args[2:] {
			f := strings.Fields(c)
			fmt.Printf("%s => %s\n", c, result(run(f[0], f[1:])))
		}
	case "serve":
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			fmt.Println(result(run(f[0], f[1:])))
		}
	default:
		fmt.Println(result(run(os.Args[1], os.Args[2:])))
	}
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
	case "tcp", "udp":
		// No interface chosen: the control.
		return dial(cmd, "", "", args[0])
	case "tcp-name":
		// A name, looked up through the sandbox's resolver, then a
		// connection to it (NAME:PORT).
		c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) {
				return errors.New("lookup failed")
			}
			return err
		}
		return c.Close()
	case "tcp-wait":
		// A connection (ADDR:PORT or NAME:PORT) that waits up to two
		// minutes, as curl or ssh do, then one echo: for the ask mode,
		// whose held connections are answered when a person decides.
		c, err := net.DialTimeout("tcp", args[0], 2*time.Minute)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return err
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != "hello\n" {
			return fmt.Errorf("echo %q", buf)
		}
		return nil
	case "udp-wait":
		// A datagram to ADDR:PORT or NAME:PORT, sent again each second
		// for up to a minute until its echo comes (as a UDP client
		// retries): for the ask mode's held datagrams.
		c, err := net.Dial("udp", args[0])
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 64)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			if _, err := c.Write([]byte("hello\n")); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, err := c.Read(buf)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if err != nil {
				return err
			}
			if string(buf[:n]) != "hello\n" {
				return fmt.Errorf("echo %q", buf[:n])
			}
			return nil
		}
		return errors.New("timeout")
	case "tcp-bound", "udp-bound":
		// SO_BINDTODEVICE to args[0].
		return dial(strings.TrimSuffix(cmd, "-bound"), "bind", args[0], args[1])
	case "tcp-unicast-if", "udp-unicast-if":
		// IP_UNICAST_IF / IPV6_UNICAST_IF to args[0].
		return dial(strings.TrimSuffix(cmd, "-unicast-if"), "unicast-if", args[0], args[1])
	case "rule-add":
		// A routing rule that sends the private ranges to the main
		// table's default route, ahead of the sink's routes.
		r := netlink.NewRule()
		r.Dst = &net.IPNet{IP: net.IPv4(10, 0, 0, 0), Mask: net.CIDRMask(8, 32)}
		r.Table = 254
		r.Priority = 1
		return netlink.RuleAdd(r)
	case "filter-flush":
		// Replace the kernel layer's filter with an empty one.
		return routes.InstallFilter(&routes.Filter{Dev: "tun0"})
	case "nested":
		// As the probe's nested: the same attempt from a nested user
		// namespace holding every capability there.
		// The nested attempt's result is this probe's.
		c := exec.Command("/proc/self/exe", args...)
		var out strings.Builder
		c.Stdout, c.Stderr = &out, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS}
		if os.Getuid() != 0 {
			c.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
			c.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		} else {
			c.SysProcAttr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN}
		}
		if err := c.Run(); err != nil {
			return fmt.Errorf("nested: %w", err)
		}
		if r := strings.TrimSpace(out.String()); r != "ok" {
			return errors.New(strings.TrimPrefix(r, "err:"))
		}
		return nil
	}
	return fmt.Errorf("unknown probe %q", cmd)
}

// dial connects to target (an address with a port; an IPv6 address may
// carry a zone, which becomes its scope id) over proto, choosing the
// interface dev the way how says, then exchanges one echo.
func dial(proto, how, dev, target string) error {
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		return err
	}
	d := net.Dialer{Timeout: 3 * time.Second}
	if how != "" {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				switch {
				case how == "bind":
					serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, dev)
				case ap.Addr().Is4():
					// IP_UNICAST_IF takes the index in network byte order.
					idx := uint32(ifc.Index)
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_UNICAST_IF, int(idx>>24|(idx>>8)&0xff00|(idx<<8)&0xff0000|idx<<24))
				default:
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_IF, ifc.Index)
				}
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	c, err := d.Dial(proto, target)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 64)
	for try := 0; try < 3; try++ {
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return err
		}
		n, err := c.Read(buf)
		if ne, ok := err.(net.Error); ok && ne.Timeout() && proto == "udp" {
			continue
		}
		if err != nil {
			return err
		}
		if string(buf[:n]) != "hello\n" {
			return fmt.Errorf("echo %q", buf[:n])
		}
		return nil
	}
	return errors.New("timeout")
}
