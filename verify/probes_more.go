package verify

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultNetTargets are addresses in the blocked ranges. Inside the jail
// they are routed to the sink, which refuses at once: no packet leaves.
// With the jail off the network probes are skipped: nothing is sent.
var DefaultNetTargets = map[string][]string{
	"tcp-private": {"10.255.255.1:80", "172.31.255.1:80", "192.168.255.1:80", "100.127.255.1:80"},
	"udp-private": {"10.255.255.1:5064", "172.31.255.1:5064", "192.168.255.1:5064", "100.127.255.1:5064"},
	"metadata":    {"169.254.169.254:80"},
	"dns-private": {"10.254.254.53:53", "192.168.254.53:53"},
}

func (e *Env) targets(kind string) []string {
	if t, ok := e.NetTargets[kind]; ok {
		return t
	}
	return DefaultNetTargets[kind]
}

// routeDevice is the device /proc/net/route sends addr to.
func routeDevice(e *Env, addr netip.Addr) string {
	best, dev := -1, ""
	for pfx, d := range routeTable(e) {
		p, err := netip.ParsePrefix(pfx)
		if err == nil && p.Contains(addr) && p.Bits() > best {
			best, dev = p.Bits(), d
		}
	}
	return dev
}

func refusedNow(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EACCES)
}

// netProbe tries every target of kind over network ("tcp" or "udp"),
// leaving out targets the configuration punched through the jail.
func netProbe(kind, network string) func(e *Env) (Status, string) {
	return netProbeVia(kind, network, true)
}

// netProbeVia is netProbe; with skipPunched false it also tries targets
// routed through the TUN (the gateway's own address is).
func netProbeVia(kind, network string, skipPunched bool) func(e *Env) (Status, string) {
	return func(e *Env) (Status, string) {
		if !e.Jail {
			return Skip, "the egress jail is off: the network is the host's by configuration"
		}
		var blocked, unclear, allowed []string
		for _, t := range e.targets(kind) {
			ap, err := netip.ParseAddrPort(t)
			if err != nil {
				return Inconclusive, "bad target " + t
			}
			if skipPunched && routeDevice(e, ap.Addr()) == "tun0" {
				allowed = append(allowed, t) // punched by configuration
				continue
			}
			err = attempt(network, t)
			switch {
			case err == nil:
				return Escaped, fmt.Sprintf("%s %s answered", network, t)
			case refusedNow(err):
				blocked = append(blocked, t)
			default:
				unclear = append(unclear, fmt.Sprintf("%s (%v)", t, err))
			}
		}
		if len(unclear) > 0 {
			return Inconclusive, "no answer and no refusal: " + strings.Join(unclear, ", ")
		}
		if len(blocked) == 0 {
			return Inconclusive, "every target is allowed by configuration: nothing was tried (" + strings.Join(allowed, " ") + ")"
		}
		ev := "refused at once: " + strings.Join(blocked, " ")
		if len(allowed) > 0 {
			ev += "; allowed by configuration: " + strings.Join(allowed, " ")
		}
		return Blocked, ev
	}
}

func attempt(network, target string) error {
	return attemptWith(net.Dialer{Timeout: 3 * time.Second}, network, target)
}

// attemptWith dials target with d; a UDP attempt also sends a datagram
// and waits for an answer (or its refusal).
func attemptWith(d net.Dialer, network, target string) error {
	c, err := d.Dial(network, target)
	if err != nil {
		return err
	}
	defer c.Close()
	if network == "tcp" {
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("verify")); err != nil {
		return err
	}
	buf := make([]byte, 512)
	_, err = c.Read(buf)
	return err
}

