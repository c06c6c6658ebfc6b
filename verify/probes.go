package verify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// credentialVars are the variables P12 looks for.
var credentialVars = []string{"GH_TOKEN", "GITHUB_TOKEN", "ANTHROPIC_API_KEY", "SSH_AUTH_SOCK"}

// refused maps an attempt's error to a probe verdict: nil means the
// attempt worked (an escape), a permission error means the sandbox
// refused it.
func refused(what string, err error, blockedBy ...unix.Errno) (Status, string) {
	if err == nil {
		return Escaped, what + " succeeded"
	}
	if len(blockedBy) == 0 {
		blockedBy = []unix.Errno{unix.EPERM, unix.EACCES, unix.EROFS}
	}
	for _, e := range blockedBy {
		if errors.Is(err, e) {
			return Blocked, fmt.Sprintf("%s: %v", what, err)
		}
	}
	return Inconclusive, fmt.Sprintf("%s: %v (neither success nor a refusal)", what, err)
}

func mustCIDR(s string) *net.IPNet {
	_, n, _ := net.ParseCIDR(s)
	return n
}

// Probes is the fixed adversarial battery.
func Probes() []Item {
	var all []Item
	for _, group := range [][]Item{firstProbes(), moreProbes(), egressProbes(), wallProbes(), persistProbes(), homeProbes(), hostProbes(), rootviewProbes()} {
		all = append(all, group...)
	}
	return all
}

