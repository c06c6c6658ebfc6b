package userstack

import (
	"bytes"
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
	return NewTUN(os.NewFile(uintptr(fds[0]), "tun-test"), 65520, vnet, nil), &tunPeer{fd: fds[1], vnet: vnet}
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
		tcp := parseOut(t, buf[p.vnet:n]).tcp()
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
