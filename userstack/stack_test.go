package userstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// dial is one call to the fake dialer; peer is the "remote" end of the
// returned in-memory connection.
type dial struct {
	network, address string
	peer             net.Conn
}

// fakeDialer hands out Unix socket pairs (they have descriptors, as the
// Dialer's contract asks) and reports every call. It never touches a
// network socket.
type fakeDialer struct {
	calls chan dial
	fail  error
}

func newFakeDialer() *fakeDialer { return &fakeDialer{calls: make(chan dial, 16)} }

func (d *fakeDialer) DialContext(_ context.Context, network, address string) (net.Conn, error) {
	if d.fail != nil {
		d.calls <- dial{network: network, address: address}
		return nil, d.fail
	}
	// UDP: datagrams, as a connected UDP socket has; a SEQPACKET pair
	// also tells the peer when the stack closes its end. TCP: a stream.
	typ := unix.SOCK_STREAM
	if network == "udp" {
		typ = unix.SOCK_SEQPACKET
	}
	a, b, err := socketPair(typ)
	if err != nil {
		return nil, err
	}
	d.calls <- dial{network: network, address: address, peer: b}
	return a, nil
}

// socketPair returns the two ends of a Unix socket pair of type typ as
// conns with descriptors.
func socketPair(typ int) (net.Conn, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "udp-test")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

func (d *fakeDialer) next(t *testing.T) dial {
	t.Helper()
	select {
	case c := <-d.calls:
		return c
	case <-time.After(20 * time.Second): // failsafe, not a timing assertion
		t.Fatal("dialer not called")
	}
	return dial{}
}

func (d *fakeDialer) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-d.calls:
		t.Fatalf("unexpected dial %s %s", c.network, c.address)
	default:
	}
}

// blocks collects Block records.
type blocks struct {
	mu sync.Mutex
	b  []netpolicy.Block
	// flush, when set, is the stack's flushBlocks: list waits for the
	// records already queued (OnBlock runs off the event loop).
	flush func()
}

func (b *blocks) add(x netpolicy.Block) { b.mu.Lock(); b.b = append(b.b, x); b.mu.Unlock() }
func (b *blocks) list() []netpolicy.Block {
	if b.flush != nil {
		b.flush()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]netpolicy.Block(nil), b.b...)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	jail4    = netip.MustParseAddr("10.255.255.2")
	jail6    = netip.MustParseAddr("fd7a:5a4e::2")
	gateway4 = netip.MustParseAddr("10.255.255.1")
	dns4     = netip.MustParseAddr("192.0.2.53")
	upstream = netip.MustParseAddrPort("127.0.0.53:53")
)

