package routes

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// These tests check the mapping from operations to netlink messages; they
// send nothing to the kernel.

func TestNetlinkRoute(t *testing.T) {
	tests := []struct {
		op     Op
		idx    int
		typ    int
		family int
		scope  netlink.Scope
		dst    string
		link   int
		err    bool
	}{
		{Op{Kind: OpSink, Link: "blk0", Prefix: netip.MustParsePrefix("10.0.0.0/8")}, 8, unix.RTN_UNICAST, unix.AF_INET, netlink.SCOPE_LINK, "10.0.0.0/8", 8, false},
		{Op{Kind: OpSink, Link: "blk0", Prefix: netip.MustParsePrefix("fc00::/7")}, 8, unix.RTN_UNICAST, unix.AF_INET6, netlink.SCOPE_LINK, "fc00::/7", 8, false},
		{Op{Kind: OpSink, Link: "blk0", Prefix: netip.MustParsePrefix("64:ff9b::a00:0/104")}, 8, unix.RTN_UNICAST, unix.AF_INET6, netlink.SCOPE_LINK, "64:ff9b::a00:0/104", 8, false},
		{Op{Kind: OpSink, Link: "blk0", Prefix: netip.MustParsePrefix("169.254.0.0/16")}, 0, 0, 0, 0, "", 0, true},
		{Op{Kind: OpDefault, Link: "tun0", Prefix: netip.MustParsePrefix("0.0.0.0/0")}, 7, unix.RTN_UNICAST, unix.AF_INET, netlink.SCOPE_LINK, "0.0.0.0/0", 7, false},
		{Op{Kind: OpDefault, Link: "tun0", Prefix: netip.MustParsePrefix("::/0")}, 7, unix.RTN_UNICAST, unix.AF_INET6, netlink.SCOPE_LINK, "::/0", 7, false},
		{Op{Kind: OpPunch, Link: "tun0", Prefix: netip.MustParsePrefix("10.1.2.3/32")}, 7, unix.RTN_UNICAST, unix.AF_INET, netlink.SCOPE_LINK, "10.1.2.3/32", 7, false},
		{Op{Kind: OpPunch, Link: "tun0", Prefix: netip.MustParsePrefix("10.1.2.3/32")}, 0, 0, 0, 0, "", 0, true},
		{Op{Kind: OpSink, Link: "blk0"}, 8, 0, 0, 0, "", 0, true},
		{Op{Kind: OpLinkUp, Prefix: netip.MustParsePrefix("10.0.0.0/8")}, 0, 0, 0, 0, "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			r, err := netlinkRoute(tt.op, tt.idx)
			if tt.err {
				if err == nil {
					t.Fatalf("netlinkRoute(%v) = %+v, want error", tt.op, r)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != tt.typ || r.Family != tt.family || r.Scope != tt.scope || r.Dst.String() != tt.dst || r.LinkIndex != tt.link || r.Gw != nil {
				t.Errorf("netlinkRoute(%v) = type %d family %d scope %v dst %v link %d gw %v", tt.op, r.Type, r.Family, r.Scope, r.Dst, r.LinkIndex, r.Gw)
			}
		})
	}
}

func TestNetlinkAddr(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"10.255.255.2/32", "10.255.255.2/32"},
		{"fd7a:5a4e::2/128", "fd7a:5a4e::2/128"},
	} {
		a := netlinkAddr(netip.MustParsePrefix(tt.in))
		if a.IPNet.String() != tt.want {
			t.Errorf("addr %v, want %s", a.IPNet, tt.want)
		}
		if a.Flags&unix.IFA_F_NOPREFIXROUTE == 0 || a.Flags&unix.IFA_F_NODAD == 0 {
			t.Errorf("flags %#x lack noprefixroute/nodad", a.Flags)
		}
		if len(a.IPNet.IP) != net.IPv4len && netip.MustParsePrefix(tt.in).Addr().Is4() {
			t.Errorf("IPv4 address encoded as %d bytes", len(a.IPNet.IP))
		}
	}
}

func TestIPv6Off(t *testing.T) {
	defer func(f func(string) ([]byte, error)) { readFile = f }(readFile)
	for _, tt := range []struct {
		content string
		err     error
		want    bool
	}{
		{"1\n", nil, true},
		{"0\n", nil, false},
		{"", unix.ENOENT, true},
	} {
		readFile = func(string) ([]byte, error) { return []byte(tt.content), tt.err }
		if got := ipv6Off(); got != tt.want {
			t.Errorf("ipv6Off() with %q/%v = %v", tt.content, tt.err, got)
		}
	}
}
