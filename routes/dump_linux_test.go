package routes

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// ipJSON runs ip(8) with args (in the calling thread's network namespace:
// the child is forked from it) and decodes its JSON output into v.
func ipJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-j"}, args...)...).Output()
	if err != nil {
		t.Fatalf("ip -j %s: %v", strings.Join(args, " "), err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("ip -j %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ipRun runs ip(8) with args in the calling thread's network namespace.
func ipRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Errorf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// ipRouteLines lists every route of every table as ip(8) shows it
// (numeric), one comparable line each, in show's form.
func ipRouteLines(t *testing.T) []string {
	t.Helper()
	var rs []struct {
		Type, Dst, Gateway, Dev, Table, Protocol, Scope string
		Metric                                          uint32
		Nexthops                                        []struct {
			Gateway, Dev string
			Weight       int
		}
	}
	var out []string
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rs = nil
		ipJSON(t, &rs, "-"+map[int]string{unix.AF_INET: "4", unix.AF_INET6: "6"}[fam], "-N", "-d", "route", "show", "table", "all")
		for _, r := range rs {
			dst := r.Dst
			if dst == "default" {
				dst = "0.0.0.0/0"
				if fam == unix.AF_INET6 {
					dst = "::/0"
				}
			} else if !strings.Contains(dst, "/") {
				dst = netip.PrefixFrom(netip.MustParseAddr(dst), netip.MustParseAddr(dst).BitLen()).String()
			}
			s := fmt.Sprintf("%d t%s p%s s%s n%s %s", fam, r.Table, r.Protocol, r.Scope, r.Type, dst)
			if r.Gateway != "" {
				s += " via " + r.Gateway
			}
			if r.Dev != "" {
				s += " dev " + r.Dev
			}
			if r.Metric != 0 {
				s += fmt.Sprintf(" metric %d", r.Metric)
			}
			for _, nh := range r.Nexthops {
				s += fmt.Sprintf(" nexthop via %s dev %s weight %d", nh.Gateway, nh.Dev, nh.Weight)
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// dumpLines lists DumpRoutes' routes (read with a first buffer of
// bufSize bytes) as ipRouteLines does, link names for indexes.
func dumpLines(t *testing.T, bufSize int) []string {
	t.Helper()
	rs, err := dumpRoutes(openRtnetlink, bufSize)
	if err != nil {
		t.Fatal(err)
	}
	name := func(index uint32) string {
		ifc, err := net.InterfaceByIndex(int(index))
		if err != nil {
			t.Fatal(err)
		}
		return ifc.Name
	}
	var out []string
	for _, r := range rs {
		s := show(r)
		if r.Link != 0 {
			s = strings.Replace(s, fmt.Sprintf(" dev %d", r.Link), " dev "+name(r.Link), 1)
		}
		for _, nh := range r.MultiPath {
			s = strings.Replace(s, fmt.Sprintf(" dev %d weight", nh.Link), " dev "+name(nh.Link)+" weight", 1)
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// The route dump reads what ip(8) reads: in a namespace set up by the
// package's own link, address and route messages (inFreshNetns applies a
// plan through Netlink), with more routes ip(8) adds there (a gateway, a
// policy table, a blackhole, multipath, IPv6 through a link-local
// gateway), every route of every table, the same, line for line; and
// again with a first buffer too small for any datagram (the dump starts
// over with a larger one). Seen failing with the truncation check
// removed (the cut datagram fails to decode).
func TestDumpRoutesAsIP(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("iproute2's ip is needed")
	}
	inFreshNetns(t, func() {
		ipRun(t, "link", "set", "lo", "up")
		ipRun(t, "route", "add", "198.51.100.0/24", "via", "192.0.2.9", "dev", "tun0", "onlink", "metric", "50")
		ipRun(t, "route", "add", "203.0.113.0/24", "dev", "blk0", "table", "100")
		ipRun(t, "route", "add", "blackhole", "198.18.7.0/24", "table", "1000")
		ipRun(t, "route", "add", "44.0.0.0/8", "nexthop", "via", "192.0.2.7", "dev", "tun0", "onlink", "weight", "2", "nexthop", "via", "192.0.2.8", "dev", "blk0", "onlink")
		ipRun(t, "-6", "route", "add", "2001:db8:5::/48", "via", "fe80::9", "dev", "tun0", "metric", "7")
		want := ipRouteLines(t)
		if len(want) < 30 {
			t.Fatalf("ip shows %d routes; the plan's are missing:\n%s", len(want), strings.Join(want, "\n"))
		}
		for _, size := range []int{rtnlBufSize, 64} {
			if got := dumpLines(t, size); !slices.Equal(got, want) {
				t.Errorf("DumpRoutes (buffer %d):\n%s\nip:\n%s", size, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	})
}

// The links and addresses Netlink configured, as ip(8) shows them: the
// TUN up with the plan's MTU, transmit queue length and no IPv6
// link-local address generation; its two addresses with no prefix route
// (and no duplicate address detection, which only IPv6 shows); the sink
// up.
func TestNetlinkLinkSetupAsIP(t *testing.T) {
	testutil.NeedsRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("iproute2's ip is needed")
	}
	inFreshNetns(t, func() {
		var links []struct {
			Ifname   string
			Flags    []string
			MTU      int
			Txqlen   int
			AddrInfo []struct {
				Family, Local string
				Prefixlen     int
				Noprefixroute bool
				Nodad         bool
			} `json:"addr_info"`
		}
		ipJSON(t, &links, "-d", "addr", "show")
		var details []struct {
			Ifname           string
			Inet6AddrGenMode string `json:"inet6_addr_gen_mode"`
		}
		ipJSON(t, &details, "-d", "link", "show", "tun0")
		if len(details) != 1 || details[0].Inet6AddrGenMode != "none" {
			t.Errorf("tun0's details %+v, want addrgenmode none", details)
		}
		seen := map[string]bool{}
		for _, l := range links {
			seen[l.Ifname] = true
			up := slices.Contains(l.Flags, "UP")
			switch l.Ifname {
			case "tun0":
				if !up || l.MTU != DefaultMTU || l.Txqlen != DefaultTxQueueLen {
					t.Errorf("tun0: %+v, want up, mtu %d, txqlen %d", l, DefaultMTU, DefaultTxQueueLen)
				}
				var addrs []string
				for _, a := range l.AddrInfo {
					addrs = append(addrs, a.Local+"/"+strconv.Itoa(a.Prefixlen))
					if !a.Noprefixroute || (a.Family == "inet6" && !a.Nodad) {
						t.Errorf("tun0 address %+v: want noprefixroute (and nodad for IPv6)", a)
					}
				}
				slices.Sort(addrs)
				if want := []string{"192.0.2.2/32", "fdc5::2/128"}; !slices.Equal(addrs, want) {
					t.Errorf("tun0 addresses %v, want %v", addrs, want)
				}
			case "blk0", "lo":
				if !up {
					t.Errorf("%s is down", l.Ifname)
				}
			}
		}
		if !seen["tun0"] || !seen["blk0"] {
			t.Errorf("links %v, want tun0 and blk0", seen)
		}
	})
}

// Netlink's link and address requests report the kernel's refusals and
// their own: a missing link, an invalid address (refused before any
// message is sent), an address added twice (EEXIST), an MTU the link
// refuses (EINVAL).
func TestNetlinkExecErrors(t *testing.T) {
	withNetlink(t, func(nl *Netlink) {
		addr := Op{Kind: OpAddrAdd, Link: "tun0", Prefix: netip.MustParsePrefix("192.0.2.2/32")}
		for _, tt := range []struct {
			op    Op
			want  string
			errno error
		}{
			{Op{Kind: OpLinkUp, Link: "nosuch0"}, "nosuch0", unix.ENODEV},
			{Op{Kind: OpAddrAdd, Link: "tun0"}, "invalid address", nil},
			{addr, "", nil},
			{addr, "", unix.EEXIST},
			{Op{Kind: OpLinkConfig, Link: "tun0", MTU: 10, TxQueueLen: 100}, "mtu", unix.EINVAL},
			{Op{Kind: OpLinkConfig, Link: "tun0", MTU: DefaultMTU, TxQueueLen: DefaultTxQueueLen}, "", nil},
		} {
			err := nl.Exec(tt.op)
			switch {
			case tt.want == "" && tt.errno == nil:
				if err != nil {
					t.Errorf("%v: %v", tt.op, err)
				}
			case err == nil || !strings.Contains(err.Error(), tt.want) || (tt.errno != nil && !errors.Is(err, tt.errno)):
				t.Errorf("%v: %v, want an error saying %q (%v)", tt.op, err, tt.want, tt.errno)
			}
		}
	})
}