type harness struct {
	ep     *channel.Endpoint
	st     *Stack
	dialer *fakeDialer
	blocks *blocks
	clock  *fakeClock
	base   int // goroutines after the stack started
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{
		dialer: newFakeDialer(),
		blocks: &blocks{},
		clock:  &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	return h.start(t, Config{
		Policy: netpolicy.MustNew(netpolicy.Config{
			Allow: []netip.Prefix{netip.MustParsePrefix("192.168.1.50/32")},
		}),
		Dialer:         h.dialer,
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
	})
}

// start runs a stack with cfg (its blocks recorded in h, its log in t's,
// no janitor) on a new channel endpoint, both closed with the test.
func (h *harness) start(t *testing.T, cfg Config) *harness {
	t.Helper()
	h.ep = channel.New(64, 65520, "")
	cfg.OnBlock, cfg.Logf, cfg.NoJanitor = h.blocks.add, t.Logf, true
	st, err := New(h.ep, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	h.blocks.flush = st.flushBlocks
	t.Cleanup(func() {
		st.Close()
		h.ep.Close()
	})
	h.base = runtime.NumGoroutine()
	return h
}

// settle polls, boundedly, until the goroutine count is back to at most
// the baseline and the event loop watches no descriptor beyond the live
// flows': no goroutine or socket outlived its flow. Workers parked idle in
// the stack's pool belong to no flow and are not counted.
func (h *harness) settle(t *testing.T) {
	t.Helper()
	regs, live := 0, 0
	for range 2000 {
		idle := 0
		if h.st != nil {
			idle = h.st.work.Idle()
			regs = h.st.poll.registered()
			h.st.mu.Lock()
			live = len(h.st.tcp) + len(h.st.flows)
			h.st.mu.Unlock()
		}
		if runtime.NumGoroutine()-idle <= h.base && regs <= live {
			return
		}
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond)
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("goroutines: %d, want <= %d; descriptors watched: %d for %d live flows\n%s",
		runtime.NumGoroutine(), h.base, regs, live, buf[:runtime.Stack(buf, true)])
}

func (h *harness) send(proto tcpip.NetworkProtocolNumber, b []byte) { inject(h.ep, proto, b) }

func TestBlockedSYNGetsRST(t *testing.T) {
	tests := []struct {
		name string
		src  netip.AddrPort
		dst  netip.AddrPort
		rule string
	}{
		{"private v4", netip.AddrPortFrom(jail4, 40000), netip.MustParseAddrPort("10.1.2.3:22"), "private range 10.0.0.0/8"},
		{"metadata", netip.AddrPortFrom(jail4, 40001), netip.MustParseAddrPort("169.254.169.254:80"), "link-local/metadata 169.254.0.0/16"},
		{"gateway non-dns port", netip.AddrPortFrom(jail4, 40002), netip.AddrPortFrom(gateway4, 22), "local address, not a DNS port"},
		{"virtual dns non-dns port", netip.AddrPortFrom(jail4, 40003), netip.AddrPortFrom(dns4, 80), "local address, not a DNS port"},
		{"unique-local v6", netip.AddrPortFrom(jail6, 40004), netip.MustParseAddrPort("[fd00::1]:22"), "unique-local fc00::/7"},
		{"nat64 private", netip.AddrPortFrom(jail6, 40005), netip.MustParseAddrPort("[64:ff9b::10.1.2.3]:22"), "nat64 private range 10.0.0.0/8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.send(tcpSeg{src: tt.src, dst: tt.dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
			o := readOut(t, h.ep)
			if o.proto != header.TCPProtocolNumber || o.src != tt.dst.Addr() || o.dst != tt.src.Addr() {
				t.Fatalf("reply %v -> %v proto %d", o.src, o.dst, o.proto)
			}
			if f := o.tcp().Flags(); !f.Contains(header.TCPFlagRst) || o.tcp().SourcePort() != tt.dst.Port() || o.tcp().AckNumber() != 1001 {
				t.Fatalf("reply flags %v port %d ack %d, want RST from %d acking 1001", f, o.tcp().SourcePort(), o.tcp().AckNumber(), tt.dst.Port())
			}
			h.dialer.none(t)
			bl := h.blocks.list()
			if len(bl) != 1 || bl[0].Proto != netpolicy.ProtoTCP || bl[0].Dst != tt.dst || bl[0].Rule != tt.rule || bl[0].Time != h.clock.now() {
				t.Fatalf("blocks = %+v, want one tcp %v (%s)", bl, tt.dst, tt.rule)
			}
		})
	}
}

// Host loopback is never reachable: gVisor drops loopback-addressed packets
// from a non-loopback link before any handler (and the policy blocks them
// anyway). Processing of an injected packet is synchronous, so "nothing
// queued" right after the injection is deterministic.
func TestLoopbackNeverReachable(t *testing.T) {
	h := newHarness(t)
	for _, dst := range []string{"127.0.0.1:8080", "127.0.0.53:53", "[::1]:22", "[::ffff:127.0.0.1]:22"} {
		d := netip.MustParseAddrPort(dst)
		src := netip.AddrPortFrom(jail4, 41000)
		if d.Addr().Is6() {
			src = netip.AddrPortFrom(jail6, 41000)
		}
		h.send(tcpSeg{src: src, dst: d, flags: header.TCPFlagSyn, seq: 1}.bytes())
		h.send(udpBytes(src, d, []byte("x")))
		h.dialer.none(t)
		// Either dropped silently or refused; never forwarded.
		for h.ep.NumQueued() > 0 {
			o := readOut(t, h.ep)
			if o.proto == header.TCPProtocolNumber && !o.tcp().Flags().Contains(header.TCPFlagRst) {
				t.Fatalf("%s: non-RST TCP reply %v", dst, o.tcp().Flags())
			}
		}
	}
	for _, b := range h.blocks.list() {
		if b.Dst.Addr().Unmap().IsLoopback() && !strings.Contains(b.Rule, "loopback") {
			t.Errorf("loopback block with rule %q", b.Rule)
		}
	}
}

func TestAllowedTCPIsDialedAndSpliced(t *testing.T) {
	h := newHarness(t)
	src := netip.AddrPortFrom(jail4, 42000)
	for _, tt := range []struct {
		dst  netip.AddrPort
		want string
	}{
		{netip.MustParseAddrPort("203.0.113.7:443"), "203.0.113.7:443"},
		{netip.MustParseAddrPort("192.168.1.50:5064"), "192.168.1.50:5064"}, // allow-ip
		{netip.AddrPortFrom(dns4, 53), upstream.String()},                   // DNS over TCP relayed
		{netip.AddrPortFrom(gateway4, 53), upstream.String()},
	} {
		t.Run(tt.dst.String(), func(t *testing.T) {
			h.base = runtime.NumGoroutine() // this subtest's goroutine included
			h.send(tcpSeg{src: src, dst: tt.dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
			d := h.dialer.next(t)
			if d.network != "tcp" || d.address != tt.want {
				t.Fatalf("dialed %s %s, want tcp %s", d.network, d.address, tt.want)
			}
			synack := readOut(t, h.ep)
			if f := synack.tcp().Flags(); f != header.TCPFlagSyn|header.TCPFlagAck || synack.src != tt.dst.Addr() || synack.tcp().AckNumber() != 1001 {
				t.Fatalf("got %v from %v ack %d, want SYN|ACK from %v", f, synack.src, synack.tcp().AckNumber(), tt.dst.Addr())
			}
			iss := synack.tcp().SequenceNumber()
			// Data from the sandbox reaches the upstream.
			h.send(tcpSeg{src: src, dst: tt.dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: []byte("hello")}.bytes())
			buf := make([]byte, 64)
			n, err := io.ReadAtLeast(d.peer, buf, 5)
			if err != nil || string(buf[:n]) != "hello" {
				t.Fatalf("upstream read %q, %v", buf[:n], err)
			}
			// Data from the upstream reaches the sandbox.
			go d.peer.Write([]byte("world"))
			for {
				o := readOut(t, h.ep)
				if p := o.tcpPayload(); len(p) > 0 {
					if string(p) != "world" || o.src != tt.dst.Addr() {
						t.Fatalf("sandbox got %q from %v", p, o.src)
					}
					break
				}
			}
			// A reset from the sandbox tears the flow down: the upstream
			// sees its connection closed and no goroutine is left.
			h.send(tcpSeg{src: src, dst: tt.dst, flags: header.TCPFlagRst, seq: 1006}.bytes())
			if _, err := io.ReadAll(d.peer); err != nil && !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("upstream after reset: %v", err)
			}
			d.peer.Close()
			h.ep.Drain()
			h.settle(t)
			if len(h.blocks.list()) != 0 {
				t.Fatalf("blocks: %v", h.blocks.list())
			}
		})
	}
}

// The upstream closing its side is passed on as a FIN (half-close), not a
// reset.
func TestTCPHalfClose(t *testing.T) {
	h := newHarness(t)
	src := netip.AddrPortFrom(jail4, 42100)
	dst := netip.MustParseAddrPort("198.51.100.10:80")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	d := h.dialer.next(t)
	synack := readOut(t, h.ep)
	iss := synack.tcp().SequenceNumber()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: iss + 1}.bytes())
	d.peer.Close() // upstream EOF
	for {
		o := readOut(t, h.ep)
		f := o.tcp().Flags()
		if f.Contains(header.TCPFlagRst) {
			t.Fatalf("upstream EOF sent a RST")
		}
		if f.Contains(header.TCPFlagFin) {
			break
		}
	}
	// The sandbox finishes too; everything is released.
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagFin, seq: 1001, ack: iss + 2}.bytes())
	h.settle(t)
}

