package routes

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// These tests check the package's rtnetlink messages byte by byte or
// through the dump's decoder; they send nothing to the kernel.

// hdr checks a message's netlink header and returns its body.
func hdr(t *testing.T, m []byte, typ, flags uint16, seq uint32) []byte {
	t.Helper()
	if len(m) < unix.NLMSG_HDRLEN || int(binary.NativeEndian.Uint32(m)) != len(m) {
		t.Fatalf("message of %d bytes says %d", len(m), binary.NativeEndian.Uint32(m))
	}
	if g := binary.NativeEndian.Uint16(m[4:]); g != typ {
		t.Errorf("type %d, want %d", g, typ)
	}
	if g := binary.NativeEndian.Uint16(m[6:]); g != unix.NLM_F_REQUEST|flags {
		t.Errorf("flags %#x, want %#x", g, unix.NLM_F_REQUEST|flags)
	}
	if g := binary.NativeEndian.Uint32(m[8:]); g != seq {
		t.Errorf("seq %d, want %d", g, seq)
	}
	return m[unix.NLMSG_HDRLEN:]
}

// A route operation's message, read back by the dump's decoder: the
// family, destination, type, scope, table and link the kernel is asked
// for (and refusals of what is not a route with a link).
func TestRouteMsg(t *testing.T) {
	links := func(name string) (uint32, bool) {
		switch name {
		case "tun0":
			return 7, true
		case "blk0":
			return 8, true
		}
		return 0, false
	}
	tests := []struct {
		op     Op
		typ    uint16
		family uint8
		scope  uint8
		dst    string
		link   uint32
		err    bool
	}{
		{Op{Kind: OpSink, Link: "blk0", Prefix: netip.MustParsePrefix("10.0.0.0/8")}, unix.RTM_NEWROUTE, unix.AF_INET, unix.RT_SCOPE_LINK, "10.0.0.0/8", 8, false},
		{Op{Kind: OpSink, Link: "blk0", Prefix: netip.MustParsePrefix("fc00::/7")}, unix.RTM_NEWROUTE, unix.AF_INET6, unix.RT_SCOPE_LINK, "fc00::/7", 8, false},
		{Op{Kind: OpSink, Link: "blk0", Prefix: netip.MustParsePrefix("64:ff9b::a00:0/104")}, unix.RTM_NEWROUTE, unix.AF_INET6, unix.RT_SCOPE_LINK, "64:ff9b::a00:0/104", 8, false},
		{Op{Kind: OpDefault, Link: "tun0", Prefix: netip.MustParsePrefix("0.0.0.0/0")}, unix.RTM_NEWROUTE, unix.AF_INET, unix.RT_SCOPE_LINK, "0.0.0.0/0", 7, false},
		{Op{Kind: OpDefault, Link: "tun0", Prefix: netip.MustParsePrefix("::/0")}, unix.RTM_NEWROUTE, unix.AF_INET6, unix.RT_SCOPE_LINK, "::/0", 7, false},
		{Op{Kind: OpPunch, Link: "tun0", Prefix: netip.MustParsePrefix("10.1.2.3/32")}, unix.RTM_NEWROUTE, unix.AF_INET, unix.RT_SCOPE_LINK, "10.1.2.3/32", 7, false},
		{Op{Kind: OpPunch, Link: "tun0", Prefix: netip.MustParsePrefix("10.1.2.3/32")}, unix.RTM_DELROUTE, unix.AF_INET, unix.RT_SCOPE_NOWHERE, "10.1.2.3/32", 7, false},
		{Op{Kind: OpPunch, Link: "eth9", Prefix: netip.MustParsePrefix("10.1.2.3/32")}, unix.RTM_NEWROUTE, 0, 0, "", 0, true},
		{Op{Kind: OpSink, Link: "blk0"}, unix.RTM_NEWROUTE, 0, 0, "", 0, true},
		{Op{Kind: OpLinkUp, Link: "tun0", Prefix: netip.MustParsePrefix("10.0.0.0/8")}, unix.RTM_NEWROUTE, 0, 0, "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			m, err := routeMsg(tt.typ, unix.NLM_F_CREATE, tt.op, 5, links)
			if tt.err {
				if err == nil {
					t.Fatalf("routeMsg(%v) = %x, want an error", tt.op, m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body := hdr(t, m, tt.typ, unix.NLM_F_ACK|unix.NLM_F_CREATE, 5)
			r, ok, err := parseRoute(body)
			if err != nil || !ok {
				t.Fatalf("parseRoute: %v %v", ok, err)
			}
			if r.Family != tt.family || r.Scope != tt.scope || r.Dst.String() != tt.dst || r.Link != tt.link || r.Gw.IsValid() ||
				r.Type != unix.RTN_UNICAST || r.Table != unix.RT_TABLE_MAIN || r.Protocol != unix.RTPROT_BOOT {
				t.Errorf("routeMsg(%v) reads back as %+v", tt.op, r)
			}
		})
	}
}

// The link and address messages, byte by byte (little-endian hosts; the
// fields are in the host's order).
func TestLinkAndAddrMsgs(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the expected bytes are little-endian")
	}
	ifinfo := func(index, flags, change byte) []byte {
		return []byte{0, 0, 0, 0, index, 0, 0, 0, flags, 0, 0, 0, change, 0, 0, 0}
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name string
		msg  []byte
		typ  uint16
		flag uint16
		body []byte
	}{
		{"link up", linkUpMsg(3, 9), unix.RTM_NEWLINK, unix.NLM_F_ACK, ifinfo(3, unix.IFF_UP, unix.IFF_UP)},
		{"mtu and txqueuelen", linkConfigMsg(3, 65520, 1000, 9), unix.RTM_NEWLINK, unix.NLM_F_ACK, cat(ifinfo(3, 0, 0),
			[]byte{8, 0, unix.IFLA_MTU, 0, 0xf0, 0xff, 0, 0},
			[]byte{8, 0, unix.IFLA_TXQLEN, 0, 0xe8, 0x03, 0, 0})},
		{"addrgenmode none", addrGenModeMsg(3, addrGenModeNone, 9), unix.RTM_NEWLINK, unix.NLM_F_ACK, cat(ifinfo(3, 0, 0),
			[]byte{16, 0, unix.IFLA_AF_SPEC, 0, 12, 0, unix.AF_INET6, 0, 5, 0, unix.IFLA_INET6_ADDR_GEN_MODE, 0, addrGenModeNone, 0, 0, 0})},
		{"address v4", must(addrMsg(3, netip.MustParsePrefix("10.255.255.2/32"), 9)), unix.RTM_NEWADDR, unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL, cat(
			[]byte{unix.AF_INET, 32, 0, 0, 3, 0, 0, 0},
			[]byte{8, 0, unix.IFA_LOCAL, 0, 10, 255, 255, 2},
			[]byte{8, 0, unix.IFA_ADDRESS, 0, 10, 255, 255, 2},
			[]byte{8, 0, unix.IFA_FLAGS, 0, unix.IFA_F_NODAD, unix.IFA_F_NOPREFIXROUTE >> 8, 0, 0})},
		{"address v6", must(addrMsg(3, netip.MustParsePrefix("fd7a:5a4e::2/128"), 9)), unix.RTM_NEWADDR, unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL, cat(
			[]byte{unix.AF_INET6, 128, 0, 0, 3, 0, 0, 0},
			[]byte{20, 0, unix.IFA_LOCAL, 0}, netip.MustParseAddr("fd7a:5a4e::2").AsSlice(),
			[]byte{20, 0, unix.IFA_ADDRESS, 0}, netip.MustParseAddr("fd7a:5a4e::2").AsSlice(),
			[]byte{8, 0, unix.IFA_FLAGS, 0, unix.IFA_F_NODAD, unix.IFA_F_NOPREFIXROUTE >> 8, 0, 0})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if body := hdr(t, tt.msg, tt.typ, tt.flag, 9); !bytes.Equal(body, tt.body) {
				t.Errorf("body\n%x, want\n%x", body, tt.body)
			}
		})
	}
	if m, err := addrMsg(3, netip.Prefix{}, 9); err == nil {
		t.Errorf("addrMsg of no address = %x, want an error", m)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
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
