package jail

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/routes"
)

type netipAddr = netip.Addr

// DiscoverHost reads the facts of the current network namespace and the
// resolv.conf at path.
func DiscoverHost(resolvConf string) (HostFacts, error) {
	f, err := discoverNetwork()
	if err != nil {
		return f, err
	}
	if resolvConf == nat64ResolvConf && f.deps.known {
		// Read already, as what the NAT64 answer may depend on.
		f.ResolvConf = f.deps.resolv
	} else if rf, err := os.Open(resolvConf); err == nil {
		f.ResolvConf, _ = ReadResolvConf(rf)
		rf.Close()
	}
	f.IPv6Egress = hasIPv6Default()
	return f, nil
}

// discoverNetwork reads what the policy is built from and the live policy
// re-reads: the connected subnets and the routed destinations; and what
// the NAT64 answer may depend on (nat64Deps).
func discoverNetwork() (HostFacts, error) {
	var f HostFacts
	ifs, err := net.Interfaces()
	if err != nil {
		return f, err
	}
	deps := nat64Deps{known: true}
	for _, ifc := range ifs {
		up, running := "down", "-"
		if ifc.Flags&net.FlagUp != 0 {
			up = "up"
		}
		if ifc.Flags&net.FlagRunning != 0 {
			running = "running"
		}
		deps.links = append(deps.links, fmt.Sprintf("%d %s %s %s", ifc.Index, ifc.Name, up, running))
		addrs, err := ifc.Addrs()
		if err != nil {
			// Unknown: no answer is kept across this read.
			deps.known = false
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			addr, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			f.Connected = append(f.Connected, netip.PrefixFrom(addr.Unmap(), ones).Masked())
			deps.addrs = append(deps.addrs, fmt.Sprintf("%d %s", ifc.Index, netip.PrefixFrom(addr.Unmap(), ones)))
		}
	}
	routed, viaDefault, defaults, err := hostRoutes()
	if err != nil {
		return f, fmt.Errorf("read the host's routes: %w", err)
	}
	f.Routed, f.ViaDefault = routed, viaDefault
	deps.defaults = defaults
	for _, p := range routed {
		deps.routed = append(deps.routed, p.String())
	}
	if rf, err := os.Open(nat64ResolvConf); err == nil {
		deps.resolv, err = ReadResolvConf(rf)
		rf.Close()
		if err != nil {
			deps.known = false
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		deps.known = false
	}
	deps.sort()
	f.deps = deps
	return f, nil
}

// HostRoutes returns the destinations the current network namespace
// reaches through anything but its default routes, from every routing
// table: a more specific route, whatever its gateway (another gateway or
// interface: a VPN, a container bridge; or the default route's own
// gateway: a static route or DHCP option 121 to a corporate or lab
// subnet), the routes of a policy-routing table, the host's own addresses
// (the local table). Left out, as the way to the internet: default
// routes; routes as wide as /0-/7 (IPv4) or /0-/15 (IPv6), which VPN
// clients install as halves of a default route (0.0.0.0/1 and
// 128.0.0.0/1) and which would otherwise make the whole internet
// internal; and routes that reach nothing (unreachable, blackhole,
// prohibit, throw). A range the user knows is internet is exempted by
// the policy (netpolicy.Config.Internet, --internet-cidr), not here.
func HostRoutes() ([]netip.Prefix, error) {
	routed, _, _, err := hostRoutes()
	return routed, err
}

// hostRoutes is HostRoutes; the routed destinations whose route goes
// through the gateway and interface of a default route of the same
// table (the ones a user may know are internet, named as such in the
// blocks' reason); and the routes it leaves out as the way to the
// internet (the default routes and the routes as wide), each described by
// its table, destination, type, gateway, interface and metric (and its
// next hops, for a multipath route).
func hostRoutes() (routed, viaDefault []netip.Prefix, wideRoutes []string, err error) {
	all, err := routes.DumpRoutes()
	if err != nil {
		return nil, nil, nil, err
	}
	type hop struct {
		table, link uint32
		gw          netip.Addr
	}
	defaults := map[hop]bool{}
	wide := func(r routes.Route) bool {
		bits := r.Dst.Bits()
		return (r.Dst.Addr().Is4() && bits < 8) || (r.Dst.Addr().Is6() && bits < 16)
	}
	for _, r := range all {
		if wide(r) && r.Type == unix.RTN_UNICAST {
			defaults[hop{r.Table, r.Link, r.Gw}] = true
		}
	}
	via := func(a netip.Addr) string {
		if !a.IsValid() {
			return "<nil>"
		}
		return a.String()
	}
	var out []netip.Prefix
	for _, r := range all {
		if wide(r) {
			dst := r.Dst.String()
			if r.Dst.Bits() == 0 {
				dst = "default"
			}
			d := fmt.Sprintf("table %d family %d %s type %d via %s dev %d metric %d", r.Table, r.Family, dst, r.Type, via(r.Gw), r.Link, r.Priority)
			for _, nh := range r.MultiPath {
				d += fmt.Sprintf(" nexthop via %s dev %d weight %d", via(nh.Gw), nh.Link, nh.Hops)
			}
			wideRoutes = append(wideRoutes, d)
			continue
		}
		switch r.Type {
		case unix.RTN_UNREACHABLE, unix.RTN_BLACKHOLE, unix.RTN_PROHIBIT, unix.RTN_THROW:
			continue
		}
		p := netip.PrefixFrom(r.Dst.Addr().Unmap(), r.Dst.Bits()).Masked()
		if !p.IsValid() {
			continue
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
		if r.Gw.IsValid() && defaults[hop{r.Table, r.Link, r.Gw}] && !slices.Contains(viaDefault, p) {
			viaDefault = append(viaDefault, p)
		}
	}
	return out, viaDefault, wideRoutes, nil
}

// hasIPv6Default reports an IPv6 default route on a non-loopback device
// (from /proc/net/ipv6_route: destination ::/0).
func hasIPv6Default() bool {
	fh, err := os.Open("/proc/net/ipv6_route")
	if err != nil {
		return false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		if f[0] == strings.Repeat("0", 32) && f[1] == "00" && f[9] != "lo" {
			// RTF_REJECT (0x0200) marks unreachable routes.
			if flags, err := strconv.ParseUint(f[8], 16, 32); err == nil && flags&0x200 == 0 {
				return true
			}
		}
	}
	return false
}

// dupFile duplicates f (close-on-exec); nonblock makes the copy
// non-blocking, for the sink: its reads go through Go's poller, so Close
// interrupts a pending Read.
func dupFile(f *os.File, nonblock bool) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if nonblock {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