func TestDialFailureGivesRST(t *testing.T) {
	h := newHarness(t)
	h.dialer.fail = fmt.Errorf("connection refused")
	src := netip.AddrPortFrom(jail4, 42200)
	dst := netip.MustParseAddrPort("203.0.113.9:443")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 5}.bytes())
	h.dialer.next(t)
	o := readOut(t, h.ep)
	if !o.tcp().Flags().Contains(header.TCPFlagRst) {
		t.Fatalf("got %v, want RST", o.tcp().Flags())
	}
	h.settle(t)
}

func TestUDPBlockedGetsPortUnreachable(t *testing.T) {
	tests := []struct {
		name string
		src  netip.AddrPort
		dst  netip.AddrPort
		rule string
	}{
		{"private v4", netip.AddrPortFrom(jail4, 43000), netip.MustParseAddrPort("192.168.1.9:5064"), "private range 192.168.0.0/16"},
		{"gateway non-dns port", netip.AddrPortFrom(jail4, 43001), netip.AddrPortFrom(gateway4, 123), "local address, not a DNS port"},
		{"link-local v6", netip.AddrPortFrom(jail6, 43002), netip.MustParseAddrPort("[fe80::1]:5353"), "link-local fe80::/10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.send(udpBytes(tt.src, tt.dst, []byte("probe")))
			h.dialer.none(t)
			bl := h.blocks.list()
			if len(bl) != 1 || bl[0].Proto != netpolicy.ProtoUDP || bl[0].Dst != tt.dst || bl[0].Rule != tt.rule {
				t.Fatalf("blocks = %+v", bl)
			}
			if h.ep.NumQueued() == 0 {
				t.Fatal("no ICMP unreachable")
			}
			o := readOut(t, h.ep)
			switch o.proto {
			case header.ICMPv4ProtocolNumber:
				ic := header.ICMPv4(o.transport)
				if ic.Type() != header.ICMPv4DstUnreachable || ic.Code() != header.ICMPv4PortUnreachable {
					t.Fatalf("ICMP type %d code %d", ic.Type(), ic.Code())
				}
			case header.ICMPv6ProtocolNumber:
				ic := header.ICMPv6(o.transport)
				if ic.Type() != header.ICMPv6DstUnreachable || ic.Code() != header.ICMPv6PortUnreachable {
					t.Fatalf("ICMPv6 type %d code %d", ic.Type(), ic.Code())
				}
			default:
				t.Fatalf("reply proto %d", o.proto)
			}
			if o.dst != tt.src.Addr() {
				t.Fatalf("ICMP sent to %v", o.dst)
			}
		})
	}
}

