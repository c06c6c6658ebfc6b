package plan

import (
	"io/fs"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// hostPorts puts the host loopback ports (--allow-host-port) in p's
// egress: they exist only with the jail, whose gateway relays them
// (--net=host reaches the host's loopback already, --net=none nothing).
func hostPorts(p *Plan, ports []netpolicy.HostPort) error {
	if len(ports) == 0 {
		return nil
	}
	if p.Net != NetJail {
		return errf("--allow-host-port applies to the egress jail (--net=jail), not --net=%s (with --net=host the host's loopback is reachable already)", p.Net)
	}
	seen := map[netpolicy.HostPort]bool{}
	for _, h := range ports {
		if h.Port == 0 || (h.Proto != netpolicy.ProtoTCP && h.Proto != netpolicy.ProtoUDP) {
			return errf("--allow-host-port %s: want a port from 1 to 65535, tcp or udp", h)
		}
		if !seen[h] {
			seen[h] = true
			p.Egress.HostPorts = append(p.Egress.HostPorts, h)
		}
	}
	return nil
}

// checkDevice admits a --dev-bind source: a character or block device,
// or a directory below /dev (/dev/dri, /dev/snd). bubblewrap binds any
// path with devices on; here the one bind that keeps device access takes
// only what is meant to be a device, so a mistyped directory cannot open
// every device node that happens to lie in a tree, and any other
// directory is --ro-bind's (whose nodes stay closed). "Below /dev" is a
// property of the path walked, so a directory must be reached without a
// symlink (devDir: a link in /dev/shm to a tree elsewhere is refused here,
// by the same check the mount makes again).
func checkDevice(flag, src string, stat func(string) (fs.FileInfo, error), devDir func(string) error) error {
	fi, err := stat(src)
	if err != nil {
		return errf("%s: source %s: %v", flag, src, unwrapPathErr(err))
	}
	switch m := fi.Mode(); {
	case m&fs.ModeDevice != 0:
		return nil
	case m.IsDir() && mounts.Within(src, "/dev") && src != "/dev":
		if err := devDir(src); err != nil {
			return errf("%s: source %s: %v", flag, src, unwrapPathErr(err))
		}
		return nil
	case m.IsDir():
		return errf("%s: source %s is a directory outside /dev: give the device nodes themselves (or a directory below /dev such as /dev/dri), and --ro-bind for anything else", flag, src)
	}
	return errf("%s: source %s is not a device node: --dev-bind takes character and block devices (e.g. /dev/dri/renderD128) and directories below /dev; use --bind or --ro-bind for files", flag, src)
}

// publish puts the published ports in p's egress: only the jail has a
// path into the sandbox's network from the launcher (with --net=host a
// server inside listens on the host already; --net=none has no network
// to reach).
func publish(p *Plan, pubs []netpolicy.Publish) error {
	if len(pubs) == 0 {
		return nil
	}
	switch p.Net {
	case NetHost:
		return errf("--publish needs --net=jail: with --net=host the command's servers listen on the host already")
	case NetNone:
		return errf("--publish needs --net=jail: --net=none has no network a connection could come in on")
	}
	type hostSide struct {
		proto netpolicy.Proto
		port  uint16
	}
	seen := map[hostSide]netpolicy.Publish{}
	for _, pb := range pubs {
		if pb.HostPort == 0 || pb.Port == 0 || !pb.HostAddr.IsValid() || (pb.Proto != netpolicy.ProtoTCP && pb.Proto != netpolicy.ProtoUDP) {
			return errf("--publish %s: want [HOSTADDR:]HOSTPORT:PORT[/udp] with ports from 1 to 65535", pb)
		}
		k := hostSide{pb.Proto, pb.HostPort}
		if old, ok := seen[k]; ok {
			return errf("--publish %s: host port %d/%s is already published (%s)", pb, pb.HostPort, pb.Proto, old)
		}
		seen[k] = pb
		p.Egress.Publish = append(p.Egress.Publish, pb)
	}
	return nil
}
