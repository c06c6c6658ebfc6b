package routes

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nlm encodes one netlink message as the kernel sends it.
func nlm(typ, flags uint16, seq uint32, body ...[]byte) []byte {
	var b []byte
	for _, p := range body {
		b = append(b, p...)
	}
	m := binary.NativeEndian.AppendUint32(nil, uint32(unix.NLMSG_HDRLEN+len(b)))
	m = binary.NativeEndian.AppendUint16(m, typ)
	m = binary.NativeEndian.AppendUint16(m, flags)
	m = binary.NativeEndian.AppendUint32(m, seq)
	m = binary.NativeEndian.AppendUint32(m, 4242)
	m = append(m, b...)
	for len(m)%4 != 0 {
		m = append(m, 0)
	}
	return m
}

// rtm is a struct rtmsg.
func rtm(family, dstLen, table, proto, scope, typ uint8, flags uint32) []byte {
	return binary.NativeEndian.AppendUint32([]byte{family, dstLen, 0, 0, table, proto, scope, typ}, flags)
}

func u32(typ uint16, v uint32) []byte { return attr(typ, binary.NativeEndian.AppendUint32(nil, v)) }
func ad(typ uint16, a string) []byte  { return attr(typ, netip.MustParseAddr(a).AsSlice()) }

// nexthop is a struct rtnexthop with its attributes.
func nexthop(hops uint8, link uint32, attrs ...[]byte) []byte {
	var a []byte
	for _, x := range attrs {
		a = append(a, x...)
	}
	b := binary.NativeEndian.AppendUint16(nil, uint16(unix.SizeofRtNexthop+len(a)))
	b = append(b, 0, hops)
	b = binary.NativeEndian.AppendUint32(b, link)
	return append(b, a...)
}

func cat(bs ...[]byte) []byte {
	var b []byte
	for _, x := range bs {
		b = append(b, x...)
	}
	return b
}

// show is a route as one comparable line.
func show(r Route) string {
	s := fmt.Sprintf("%d t%d p%d s%d n%d %s", r.Family, r.Table, r.Protocol, r.Scope, r.Type, r.Dst)
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	if r.Link != 0 {
		s += fmt.Sprintf(" dev %d", r.Link)
	}
	if r.Priority != 0 {
		s += fmt.Sprintf(" metric %d", r.Priority)
	}
	for _, nh := range r.MultiPath {
		s += fmt.Sprintf(" nexthop via %s dev %d weight %d", nh.Gw, nh.Link, int(nh.Hops)+1)
	}
	return s
}