func firstProbes() []Item {
	return []Item{
		{"P01", "delete the default route", func(e *Env) (Status, string) {
			routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
			if err != nil {
				return Inconclusive, "list routes: " + err.Error()
			}
			for _, r := range routes {
				if r.Dst == nil || r.Dst.IP.IsUnspecified() {
					return refused("route del default", netlink.RouteDel(&r))
				}
			}
			return Inconclusive, "no default route to try"
		}},
		{"P02", "add a route past the blocks", func(e *Env) (Status, string) {
			lo, err := netlink.LinkByName("lo")
			if err != nil {
				return Inconclusive, "no lo: " + err.Error()
			}
			r := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: mustCIDR("10.99.0.0/16")}
			err = netlink.RouteAdd(r)
			if err == nil {
				_ = netlink.RouteDel(r)
			}
			return refused("route add 10.99.0.0/16", err)
		}},
		{"P03", "create a network device", func(e *Env) (Status, string) {
			d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "verify0"}, PeerName: "verify1"}
			err := netlink.LinkAdd(d)
			if err == nil {
				_ = netlink.LinkDel(d)
			}
			return refused("link add verify0 type veth", err)
		}},
		{"P04", "open a raw socket", func(e *Env) (Status, string) {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
			if err == nil {
				unix.Close(fd)
			}
			return refused("raw socket", err)
		}},
		{"P05", "open a packet socket", func(e *Env) (Status, string) {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
			if err == nil {
				unix.Close(fd)
			}
			return refused("packet socket", err, unix.EPERM, unix.EACCES, unix.EAFNOSUPPORT)
		}},
		{"P06", "remount / read-write", func(e *Env) (Status, string) {
			return refused("remount / rw", unix.Mount("", e.path("/"), "", unix.MS_REMOUNT|unix.MS_BIND, ""))
		}},
		{"P07", "bind over a read-only path", func(e *Env) (Status, string) {
			err := unix.Mount(e.path("/tmp"), e.path("/usr"), "", unix.MS_BIND, "")
			if err == nil {
				_ = unix.Unmount(e.path("/usr"), unix.MNT_DETACH)
			}
			return refused("bind /tmp over /usr", err)
		}},
		{"P08", "write outside the workspace", func(e *Env) (Status, string) {
			for _, d := range []string{"/usr", "/etc", "/var", "/opt"} {
				if err := tryCreate(e, d); err == nil {
					return Escaped, "created a file in " + d
				} else if !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) && !errors.Is(err, os.ErrNotExist) {
					return Inconclusive, fmt.Sprintf("%s: %v", d, err)
				}
			}
			return Blocked, "/usr, /etc, /var, /opt are read-only"
		}},
		{"P09", "read the home's credentials", func(e *Env) (Status, string) {
			var found []string
			for _, rel := range []string{".ssh", ".aws", ".gnupg", ".docker/config.json", ".kube/config", ".config/gcloud", ".git-credentials"} {
				if _, err := os.Stat(e.path(filepath.Join(e.Home, rel))); err == nil {
					found = append(found, rel)
				}
			}
			if len(found) > 0 {
				return Escaped, "visible: " + strings.Join(found, " ")
			}
			return Blocked, "no ~/.ssh, ~/.aws, ~/.gnupg, docker, kube, gcloud or git credentials"
		}},
		{"P10", "read ~/.netrc and /etc/shadow", func(e *Env) (Status, string) {
			paths := []string{filepath.Join(e.Home, ".netrc"), "/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"}
			keys, _ := filepath.Glob(e.path("/etc/ssh/ssh_host_*_key"))
			for _, k := range keys {
				paths = append(paths, strings.TrimPrefix(k, e.Root))
			}
			for _, p := range paths {
				if b, err := os.ReadFile(e.path(p)); err == nil && len(b) > 0 {
					return Escaped, fmt.Sprintf("read %d bytes of %s", len(b), p)
				}
			}
			return Blocked, "empty or unreadable"
		}},
		{"P11", "see host processes in /proc", func(e *Env) (Status, string) {
			b, err := os.ReadFile(e.path("/proc/1/cmdline"))
			if err != nil {
				return Inconclusive, err.Error()
			}
			if strings.HasPrefix(string(b), "claude-sandbox:stage") {
				return Blocked, "PID 1 is the sandbox's own init: host processes are not in this /proc"
			}
			return Escaped, "PID 1 is " + strings.ReplaceAll(string(b), "\x00", " ")
		}},
		{"P12", "recover scrubbed variables from /proc/*/environ", func(e *Env) (Status, string) {
			ents, _ := os.ReadDir(e.path("/proc"))
			var setInside []string
			for _, x := range ents {
				b, err := os.ReadFile(e.path("/proc/" + x.Name() + "/environ"))
				if err != nil {
					continue
				}
				for _, v := range strings.Split(string(b), "\x00") {
					name, value, _ := strings.Cut(v, "=")
					if value == "" || !slices.Contains(credentialVars, name) {
						continue
					}
					// A value the shadow kept outside, seen inside, is the
					// leak. Another value was set inside (Claude Code puts
					// its settings' env block into its children's
					// environment): nothing was recovered.
					if e.Scrubbed == nil || e.Scrubbed(name, value) {
						return Escaped, fmt.Sprintf("%s in /proc/%s/environ", name, x.Name())
					}
					if !slices.Contains(setInside, name) {
						setInside = append(setInside, name)
					}
				}
			}
			if len(setInside) > 0 {
				return Blocked, fmt.Sprintf("no scrubbed value in any visible process; %s set inside (Claude Code's settings env?) to a value the shadow did not scrub", strings.Join(setInside, ", "))
			}
			return Blocked, "no credential variable in any visible process"
		}},
		{"P13", "inject keystrokes (TIOCSTI)", ttyProbe(unix.TIOCSTI)},
		{"P14", "paste a console selection (TIOCLINUX)", ttyProbe(unix.TIOCLINUX)},
		{"P15", "ptrace the sandbox's init", func(e *Env) (Status, string) {
			pid := e.InitPID
			if pid == 0 {
				pid = 1
			}
			err := unix.PtraceAttach(pid)
			if err == nil {
				_ = unix.PtraceDetach(pid)
			}
			return refused(fmt.Sprintf("ptrace PID %d", pid), err)
		}},
		{"P16", "signal a host process", func(e *Env) (Status, string) {
			if e.HostPID == 0 {
				return Blocked, "no host process id is visible to aim at (own PID namespace)"
			}
			return refused(fmt.Sprintf("kill -0 %d", e.HostPID), unix.Kill(e.HostPID, 0), unix.ESRCH, unix.EPERM)
		}},
		{"P17", "rewrite the configuration, gitconfig or guard", func(e *Env) (Status, string) {
			targets := []string{"/etc/claude-sandbox.conf", "/etc/claude-code/managed-settings.json", "/usr/libexec/claude-sandbox/claude-sandbox", "/usr/local/bin/claude"}
			if g := e.Getenv("GIT_CONFIG_GLOBAL"); g != "" {
				targets = append(targets, g)
			}
			for _, p := range targets {
				f, err := os.OpenFile(e.path(p), os.O_WRONLY|os.O_APPEND, 0)
				if err == nil {
					f.Close()
					return Escaped, p + " is writable"
				}
			}
			return Blocked, "none of " + strings.Join(targets, ", ") + " is writable"
		}},
		{"P18", "create a setuid program", func(e *Env) (Status, string) {
			dir := e.Workspace
			if dir == "" {
				dir = "/tmp"
			}
			f, err := os.CreateTemp(e.path(dir), ".verify-suid-*")
			if err != nil {
				return Inconclusive, err.Error()
			}
			name := f.Name()
			f.Close()
			defer os.Remove(name)
			if err := unix.Chmod(name, 0o4755); err != nil {
				return Blocked, "chmod u+s refused: " + err.Error()
			}
			fi, err := os.Stat(name)
			if err != nil {
				return Inconclusive, err.Error()
			}
			if fi.Mode()&os.ModeSetuid == 0 {
				return Blocked, "the setuid bit does not stick"
			}
			// The bit sticks on a file we own; what matters is that no
			// exec can gain privileges: no_new_privs, or a nosuid mount.
			if status(e)["NoNewPrivs"] == "1" {
				return Blocked, "setuid bits are inert: no_new_privs is set"
			}
			return Escaped, "a setuid program could be made and would run with privileges"
		}},
	}
}

// ttyProbe tries a terminal-injection ioctl on /dev/null. The kernel
// answers that with ENOTTY (not a terminal) before any permission check;
// only a seccomp filter answers EPERM. So EPERM proves the filter, and
// anything else means the call reached the kernel unfiltered: with a
// terminal at hand, the injection would have been attempted.
func ttyProbe(req uint) func(e *Env) (Status, string) {
	return func(e *Env) (Status, string) {
		fd, err := unix.Open(e.path("/dev/null"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return Inconclusive, err.Error()
		}
		defer unix.Close(fd)
		c := byte(0)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&c)))
		if errno == unix.EPERM {
			return Blocked, "refused with EPERM by the seccomp filter"
		}
		return Escaped, fmt.Sprintf("the ioctl reached the kernel unfiltered (%v)", errno)
	}
}
