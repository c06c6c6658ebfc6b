package jail

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

type netipAddr = netip.Addr

// DiscoverHost reads the facts of the current network namespace and the
// resolv.conf at path.
func DiscoverHost(resolvConf string) (HostFacts, error) {
	f, err := discoverNetwork()
	if err != nil {
		return f, err
	}
	if rf, err := os.Open(resolvConf); err == nil {
		f.ResolvConf, _ = ReadResolvConf(rf)
		rf.Close()
	}
	f.IPv6Egress = hasIPv6Default()
	return f, nil
}

// discoverNetwork reads what the policy is built from and the live policy
// re-reads: the connected subnets and the routed destinations.
func discoverNetwork() (HostFacts, error) {
	var f HostFacts
	ifs, err := net.Interfaces()
	if err != nil {
		return f, err
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
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
		}
	}
	routed, err := HostRoutes()
	if err != nil {
		return f, fmt.Errorf("read the host's routes: %w", err)
	}
	f.Routed = routed
	return f, nil
}

// HostRoutes returns the destinations the current network namespace
// reaches through anything but its default routes, from every routing
// table: a more specific route through another gateway or interface (a
// VPN, a container bridge, a corporate network), the routes of a
// policy-routing table, the host's own addresses (the local table). Left
// out, as the way to the internet: default routes; routes as wide as
// /0-/7 (IPv4) or /0-/15 (IPv6), which VPN clients install as halves of a
// default route (0.0.0.0/1 and 128.0.0.0/1) and which would otherwise
// make the whole internet internal; routes through the same gateway and
// interface as a default route of the same table; and routes that reach
// nothing (unreachable, blackhole, prohibit, throw).
func HostRoutes() ([]netip.Prefix, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	all, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	type hop struct {
		table, link int
		gw          string
	}
	defaults := map[hop]bool{}
	wide := func(r netlink.Route) bool {
		if r.Dst == nil {
			return true
		}
		ones, bits := r.Dst.Mask.Size()
		return (bits == 32 && ones < 8) || (bits == 128 && ones < 16)
	}
	for _, r := range all {
		if wide(r) && r.Type == unix.RTN_UNICAST {
			defaults[hop{r.Table, r.LinkIndex, r.Gw.String()}] = true
		}
	}
	var out []netip.Prefix
	for _, r := range all {
		if wide(r) {
			continue
		}
		switch r.Type {
		case unix.RTN_UNREACHABLE, unix.RTN_BLACKHOLE, unix.RTN_PROHIBIT, unix.RTN_THROW:
			continue
		}
		if r.Gw != nil && defaults[hop{r.Table, r.LinkIndex, r.Gw.String()}] {
			continue
		}
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		p := netip.PrefixFrom(a.Unmap(), ones).Masked()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
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