// The dump's decoder on datagrams as the kernel writes them, and on
// malformed ones (an error, never a panic or a route read from outside
// its message).
func TestParseRouteDump(t *testing.T) {
	const seq = 7
	main := uint8(unix.RT_TABLE_MAIN)
	tests := []struct {
		name string
		in   []byte
		want []string
		done bool
		err  string
	}{
		{name: "IPv4 routes", in: cat(
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(unix.AF_INET, 0, main, unix.RTPROT_DHCP, 0, unix.RTN_UNICAST, 0), u32(unix.RTA_TABLE, 254), u32(unix.RTA_PRIORITY, 100), ad(unix.RTA_GATEWAY, "192.0.2.1"), u32(unix.RTA_OIF, 2)),
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(unix.AF_INET, 24, main, unix.RTPROT_KERNEL, unix.RT_SCOPE_LINK, unix.RTN_UNICAST, 0), u32(unix.RTA_TABLE, 254), ad(unix.RTA_DST, "192.0.2.0"), u32(unix.RTA_OIF, 2)),
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(unix.AF_INET, 16, 252, unix.RTPROT_BOOT, 0, unix.RTN_BLACKHOLE, 0), u32(unix.RTA_TABLE, 1000), ad(unix.RTA_DST, "198.18.0.0"))),
			want: []string{"2 t254 p16 s0 n1 0.0.0.0/0 via 192.0.2.1 dev 2 metric 100", "2 t254 p2 s253 n1 192.0.2.0/24 dev 2", "2 t1000 p3 s0 n6 198.18.0.0/16"}},
		{name: "IPv6 multipath, then the end", in: cat(
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(unix.AF_INET6, 32, main, unix.RTPROT_BOOT, 0, unix.RTN_UNICAST, 0), ad(unix.RTA_DST, "2001:db8::"),
				attr(unix.RTA_MULTIPATH, cat(nexthop(0, 2, ad(unix.RTA_GATEWAY, "fe80::1")), nexthop(4, 3, ad(unix.RTA_GATEWAY, "fe80::2"))))),
			nlm(unix.NLMSG_DONE, unix.NLM_F_MULTI, seq, make([]byte, 4))),
			want: []string{"10 t254 p3 s0 n1 2001:db8::/32 nexthop via fe80::1 dev 2 weight 1 nexthop via fe80::2 dev 3 weight 5"}, done: true},
		{name: "multicast tables as their IP family", in: cat(
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(rtnlFamilyIPMR, 32, main, 0, 0, unix.RTN_MULTICAST, 0), ad(unix.RTA_DST, "239.1.2.3"), ad(unix.RTA_SRC, "10.0.0.1")),
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(rtnlFamilyIP6MR, 128, main, 0, 0, unix.RTN_MULTICAST, 0), ad(unix.RTA_DST, "ff05::1"))),
			want: []string{"2 t254 p0 s0 n5 239.1.2.3/32", "10 t254 p0 s0 n5 ff05::1/128"}},
		{name: "left out: clones, other families, other numbers, other types", in: cat(
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(unix.AF_INET6, 128, main, 0, 0, unix.RTN_UNICAST, unix.RTM_F_CLONED), ad(unix.RTA_DST, "2001:db8::1")),
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq, rtm(unix.AF_MPLS, 20, main, 0, 0, unix.RTN_UNICAST, 0), attr(unix.RTA_DST, []byte{0, 1, 0x41, 0})),
			nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI, seq+1, rtm(unix.AF_INET, 8, main, 0, 0, unix.RTN_UNICAST, 0), ad(unix.RTA_DST, "10.0.0.0")),
			nlm(unix.RTM_NEWADDR, unix.NLM_F_MULTI, seq, rtm(unix.AF_INET, 8, main, 0, 0, unix.RTN_UNICAST, 0), ad(unix.RTA_DST, "10.0.0.0")),
			nlm(unix.NLMSG_ERROR, 0, seq, make([]byte, 20)), // an ack
			nlm(unix.NLMSG_DONE, 0, seq+1, make([]byte, 4))),
			want: nil},
		{name: "an attribute with the nested flag", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, unix.RTN_UNICAST, 0), attr(unix.RTA_DST|unix.NLA_F_NESTED, []byte{10, 0, 0, 0})),
			want: []string{"2 t254 p0 s0 n1 10.0.0.0/8"}},
		{name: "trailing bytes shorter than a header", in: cat(nlm(unix.NLMSG_DONE, 0, seq+1, make([]byte, 4)), []byte{1, 2, 3}), err: "short netlink header"},
		{name: "message longer than the datagram", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0))[:20], err: "netlink message length 28 of 20"},
		{name: "message length below a header", in: cat(binary.NativeEndian.AppendUint32(nil, 8), make([]byte, 12)), err: "netlink message length 8"},
		{name: "zero length", in: make([]byte, 32), err: "netlink message length 0"},
		{name: "short rtmsg", in: nlm(unix.RTM_NEWROUTE, 0, seq, []byte{unix.AF_INET, 8}), err: "short route message"},
		{name: "destination length past the family's", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 33, main, 0, 0, 1, 0)), err: "destination length 33"},
		{name: "IPv6 destination in an IPv4 route", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), ad(unix.RTA_DST, "2001:db8::")), err: "address of 16 bytes, want 4"},
		{name: "short gateway", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), attr(unix.RTA_GATEWAY, []byte{10, 0})), err: "address of 2 bytes"},
		{name: "short link index", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), attr(unix.RTA_OIF, []byte{1})), err: "32-bit attribute of 1"},
		{name: "short table", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), attr(unix.RTA_TABLE, nil)), err: "32-bit attribute of 0"},
		{name: "attribute past its message", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), []byte{40, 0, unix.RTA_DST, 0, 10, 0, 0, 0}), err: "attribute length 40 of 8"},
		{name: "attribute length below a header", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), []byte{2, 0, unix.RTA_DST, 0}), err: "attribute length 2"},
		{name: "short attribute", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), []byte{4, 0}), err: "short attribute"},
		{name: "next hop past its list", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), attr(unix.RTA_MULTIPATH, []byte{60, 0, 0, 0, 2, 0, 0, 0})), err: "next hop length 60 of 8"},
		{name: "next hop length zero", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), attr(unix.RTA_MULTIPATH, make([]byte, 16))), err: "next hop length 0"},
		{name: "short next hop", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), attr(unix.RTA_MULTIPATH, []byte{8, 0, 0, 0})), err: "short next hop"},
		{name: "next hop's gateway of the wrong family", in: nlm(unix.RTM_NEWROUTE, 0, seq, rtm(unix.AF_INET6, 8, main, 0, 0, 1, 0), attr(unix.RTA_MULTIPATH, nexthop(0, 2, ad(unix.RTA_GATEWAY, "10.0.0.1")))), err: "address of 4 bytes, want 16"},
		{name: "the kernel's error", in: nlm(unix.NLMSG_ERROR, 0, seq, binary.NativeEndian.AppendUint32(nil, uint32(0xffffffff-uint32(unix.ENOBUFS)+1)), make([]byte, 16)), done: true, err: "no buffer space"},
		{name: "the dump's end with an error", in: nlm(unix.NLMSG_DONE, 0, seq, binary.NativeEndian.AppendUint32(nil, uint32(0xffffffff-uint32(unix.EINVAL)+1))), done: true, err: "invalid argument"},
		{name: "short error", in: nlm(unix.NLMSG_ERROR, 0, seq, []byte{1, 2}), err: "short netlink error"},
		{name: "interrupted", in: nlm(unix.RTM_NEWROUTE, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, seq, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), ad(unix.RTA_DST, "10.0.0.0")), err: errDumpInterrupted.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, done, err := parseRouteDump(tt.in, seq, nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one saying %q (routes %v)", err, tt.err, rs)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if done != tt.done {
				t.Errorf("done %v, want %v", done, tt.done)
			}
			if tt.err != "" {
				return
			}
			var got []string
			for _, r := range rs {
				got = append(got, show(r))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("routes\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// Hostile datagrams: the decoder returns (an error or routes, each with a
// valid destination) and never panics; it cannot loop, as every step
// moves on by at least a header.
func FuzzParseRouteDump(f *testing.F) {
	main := uint8(unix.RT_TABLE_MAIN)
	f.Add(nlm(unix.RTM_NEWROUTE, 0, 1, rtm(unix.AF_INET, 8, main, 0, 0, 1, 0), ad(unix.RTA_DST, "10.0.0.0"), u32(unix.RTA_OIF, 2)))
	f.Add(nlm(unix.RTM_NEWROUTE, 0, 1, rtm(unix.AF_INET6, 32, main, 0, 0, 1, 0), ad(unix.RTA_DST, "2001:db8::"),
		attr(unix.RTA_MULTIPATH, cat(nexthop(0, 2, ad(unix.RTA_GATEWAY, "fe80::1")), nexthop(1, 3)))))
	f.Add(cat(nlm(unix.NLMSG_ERROR, 0, 1, make([]byte, 20)), nlm(unix.NLMSG_DONE, 0, 1, make([]byte, 4))))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, _, err := parseRouteDump(b, 1, nil)
		if err != nil {
			return
		}
		for _, r := range rs {
			if !r.Dst.IsValid() || (r.Family == unix.AF_INET) != r.Dst.Addr().Is4() {
				t.Fatalf("route %+v from %x", r, b)
			}
			if r.Gw.IsValid() && r.Gw.Is4() != r.Dst.Addr().Is4() {
				t.Fatalf("route %+v from %x", r, b)
			}
		}
	})
}