func TestUDPNATFlowAndExpiry(t *testing.T) {
	h := newHarness(t)
	src := netip.AddrPortFrom(jail4, 44000)
	dst := netip.MustParseAddrPort("203.0.113.20:5076") // a dynamic port
	h.send(udpBytes(src, dst, []byte("search")))
	d := h.dialer.next(t)
	if d.network != "udp" || d.address != dst.String() {
		t.Fatalf("dialed %s %s", d.network, d.address)
	}
	buf := make([]byte, 2048)
	n, err := d.peer.Read(buf)
	if err != nil || string(buf[:n]) != "search" {
		t.Fatalf("upstream got %q, %v", buf[:n], err)
	}
	// The second datagram of the flow uses the same NAT entry (no dial).
	go h.send(udpBytes(src, dst, []byte("again")))
	n, err = d.peer.Read(buf)
	if err != nil || string(buf[:n]) != "again" {
		t.Fatalf("upstream got %q, %v", buf[:n], err)
	}
	h.dialer.none(t)
	// The reply comes back from the original destination.
	go d.peer.Write([]byte("reply"))
	o := readOut(t, h.ep)
	if o.proto != header.UDPProtocolNumber || o.src != dst.Addr() || o.udp().SourcePort() != dst.Port() || o.dst != src.Addr() || o.udp().DestinationPort() != src.Port() || string(o.udp().Payload()) != "reply" {
		t.Fatalf("reply %v:%d -> %v:%d %q", o.src, o.udp().SourcePort(), o.dst, o.udp().DestinationPort(), o.udp().Payload())
	}
	if h.st.UDPFlows() != 1 {
		t.Fatalf("%d flows, want 1", h.st.UDPFlows())
	}
	// Not idle long enough: kept.
	h.clock.add(59 * time.Second)
	if n := h.st.ExpireIdle(); n != 0 {
		t.Fatalf("expired %d flows early", n)
	}
	// Idle for the timeout: expired, its socket closed, its goroutines gone.
	h.clock.add(time.Second)
	if n := h.st.ExpireIdle(); n != 1 {
		t.Fatalf("expired %d flows, want 1", n)
	}
	if _, err := d.peer.Read(buf); err != io.EOF {
		t.Fatalf("upstream socket not closed: %v", err)
	}
	if h.st.UDPFlows() != 0 {
		t.Fatalf("%d flows left", h.st.UDPFlows())
	}
	h.settle(t)
	// A new datagram makes a new flow.
	h.send(udpBytes(src, dst, []byte("later")))
	d2 := h.dialer.next(t)
	if n, err := d2.peer.Read(buf); err != nil || string(buf[:n]) != "later" {
		t.Fatalf("new flow got %q, %v", buf[:n], err)
	}
}

