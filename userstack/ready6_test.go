package userstack

import (
	"io"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// gateProbe is an IPv6 gate the test opens.
type gateProbe struct {
	ch    chan struct{}
	asked atomic.Int32
}

func (g *gateProbe) ready() <-chan struct{} { g.asked.Add(1); return g.ch }

// newGateHarness is newHarness with an IPv6 gate, shut.
func newGateHarness(t *testing.T) (*harness, *gateProbe) {
	t.Helper()
	g := &gateProbe{ch: make(chan struct{})}
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{}),
		Dialer:         h.dialer,
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
		IPv6Ready:      g.ready,
	})
	return h, g
}

// nat64Prefix is a network-specific NAT64 prefix the "discovery" finds.
var nat64Prefix = netip.MustParsePrefix("2001:db8:64::/96")

// discover stands for what the gate waited for: the policy gains the
// NAT64 prefix, then the gate opens.
func (h *harness) discover(g *gateProbe) {
	h.st.cfg.Policy.Set(netpolicy.MustNew(netpolicy.Config{NAT64: []netip.Prefix{nat64Prefix}}))
	close(g.ch)
}

func noOutput(t *testing.T, h *harness, what string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if n := h.ep.NumQueued(); n != 0 {
		o := readOut(t, h.ep)
		t.Fatalf("%s: answered (protocol %d) before the gate opened", what, o.proto)
	}
	h.dialer.none(t)
}