// dumpPeers serves canned dumps to dumpRoutes: each socket it opens is
// one end of a datagram socket pair whose other end (kept in peers)
// holds the next dump's datagrams, and then the request.
type dumpPeers struct {
	t     *testing.T
	dumps [][][]byte
	peers []int
}

func (d *dumpPeers) opener() (int, error) {
	if len(d.peers) >= len(d.dumps) {
		d.t.Errorf("socket %d opened; %d dumps served", len(d.peers)+1, len(d.dumps))
		return -1, unix.EMFILE
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	d.t.Cleanup(func() { unix.Close(fds[1]) })
	for _, dg := range d.dumps[len(d.peers)] {
		if _, err := unix.Write(fds[1], dg); err != nil {
			return -1, err
		}
	}
	d.peers = append(d.peers, fds[1])
	return fds[0], nil
}

// dumpRoutes starts the dump over on a fresh socket after a dump the
// kernel marked interrupted or a datagram longer than its buffer (with
// a buffer that fits it), and gives up after four tries; a refusal by
// the kernel is not retried. Each request asks for every route of every
// family and table.
func TestDumpRoutesRetries(t *testing.T) {
	main := uint8(unix.RT_TABLE_MAIN)
	route := func(flags uint16, dst string) []byte {
		return nlm(unix.RTM_NEWROUTE, flags|unix.NLM_F_MULTI, 1, rtm(unix.AF_INET, 24, main, 0, 0, unix.RTN_UNICAST, 0), ad(unix.RTA_DST, dst))
	}
	done := nlm(unix.NLMSG_DONE, unix.NLM_F_MULTI, 1, make([]byte, 4))
	intr := [][]byte{route(0, "198.51.100.0"), route(unix.NLM_F_DUMP_INTR, "203.0.113.0"), done}
	good := [][]byte{cat(route(0, "198.51.100.0"), route(0, "192.0.2.0")), done}
	long := [][]byte{cat(route(0, "198.51.100.0"), route(0, "192.0.2.0"), make([]byte, 200)), done}
	refused := [][]byte{nlm(unix.NLMSG_ERROR, 0, 1, binary.NativeEndian.AppendUint32(nil, uint32(0xffffffff-uint32(unix.EPERM)+1)), make([]byte, 16))}
	tests := []struct {
		name  string
		dumps [][][]byte
		buf   int
		want  string
		err   string
	}{
		{"at once", [][][]byte{good}, 128, "198.51.100.0/24 192.0.2.0/24", ""},
		{"interrupted once", [][][]byte{intr, good}, 128, "198.51.100.0/24 192.0.2.0/24", ""},
		{"a datagram past the buffer", [][][]byte{long, good}, 32, "198.51.100.0/24 192.0.2.0/24", ""},
		{"interrupted four times", [][][]byte{intr, intr, intr, intr}, 64, "", "interrupted"},
		{"refused", [][][]byte{refused}, 64, "", "operation not permitted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &dumpPeers{t: t, dumps: tt.dumps}
			rs, err := dumpRoutes(d.opener, tt.buf)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, r.Dst.String())
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("routes %v, want %s", got, tt.want)
			}
			if len(d.peers) != len(tt.dumps) {
				t.Errorf("%d sockets opened, want %d", len(d.peers), len(tt.dumps))
			}
			for _, fd := range d.peers {
				// The dump's datagrams were read (or the socket
				// closed); the request is what is left.
				req := make([]byte, 256)
				n, err := unix.Read(fd, req)
				if err != nil {
					t.Fatalf("the request: %v", err)
				}
				if body := hdr(t, req[:n], unix.RTM_GETROUTE, unix.NLM_F_DUMP, 1); string(body) != string(make([]byte, unix.SizeofRtMsg)) {
					t.Errorf("request body %x, want an all-zero rtmsg", body)
				}
			}
		})
	}
}