func TestDNSRelayUDP(t *testing.T) {
	h := newHarness(t)
	src := netip.AddrPortFrom(jail4, 45000)
	query := []byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01")
	h.send(udpBytes(src, netip.AddrPortFrom(dns4, 53), query))
	d := h.dialer.next(t)
	if d.network != "udp" || d.address != upstream.String() {
		t.Fatalf("relayed to %s %s, want udp %s", d.network, d.address, upstream)
	}
	buf := make([]byte, 2048)
	n, err := d.peer.Read(buf)
	if err != nil || string(buf[:n]) != string(query) {
		t.Fatalf("upstream got %x, %v", buf[:n], err)
	}
	answer := append(append([]byte(nil), query...), "\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xcb\x00\x71\x07"...)
	answer[2] = 0x81
	go d.peer.Write(answer)
	o := readOut(t, h.ep)
	if o.src != dns4 || o.udp().SourcePort() != 53 || o.dst != src.Addr() || string(o.udp().Payload()) != string(answer) {
		t.Fatalf("answer from %v:%d to %v: %x", o.src, o.udp().SourcePort(), o.dst, o.udp().Payload())
	}
	if len(h.blocks.list()) != 0 {
		t.Fatalf("blocks: %v", h.blocks.list())
	}
}

func TestICMPEcho(t *testing.T) {
	h := newHarness(t)
	// The gateway answers.
	h.send(echoBytes(jail4, gateway4))
	o := readOut(t, h.ep)
	if o.proto != header.ICMPv4ProtocolNumber || header.ICMPv4(o.transport).Type() != header.ICMPv4EchoReply || o.src != gateway4 {
		t.Fatalf("gateway echo: proto %d from %v", o.proto, o.src)
	}
	// Arbitrary addresses are never answered for; blocked ones are
	// recorded.
	for _, tt := range []struct {
		src, dst netip.Addr
		blocked  bool
	}{
		{jail4, netip.MustParseAddr("203.0.113.7"), false},
		{jail4, netip.MustParseAddr("10.1.2.3"), true},
		{jail6, netip.MustParseAddr("2001:db8::1"), false},
		{jail6, netip.MustParseAddr("fd00::1"), true},
	} {
		before := len(h.blocks.list())
		h.send(echoBytes(tt.src, tt.dst))
		if q := h.ep.NumQueued(); q != 0 {
			o := readOut(t, h.ep)
			t.Fatalf("echo to %v answered: proto %d from %v", tt.dst, o.proto, o.src)
		}
		if got := len(h.blocks.list()) - before; got != map[bool]int{true: 1, false: 0}[tt.blocked] {
			t.Fatalf("echo to %v: %d blocks", tt.dst, got)
		}
	}
}