// A TCP flow to an allowed IPv6 destination waits for the gate, then is
// decided by the policy then in force: the embedded form of a private
// address under the prefix found meanwhile is refused (RST, recorded),
// never dialed. IPv4 flows and flows refused anyway never ask the gate;
// once it is open, IPv6 flows leave at once.
func TestIPv6GateTCP(t *testing.T) {
	h, g := newGateHarness(t)
	src := netip.AddrPortFrom(jail6, 41000)

	h.send(tcpSeg{src: netip.AddrPortFrom(jail4, 41000), dst: netip.MustParseAddrPort("203.0.113.7:443"), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	if d := h.dialer.next(t); d.address != "203.0.113.7:443" {
		t.Fatalf("dialed %s", d.address)
	}
	readOut(t, h.ep) // its SYN|ACK
	h.send(tcpSeg{src: src, dst: netip.MustParseAddrPort("[fd00::1]:22"), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	if o := readOut(t, h.ep); !o.tcp().Flags().Contains(header.TCPFlagRst) {
		t.Fatalf("a blocked IPv6 destination: %v, want a RST", o.tcp().Flags())
	}
	if n := g.asked.Load(); n != 0 {
		t.Fatalf("the gate was asked %d times for flows that do not need it", n)
	}

	private := netip.MustParseAddrPort("[2001:db8:64::a01:203]:22") // 10.1.2.3
	h.send(tcpSeg{src: src, dst: private, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	noOutput(t, h, "tcp "+private.String())
	if g.asked.Load() == 0 {
		t.Fatal("the gate was never asked")
	}
	h.discover(g)
	o := readOut(t, h.ep)
	if f := o.tcp().Flags(); !f.Contains(header.TCPFlagRst) || o.src != private.Addr() || o.tcp().AckNumber() != 1001 {
		t.Fatalf("after the gate: %v from %v, want a RST", f, o.src)
	}
	h.dialer.none(t)
	bl := h.blocks.list()
	if len(bl) != 2 || bl[1].Dst != private || !strings.Contains(bl[1].Rule, "10.0.0.0/8") {
		t.Fatalf("blocks %+v, want the embedded private address recorded", bl)
	}

	h.send(tcpSeg{src: netip.AddrPortFrom(jail6, 41001), dst: netip.MustParseAddrPort("[2001:db8::80]:443"), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	if d := h.dialer.next(t); d.address != "[2001:db8::80]:443" {
		t.Fatalf("dialed %s", d.address)
	}
}

// A datagram to a new allowed IPv6 destination is held until the gate
// opens, then decided again: sent when still allowed, dropped and
// recorded when the policy found meanwhile refuses it.
func TestIPv6GateUDP(t *testing.T) {
	h, g := newGateHarness(t)
	src := netip.AddrPortFrom(jail6, 43000)
	private := netip.MustParseAddrPort("[2001:db8:64::a01:203]:5064")
	internet := netip.MustParseAddrPort("[2001:db8::80]:5000")
	h.send(udpBytes(src, private, []byte("to-private")))
	h.send(udpBytes(netip.AddrPortFrom(jail6, 43001), internet, []byte("to-internet")))
	noOutput(t, h, "udp")
	h.discover(g)
	d := h.dialer.next(t)
	if d.network != "udp" || d.address != internet.String() {
		t.Fatalf("dialed %s %s, want udp %s", d.network, d.address, internet)
	}
	buf := make([]byte, 64)
	_ = d.peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := d.peer.Read(buf)
	if err != nil && err != io.EOF || string(buf[:n]) != "to-internet" {
		t.Fatalf("the held datagram: %q, %v", buf[:n], err)
	}
	h.dialer.none(t)
	var found bool
	for range 1000 {
		for _, b := range h.blocks.list() {
			found = found || (b.Dst == private && strings.Contains(b.Rule, "10.0.0.0/8"))
		}
		if found {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !found {
		t.Fatalf("blocks %+v, want the embedded private address recorded", h.blocks.list())
	}
}

// A gate that never opens: the flow is refused after DialTimeout, never
// dialed.
func TestIPv6GateStaysShut(t *testing.T) {
	g := &gateProbe{ch: make(chan struct{})}
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Now()}}
	h.start(t, Config{
		Policy:      netpolicy.MustNew(netpolicy.Config{}),
		Dialer:      h.dialer,
		DialTimeout: 200 * time.Millisecond,
		Now:         h.clock.now,
		IPv6Ready:   g.ready,
	})
	dst := netip.MustParseAddrPort("[2001:db8::80]:443")
	h.send(tcpSeg{src: netip.AddrPortFrom(jail6, 41000), dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	if o := readOut(t, h.ep); !o.tcp().Flags().Contains(header.TCPFlagRst) {
		t.Fatalf("%v, want a RST", o.tcp().Flags())
	}
	h.dialer.none(t)
}

// A name's IPv6 addresses wait for the gate too, on the worker that
// resolves and dials the name: an address that the NAT64 prefix found
// meanwhile blocks is refused (TCP: a RST; UDP: the held datagrams are
// dropped and recorded), never dialed; another name's is dialed once the
// gate is open.
func TestIPv6GateNames(t *testing.T) {
	g := &gateProbe{ch: make(chan struct{})}
	nh := newNamesHarnessWith(t, map[string][]uint16{"inside.test": nil, "good.test": nil}, NameConfig{PeekTimeout: 20 * time.Millisecond},
		func(c *Config) { c.IPv6Ready = g.ready })
	h, z := nh.harness, nh.zone
	z.addA("inside.test", "2001:db8:64::a01:203") // 10.1.2.3 under the prefix
	z.addA("good.test", "2001:db8::80")
	inside := answerAddrs(t, nh.query(t, "inside.test.", dnsmessage.TypeAAAA), "inside.test.")[0]
	good := answerAddrs(t, nh.query(t, "good.test.", dnsmessage.TypeAAAA), "good.test.")[0]

	// TCP: the SYN starts the name's dial, which waits for the gate (the
	// SYN unanswered meanwhile).
	src := netip.AddrPortFrom(jail6, 46000)
	dst := netip.AddrPortFrom(inside, 7000)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	// UDP: the first datagram starts the name's resolution (dropped), the
	// next ones are held for the gate.
	usrc := netip.AddrPortFrom(jail6, 46001)
	udst := netip.AddrPortFrom(inside, 9000)
	for deadline := time.Now().Add(10 * time.Second); g.asked.Load() < 2 && time.Now().Before(deadline); { // failsafe
		h.send(udpBytes(usrc, udst, []byte("x")))
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	z.none(t)
	if g.asked.Load() < 2 {
		t.Fatalf("the gate was asked %d times, want by both flows", g.asked.Load())
	}
	h.st.cfg.Policy.Set(netpolicy.MustNew(netpolicy.Config{NAT64: []netip.Prefix{nat64Prefix}}))
	close(g.ch)
	nh.waitRST(t)
	z.none(t)
	var tcpBlocked, udpBlocked bool
	for range 1000 {
		for _, b := range h.blocks.list() {
			ok := b.Name == "inside.test" && strings.Contains(b.Rule, "2001:db8:64::a01:203") && strings.Contains(b.Rule, "10.0.0.0/8")
			tcpBlocked = tcpBlocked || (ok && b.Proto == netpolicy.ProtoTCP)
			udpBlocked = udpBlocked || (ok && b.Proto == netpolicy.ProtoUDP)
		}
		if tcpBlocked && udpBlocked {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !tcpBlocked || !udpBlocked {
		t.Fatalf("blocks %+v, want the name's embedded private address refused for tcp and udp", h.blocks.list())
	}
	z.none(t)

	src2 := netip.AddrPortFrom(jail6, 46002)
	dst2 := netip.AddrPortFrom(good, 7000)
	nh.handshake(t, src2, dst2)
	if d := z.next(t); d.address != "[2001:db8::80]:7000" {
		t.Fatalf("dialed %s", d.address)
	} else {
		d.peer.Close()
	}
}
