package userstack

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// tunPeer is the far side of a TUN endpoint under test: a SEQPACKET
// socket pair keeps packet boundaries as a TUN device does, so the
// endpoint's own reads and writes run without privileges.
type tunPeer struct {
	fd   int
	vnet int
}

func newTUNPair(t *testing.T, vnet int) (*TUN, *tunPeer) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	// Room for super-packets both ways.
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	tv := unix.NsecToTimeval(int64(20 * time.Second)) // failsafe against a hung test
	if err := unix.SetsockoptTimeval(fds[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	return newTUNOn(fds[0], vnet, nil), &tunPeer{fd: fds[1], vnet: vnet}
}

// newTUNOn is NewTUN on descriptor fd, which it then closes: the endpoint
// holds the only descriptor left, as a device the jail hands it does once
// the engine closes its copy.
func newTUNOn(fd, vnet int, onError func(error)) *TUN {
	f := os.NewFile(uintptr(fd), "tun-test")
	defer f.Close()
	return NewTUN(f, 65520, vnet, onError)
}

// newTUNStack runs a stack with the default policy on a TUN endpoint over
// a socket pair, closed with the test.
func newTUNStack(t *testing.T, vnet int) (*tunPeer, *fakeDialer) {
	t.Helper()
	tun, peer := newTUNPair(t, vnet)
	dialer := newFakeDialer()
	st, err := New(tun, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: dialer, NoJanitor: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return peer, dialer
}

func (p *tunPeer) send(t *testing.T, b []byte) {
	t.Helper()
	if _, err := unix.Write(p.fd, append(make([]byte, p.vnet), b...)); err != nil {
		t.Fatal(err)
	}
}

// recvTCP returns the next TCP segment the endpoint writes, skipping bare
// ACKs when skipBare is set.
func (p *tunPeer) recvTCP(t *testing.T, skipBare bool) header.TCP {
	t.Helper()
	buf := make([]byte, 1<<17)
	for {
		n, err := unix.Read(p.fd, buf)
		if err != nil {
			t.Fatalf("read from the endpoint: %v", err)
		}
		pkt := buf[p.vnet:n]
		o := parseOut(t, pkt)
		if p.vnet > 0 && buf[0]&vnetNeedsCsum != 0 {
			// Complete the checksum as the kernel does: the field holds
			// the pseudo-header sum; fold in everything from csum_start.
			start, off := int(binary.LittleEndian.Uint16(buf[6:])), int(binary.LittleEndian.Uint16(buf[8:]))
			binary.BigEndian.PutUint16(pkt[start+off:], ^checksum.Checksum(pkt[start:], 0))
		}
		checkTCPSum(t, o)
		tcp := o.tcp()
		if skipBare && tcp.Flags() == header.TCPFlagAck && len(tcp.Payload()) == 0 {
			continue
		}
		return append(header.TCP(nil), tcp...)
	}
}

// A TCP flow through the TUN endpoint: segments of every size class the
// reader splits differently (headers only, a small body copied, a large
// body handed over whole) reach the upstream intact, and the response
// comes back. With and without the virtio-net header.
func TestTUNEndpointCarriesTCP(t *testing.T) {
	for _, vnet := range []int{0, 10} {
		t.Run(map[int]string{0: "plain", 10: "vnet"}[vnet], func(t *testing.T) {
			peer, dialer := newTUNStack(t, vnet)
			src, dst := netip.AddrPortFrom(jail4, 40100), netip.MustParseAddrPort("203.0.113.1:80")
			_, syn := tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes()
			peer.send(t, syn)
			up := dialer.next(t)
			synAck := peer.recvTCP(t, false)
			if synAck.Flags() != header.TCPFlagSyn|header.TCPFlagAck || synAck.AckNumber() != 1001 {
				t.Fatalf("want SYN-ACK for 1001, got flags %v ack %d", synAck.Flags(), synAck.AckNumber())
			}
			ours := synAck.SequenceNumber() + 1
			seq := uint32(1001)
			_, ack := tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: seq, ack: ours}.bytes()
			peer.send(t, ack)

			var want []byte
			for i, size := range []int{1, 60, 3000, 40000} { // 40000: past rxCopyBelow
				payload := bytes.Repeat([]byte{byte('a' + i)}, size)
				_, seg := tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: seq, ack: ours, payload: payload}.bytes()
				peer.send(t, seg)
				seq += uint32(size)
				want = append(want, payload...)
			}
			got := make([]byte, len(want))
			_ = up.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
			if _, err := io.ReadFull(up.peer, got); err != nil {
				t.Fatalf("upstream read: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("upstream received different bytes than the sandbox sent")
			}

			go up.peer.Write([]byte("pong"))
			resp := peer.recvTCP(t, true)
			if string(resp.Payload()) != "pong" || resp.AckNumber() != seq {
				t.Fatalf("response %q ack %d, want %q ack %d", resp.Payload(), resp.AckNumber(), "pong", seq)
			}
		})
	}
}

// A UDP flow through the TUN endpoint, IPv4 and IPv6: the datagram reaches
// the upstream socket, and the reply the stack frames itself comes back
// from the address the sandbox wrote to, with valid checksums.
func TestTUNEndpointCarriesUDP(t *testing.T) {
	peer, dialer := newTUNStack(t, 10)
	buf := make([]byte, 1<<17)
	for _, c := range []struct{ src, dst netip.AddrPort }{
		{netip.AddrPortFrom(jail4, 40200), netip.MustParseAddrPort("203.0.113.1:5064")},
		{netip.AddrPortFrom(jail6, 40200), netip.MustParseAddrPort("[2001:db8::1]:5064")},
	} {
		_, b := udpBytes(c.src, c.dst, []byte("search"))
		peer.send(t, b)
		up := dialer.next(t)
		if up.network != "udp" || up.address != c.dst.String() {
			t.Fatalf("dialed %s %s, want udp %s", up.network, up.address, c.dst)
		}
		got := make([]byte, 64)
		n, err := up.peer.Read(got)
		if err != nil || string(got[:n]) != "search" {
			t.Fatalf("upstream got %q, %v", got[:n], err)
		}
		reply := bytes.Repeat([]byte("r"), 3000)
		if _, err := up.peer.Write(reply); err != nil {
			t.Fatal(err)
		}
		n, err = unix.Read(peer.fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		o := parseOut(t, buf[peer.vnet:n]) // checks the IPv4 header checksum
		src, dst, u := o.src, o.dst, o.udp()
		if src != c.dst.Addr() || u.SourcePort() != c.dst.Port() || dst != c.src.Addr() || u.DestinationPort() != c.src.Port() {
			t.Fatalf("reply %v:%d -> %v:%d, want %v -> %v", src, u.SourcePort(), dst, u.DestinationPort(), c.dst, c.src)
		}
		if !bytes.Equal(u.Payload(), reply) {
			t.Fatalf("reply payload of %d bytes differs", len(u.Payload()))
		}
		xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, tcpAddr(src), tcpAddr(dst), u.Length())
		if !u.IsChecksumValid(tcpAddr(src), tcpAddr(dst), checksum.Checksum(u.Payload(), 0)) {
			t.Errorf("UDP checksum invalid (pseudo-header sum %#x)", xsum)
		}
		// The flow's next datagram takes the fast path (a known flow),
		// split across the reader's head and body: it arrives whole, and
		// nothing is dialed again.
		big := bytes.Repeat([]byte("s"), 3000)
		_, b = udpBytes(c.src, c.dst, big)
		peer.send(t, b)
		got = make([]byte, 4000)
		if n, err = up.peer.Read(got); err != nil || !bytes.Equal(got[:n], big) {
			t.Fatalf("upstream got %d bytes, %v; want the 3000-byte datagram", n, err)
		}
		dialer.none(t)
	}
}

// A reply whose UDP checksum sums to zero is sent with 0xffff: zero means
// "no checksum", which IPv6 forbids (the sandbox's kernel would drop it).
func TestUDPReplyChecksumNeverZero(t *testing.T) {
	peer, dialer := newTUNStack(t, 0)
	src, dst := netip.AddrPortFrom(jail6, 40300), netip.MustParseAddrPort("[2001:db8::1]:5064")
	// Find a 2-byte payload whose checksum field would come out as 0.
	var payload []byte
	for v := 0; v < 1<<16 && payload == nil; v++ {
		p := []byte{byte(v >> 8), byte(v)}
		u := header.UDP(make([]byte, header.UDPMinimumSize))
		u.Encode(&header.UDPFields{SrcPort: dst.Port(), DstPort: src.Port(), Length: header.UDPMinimumSize + 2})
		xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, tcpAddr(dst.Addr()), tcpAddr(src.Addr()), header.UDPMinimumSize+2)
		if ^u.CalculateChecksum(checksum.Checksum(p, xsum)) == 0 {
			payload = p
		}
	}
	if payload == nil {
		t.Fatal("no payload sums to zero")
	}
	_, b := udpBytes(src, dst, []byte("q"))
	peer.send(t, b)
	up := dialer.next(t)
	if _, err := up.peer.Read(make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := up.peer.Write(payload); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := unix.Read(peer.fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	u := header.UDP(header.IPv6(buf[:n]).Payload())
	if u.Checksum() != 0xffff {
		t.Errorf("checksum field %#x, want 0xffff", u.Checksum())
	}
	if !bytes.Equal(u.Payload(), payload) {
		t.Errorf("payload %x, want %x", u.Payload(), payload)
	}
}

// The TUN's fast path takes ordinary segments only; everything else is
// left to gVisor's IP layer (and still reaches the relay from there, or
// is dropped there).
func TestFastTCPClassifies(t *testing.T) {
	seg := func(src, dst string, payload int) []byte {
		_, b := tcpSeg{src: netip.MustParseAddrPort(src), dst: netip.MustParseAddrPort(dst), flags: header.TCPFlagAck, seq: 1, payload: make([]byte, payload)}.bytes()
		return b
	}
	v4 := func(payload int) []byte { return seg("10.255.255.2:40000", "203.0.113.1:443", payload) }
	v6 := func() []byte { return seg("[fd7a:5a4e::2]:40000", "[2001:db8::1]:443", 10) }
	fix4 := func(b []byte) []byte {
		ip := header.IPv4(b)
		ip.SetChecksum(0)
		ip.SetChecksum(^ip.CalculateChecksum())
		return b
	}
	tests := []struct {
		name string
		pkt  []byte
		n    int // bytes "read"; 0: len(pkt)
		want bool
	}{
		{"v4", v4(10), 0, true},
		{"v4 payload past the head", v4(3000), 0, true},
		{"v6", v6(), 0, true},
		{"v4 more fragments", fix4(func() []byte { b := v4(10); b[6] |= 0x20; return b }()), 0, false},
		{"v4 fragment offset", fix4(func() []byte { b := v4(10); b[7] = 1; return b }()), 0, false},
		{"v6 extension header", func() []byte { b := v6(); b[6] = 0; return b }(), 0, false},
		{"v4 loopback destination", seg("10.255.255.2:40000", "127.0.0.1:22", 0), 0, false},
		{"v4 loopback source", seg("127.0.0.1:40000", "203.0.113.1:443", 0), 0, false},
		{"v4 link-local", seg("10.255.255.2:40000", "169.254.169.254:80", 0), 0, false},
		{"v4 multicast", seg("10.255.255.2:40000", "224.0.0.1:80", 0), 0, false},
		{"v4 broadcast", seg("10.255.255.2:40000", "255.255.255.255:80", 0), 0, false},
		{"v6 loopback", seg("[fd7a:5a4e::2]:40000", "[::1]:22", 0), 0, false},
		{"v6 mapped", seg("[fd7a:5a4e::2]:40000", "[::ffff:203.0.113.1]:22", 0), 0, false},
		{"v6 link-local", seg("[fd7a:5a4e::2]:40000", "[fe80::1]:22", 0), 0, false},
		{"truncated", v4(100), 80, false},
		{"short data offset", func() []byte { b := v4(10); b[header.IPv4MinimumSize+12] = 4 << 4; return b }(), 0, false},
		{"not TCP", func() []byte {
			_, b := udpBytes(netip.MustParseAddrPort("10.255.255.2:1"), netip.MustParseAddrPort("203.0.113.1:53"), nil)
			return b
		}(), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.n
			if n == 0 {
				n = len(tt.pkt)
			}
			head := tt.pkt[:min(n, rxHeadLen)]
			var body []byte
			if n > rxHeadLen {
				body = tt.pkt[rxHeadLen:]
			}
			var in tcpIn
			if got := fastTCP(&in, head, body, n); got != tt.want {
				t.Fatalf("fast path took it: %v, want %v", got, tt.want)
			}
			if !tt.want {
				return
			}
			var payload []byte
			for _, d := range in.data {
				payload = append(payload, d...)
			}
			if len(payload) != in.n || in.n != len(header.TCP(tt.pkt[len(tt.pkt)-in.n-header.TCPMinimumSize:]).Payload()) {
				t.Fatalf("payload %d bytes (n %d)", len(payload), in.n)
			}
			if in.key.src.Port() != 40000 || in.key.dst.Port() != 443 || in.h.SequenceNumber() != 1 {
				t.Fatalf("parsed %v -> %v seq %d", in.key.src, in.key.dst, in.h.SequenceNumber())
			}
		})
	}
}

// The fast path's UDP parse: the flow, and a payload split across the
// reader's head and body; a fragment or a bad length is left to gVisor.
func TestFastUDPParses(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.255.255.2:40000"), netip.MustParseAddrPort("203.0.113.1:53")
	payload := pattern(3000)
	_, b := udpBytes(src, dst, payload)
	key, data, ok := fastUDP(nil, b[:rxHeadLen], b[rxHeadLen:], len(b))
	if !ok || key.src != src || key.dst != dst {
		t.Fatalf("parsed %v, %v -> %v", ok, key.src, key.dst)
	}
	var got []byte
	for _, d := range data {
		got = append(got, d...)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("payload of %d bytes differs", len(got))
	}
	frag := append([]byte(nil), b...)
	frag[6] |= 0x20 // more fragments
	if _, _, ok := fastUDP(nil, frag[:rxHeadLen], frag[rxHeadLen:], len(frag)); ok {
		t.Error("fast path took a fragment")
	}
	bad := append([]byte(nil), b...)
	binary.BigEndian.PutUint16(bad[header.IPv4MinimumSize+4:], 9) // UDP length
	if _, _, ok := fastUDP(nil, bad[:rxHeadLen], bad[rxHeadLen:], len(bad)); ok {
		t.Error("fast path took a datagram whose UDP length disagrees with the IP length")
	}
}

// The fast path parses what the sandbox sends: no packet, however
// malformed or truncated, may make it panic or hand on more bytes than
// the packet holds. (go test -fuzz FuzzFastPath ./userstack/)
func FuzzFastPath(f *testing.F) {
	_, tcp4 := tcpSeg{src: netip.MustParseAddrPort("10.255.255.2:40000"), dst: netip.MustParseAddrPort("203.0.113.1:443"), flags: header.TCPFlagAck, seq: 1, payload: pattern(300)}.bytes()
	_, tcp6 := tcpSeg{src: netip.MustParseAddrPort("[fd7a:5a4e::2]:40000"), dst: netip.MustParseAddrPort("[2001:db8::1]:443"), flags: header.TCPFlagSyn, seq: 1}.bytes()
	_, udp4 := udpBytes(netip.MustParseAddrPort("10.255.255.2:1"), netip.MustParseAddrPort("203.0.113.1:53"), pattern(200))
	for _, p := range [][]byte{tcp4, tcp6, udp4, {0x45}, {0x60, 0, 0, 0, 0xff, 0xff, 6, 64}} {
		f.Add(p, uint16(len(p)))
	}
	f.Fuzz(func(t *testing.T, pkt []byte, read uint16) {
		n := min(int(read), len(pkt))
		if n == 0 {
			return
		}
		head := pkt[:min(n, rxHeadLen)]
		body := make([]byte, rxBodyCap)
		if n > rxHeadLen {
			copy(body, pkt[rxHeadLen:n])
		}
		var in tcpIn
		if fastTCP(&in, head, body, n) {
			got := 0
			for _, d := range in.data {
				got += len(d)
			}
			if got != in.n || in.n > n || len(in.h) < header.TCPMinimumSize {
				t.Fatalf("tcp: %d payload bytes in slices, n %d, header %d, packet %d", got, in.n, len(in.h), n)
			}
		}
		if _, data, ok := fastUDP(nil, head, body, n); ok {
			got := 0
			for _, d := range data {
				got += len(d)
			}
			if got > n {
				t.Fatalf("udp: %d payload bytes from a %d-byte packet", got, n)
			}
		}
	})
}

// Through the TUN, what the policy blocks is refused: a SYN to a private
// address (taken by the fast path) gets a RST, a datagram of a new flow
// (left to gVisor's path) an ICMP unreachable; nothing is dialed, and both
// are recorded.
func TestTUNFastPathBlocks(t *testing.T) {
	tun, peer := newTUNPair(t, 10)
	dialer := newFakeDialer()
	var bl blocks
	st, err := New(tun, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: dialer, NoJanitor: true, OnBlock: bl.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	bl.flush = st.flushBlocks
	src, dst := netip.AddrPortFrom(jail4, 40300), netip.MustParseAddrPort("10.1.2.3:22")
	_, syn := tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes()
	peer.send(t, syn)
	if r := peer.recvTCP(t, false); !r.Flags().Contains(header.TCPFlagRst) || r.AckNumber() != 1001 {
		t.Fatalf("got %v ack %d, want a RST acking 1001", r.Flags(), r.AckNumber())
	}
	_, dgram := udpBytes(src, netip.MustParseAddrPort("10.1.2.3:5064"), []byte("search"))
	peer.send(t, dgram)
	buf := make([]byte, 2048)
	n, err := unix.Read(peer.fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	if o := parseOut(t, buf[peer.vnet:n]); o.proto != header.ICMPv4ProtocolNumber || header.ICMPv4(o.transport).Type() != header.ICMPv4DstUnreachable {
		t.Fatalf("got protocol %d, want ICMP destination unreachable", o.proto)
	}
	dialer.none(t)
	if got := bl.list(); len(got) != 2 {
		t.Fatalf("blocks %+v, want the TCP and the UDP attempt", got)
	}
}