func TestNewErrors(t *testing.T) {
	pol := netpolicy.MustNew(netpolicy.Config{})
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no policy", Config{Dialer: newFakeDialer()}, "no policy"},
		{"loopback gateway", Config{Policy: pol, Dialer: newFakeDialer(), Gateways: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, "unusable local address"},
		{"unspecified dns", Config{Policy: pol, Dialer: newFakeDialer(), VirtualDNS: []netip.Addr{netip.IPv6Unspecified()}}, "unusable local address"},
		{"bad upstream", Config{Policy: pol, Dialer: newFakeDialer(), Upstreams: []netip.AddrPort{{}}}, "invalid upstream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ep := channel.New(1, 1500, "")
			defer ep.Close()
			st, err := New(ep, tt.cfg)
			if err == nil {
				st.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() error %v, want %q", err, tt.want)
			}
		})
	}
}

// Close ends live flows and every goroutine, and is idempotent.
func TestCloseReleasesEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	ep := channel.New(64, 65520, "")
	defer ep.Close()
	dialer := newFakeDialer()
	st, err := New(ep, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: dialer, UDPIdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	src := netip.AddrPortFrom(jail4, 46000)
	send := func(p tcpip.NetworkProtocolNumber, b []byte) { inject(ep, p, b) }
	send(tcpSeg{src: src, dst: netip.MustParseAddrPort("203.0.113.1:443"), flags: header.TCPFlagSyn, seq: 1}.bytes())
	d1 := dialer.next(t)
	send(udpBytes(src, netip.MustParseAddrPort("203.0.113.1:9999"), []byte("x")))
	d2 := dialer.next(t)
	// The datagram reaches the upstream (read it, so that the read below
	// can only see the close).
	d2.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
	if n, err := d2.peer.Read(make([]byte, 8)); err != nil || n != 1 {
		t.Fatalf("upstream datagram: %d bytes, %v", n, err)
	}
	st.Close()
	st.Close()
	for _, p := range []net.Conn{d1.peer, d2.peer} {
		p.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
		if _, err := p.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("upstream conn not closed by Close: %v", err)
		}
		p.Close()
	}
	h := &harness{base: before}
	h.settle(t)
}

// lateDialer succeeds only once its context is cancelled, like a dial that
// completes just as the stack closes.
type lateDialer struct{ started, peers chan net.Conn }

func (d lateDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	d.started <- nil
	<-ctx.Done()
	a, b, err := socketPair(unix.SOCK_STREAM)
	if err != nil {
		return nil, err
	}
	d.peers <- b
	return a, nil
}

// A dial that completes while the stack is closing must not start a
// handshake (it would retry SYN-ACKs for minutes) and must not leak.
func TestCloseDuringDial(t *testing.T) {
	before := runtime.NumGoroutine()
	ep := channel.New(64, 65520, "")
	defer ep.Close()
	d := lateDialer{started: make(chan net.Conn, 1), peers: make(chan net.Conn, 1)}
	st, err := New(ep, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: d, NoJanitor: true})
	if err != nil {
		t.Fatal(err)
	}
	proto, b := tcpSeg{src: netip.AddrPortFrom(jail4, 47000), dst: netip.MustParseAddrPort("203.0.113.1:443"), flags: header.TCPFlagSyn, seq: 1}.bytes()
	inject(ep, proto, b)
	<-d.started
	st.Close()
	peer := <-d.peers
	if _, err := peer.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("upstream conn not closed: %v", err)
	}
	peer.Close()
	h := &harness{base: before}
	h.settle(t)
}