// moreProbes complete the battery.
func moreProbes() []Item {
	return []Item{
		{"P19", "TCP to the private ranges", netProbe("tcp-private", "tcp")},
		{"P20", "UDP to the private ranges", netProbe("udp-private", "udp")},
		{"P21", "the cloud metadata service", netProbe("metadata", "tcp")},
		{"P22", "DNS to a private address that is no resolver", netProbe("dns-private", "udp")},
		{"P23", "remount / read-write from a nested user namespace", nestedProbe("remount / rw", "remount-rw", func(e *Env) []string { return []string{e.path("/")} })},
		{"P24", "unmount the sandbox's marker from a nested user namespace", nestedProbe("umount the marker", "umount", func(e *Env) []string { return []string{e.path("/tmp/.claude-sandbox")} })},
		{"P25", "delete the default route from a nested user namespace", nestedProbe("route del default", "route-del-default", func(*Env) []string { return nil })},
		{"P34", "add a route from a nested user namespace", nestedProbe("route add 10.99.0.0/16", "route-add", func(*Env) []string { return nil })},
		{"P35", "create a network device from a nested user namespace", nestedProbe("link add verify0", "link-add", func(*Env) []string { return nil })},
		{"P26", "join a namespace through /proc", func(e *Env) (Status, string) {
			done := make(chan error, 1)
			go func() {
				// The thread may end up in another namespace: it stays
				// locked, and is thrown away when this goroutine ends.
				runtime.LockOSThread()
				pid := 1
				if e.HostPID != 0 {
					pid = e.HostPID
				}
				f, err := os.Open(e.path(fmt.Sprintf("/proc/%d/ns/net", pid)))
				if err != nil {
					done <- err
					return
				}
				defer f.Close()
				done <- unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			}()
			return refused("setns into a network namespace through /proc", <-done)
		}},
		{"P27", "connect to the host's abstract unix sockets", func(e *Env) (Status, string) {
			if !e.Jail && !landlockScopes() {
				return Skip, "the egress jail is off and the kernel has no Landlock scopes (ABI 6): abstract sockets belong to the host's network namespace by configuration"
			}
			// With the jail off, the host's are in reach but for the
			// Landlock scope, which refuses them (EPERM).
			names := abstractSockets(e)
			own := 0
			for _, n := range names {
				fd, err := connectUnix("@" + n)
				if err != nil {
					continue
				}
				out := peerOutside(fd)
				unix.Close(fd)
				if !out {
					own++ // a process of the sandbox listens: its own socket
					continue
				}
				return Escaped, "connected to @" + n + ", whose listener is outside the sandbox"
			}
			return Blocked, fmt.Sprintf("%d abstract sockets visible, none of the host's connectable (%d the sandbox's own)", len(names), own)
		}},
		{"P28", "connect to IDE and session sockets in /tmp and /run/user", func(e *Env) (Status, string) {
			return sessionSocketProbe(e, peerOutside)
		}},
		{"P29", "read /run/secrets and /run/user", func(e *Env) (Status, string) {
			for _, dir := range []string{"/run/secrets", "/run/user"} {
				var leak string
				_ = filepath.WalkDir(e.path(dir), func(p string, d os.DirEntry, err error) error {
					if err == nil && d.Type().IsRegular() {
						if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
							leak = p
							return filepath.SkipAll
						}
					}
					return nil
				})
				if leak != "" {
					return Escaped, "read " + leak
				}
			}
			return Blocked, "nothing readable"
		}},
		{"P30", "gain capabilities by executing a program", func(e *Env) (Status, string) {
			got, err := nested(&Env{NoNestedUserNS: true}, "capeff")
			if err != nil {
				return Inconclusive, err.Error()
			}
			if got == "ok" {
				return Escaped, "a program this process executed holds capabilities"
			}
			return Blocked, "an executed program holds none (" + got + ")"
		}},
		{"P32", "reach the host's loopback through the jail's gateway", func(e *Env) (Status, string) {
			if !e.Jail {
				return Skip, "the egress jail is off: the host's loopback is reachable by configuration"
			}
			if _, ok := e.NetTargets["host-loopback"]; !ok {
				gw, err := jailGateway()
				if err != nil {
					return Inconclusive, "cannot find the jail's gateway: " + err.Error()
				}
				e2 := *e
				e2.NetTargets = map[string][]string{"host-loopback": {}}
				for _, port := range []string{"22", "80", "443", "631", "5432", "6379", "8080"} {
					if hostPortAllowed(e, "tcp", port) {
						continue // opened on purpose (--allow-host-port): an OPEN line (P90)
					}
					e2.NetTargets["host-loopback"] = append(e2.NetTargets["host-loopback"], net.JoinHostPort(gw, port))
				}
				e = &e2
			}
			return netProbeVia("host-loopback", "tcp", false)(e)
		}},
		{"P33", "read the host user's keyring", func(e *Env) (Status, string) {
			id, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_USER_KEYRING, 0, 0, 0)
			if err != nil {
				// ENOSYS: the seccomp filter refuses the keyring.
				return refused("find the user keyring", err, unix.EPERM, unix.EACCES, unix.ENOKEY, unix.EDQUOT, unix.ENOSYS)
			}
			buf := make([]byte, 4096)
			n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
			if err != nil {
				return refused("read the user keyring", err, unix.EPERM, unix.EACCES, unix.ENOKEY)
			}
			if n > 0 {
				return Escaped, fmt.Sprintf("the user keyring holds %d keys", n/4)
			}
			return Blocked, "the user keyring here is a fresh, empty one (own user namespace)"
		}},
		{"P31", "unmount the sandbox's marker directly", func(e *Env) (Status, string) {
			return refused("umount /tmp/.claude-sandbox", unix.Unmount(e.path("/tmp/.claude-sandbox"), unix.MNT_DETACH), unix.EPERM, unix.EACCES, unix.EINVAL)
		}},
	}
}

// abstractSockets lists the abstract socket names in /proc/net/unix.
func abstractSockets(e *Env) []string {
	b, _ := os.ReadFile(e.path("/proc/net/unix"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 8 && strings.HasPrefix(f[7], "@") && len(out) < 256 {
			out = append(out, f[7][1:])
		}
	}
	return out
}

// jailGateway is the jail's gateway: the .1 of tun0's own address.
func jailGateway() (string, error) {
	l, err := netlinkLinkByName("tun0")
	if err != nil {
		return "", err
	}
	addrs, err := netlinkAddrList(l)
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ip4 := a.To4(); ip4 != nil {
			ip4[3] = 1
			return ip4.String(), nil
		}
	}
	return "", errors.New("tun0 has no IPv4 address")
}

// sessionSocketProbe connects to the sockets under /tmp and /run/user and
// reports ESCAPED when one accepts and outside says its listener is not in
// the sandbox. The sandbox's /tmp is its own tmpfs: a socket there that a
// process inside bound (Claude Code makes some) is the session's own, no
// door out.
func sessionSocketProbe(e *Env, outside func(fd int) bool) (Status, string) {
	tried, own := 0, 0
	for _, dir := range []string{"/tmp", "/run/user"} {
		var hit string
		_ = filepath.WalkDir(e.path(dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.Type()&os.ModeSocket == 0 {
				return nil
			}
			if tried++; tried > maxSocketTries {
				return filepath.SkipAll
			}
			fd, err := connectUnix(p)
			if err != nil {
				return nil
			}
			out := outside(fd)
			unix.Close(fd)
			if !out {
				own++
				return nil
			}
			hit = p
			return filepath.SkipAll
		})
		if hit != "" {
			return Escaped, "connected to " + hit + " (under " + dir + "), whose listener is outside the sandbox"
		}
	}
	return Blocked, fmt.Sprintf("%d sockets under /tmp and /run/user, none of the host's connectable (%d the sandbox's own)", tried, own)
}
