package userstack

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// A proxied echo to an allowed IPv6 destination waits for the gate, then
// is decided by the policy then in force: the embedded form of a private
// address under the NAT64 prefix found meanwhile is never pinged from
// the host (recorded), an internet address is.
func TestIPv6GateEcho(t *testing.T) {
	g, pinger, h := startEchoGate(t, 0)
	private := netip.MustParseAddr("2001:db8:64::a01:203") // 10.1.2.3
	internet := netip.MustParseAddr("2001:db8::7")
	for _, dst := range []netip.Addr{private, internet} {
		proto, b := echoBytes(jail6, dst)
		inject(h.ep, proto, b)
	}
	time.Sleep(50 * time.Millisecond)
	if c := pinger.called(); len(c) != 0 || g.asked.Load() == 0 {
		t.Fatalf("before the gate opened: pinged %v, gate asked %d times", c, g.asked.Load())
	}
	h.discover(g)
	for i := 0; i < 400 && len(pinger.called()) < 1; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if c := pinger.called(); len(c) != 1 || c[0] != internet {
		t.Fatalf("after the gate: pinged %v, want %v only", c, internet)
	}
	var found bool
	for i := 0; i < 400 && !found; i++ {
		for _, b := range h.blocks.list() {
			found = found || (b.Dst.Addr() == private && strings.Contains(b.Rule, "10.0.0.0/8"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !found {
		t.Fatalf("blocks %+v, want the embedded private address recorded", h.blocks.list())
	}
}

// Datagrams held for the gate are bounded (maxHeldUDP; more are dropped)
// and every one held gives its place back: once the gate opens, and when
// the stack closes with the gate still shut.
func TestIPv6GateHeldUDPBounded(t *testing.T) {
	for _, open := range []bool{true, false} {
		h, g := newGateHarness(t)
		for i := range maxHeldUDP + 8 {
			dst := netip.AddrPortFrom(netip.MustParseAddr("2001:db8::80"), uint16(5000+i))
			h.send(udpBytes(netip.AddrPortFrom(jail6, uint16(43000+i)), dst, []byte("x")))
		}
		waitUntilHeld := func(want int32) {
			t.Helper()
			for i := 0; i < 2000 && h.st.heldUDP.Load() != want; i++ {
				time.Sleep(5 * time.Millisecond)
			}
			if n := h.st.heldUDP.Load(); n != want {
				t.Fatalf("open %v: %d datagrams held, want %d", open, n, want)
			}
		}
		waitUntilHeld(maxHeldUDP)
		h.dialer.none(t)
		if open {
			stop := make(chan struct{})
			defer close(stop)
			go func() { // take the held datagrams' dials
				for {
					select {
					case d := <-h.dialer.calls:
						if d.peer != nil {
							d.peer.Close()
						}
					case <-stop:
						return
					}
				}
			}()
			h.discover(g)
		} else {
			h.st.Close()
		}
		waitUntilHeld(0)
	}
}

// An echo whose gate stays shut past DialTimeout is refused, never
// pinged, and recorded as the TCP and UDP flows in that case are (it
// once went unrecorded).
func TestIPv6GateShutEchoRecorded(t *testing.T) {
	_, pinger, h := startEchoGate(t, 100*time.Millisecond) // its gate stays shut
	dst := netip.MustParseAddr("2001:db8::7")
	proto, b := echoBytes(jail6, dst)
	inject(h.ep, proto, b)
	var found bool
	for i := 0; i < 400 && !found; i++ {
		for _, b := range h.blocks.list() {
			found = found || (b.Dst.Addr() == dst && b.Proto == netpolicy.ProtoICMP && strings.Contains(b.Rule, "not in time"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !found {
		t.Fatalf("blocks %+v, want the echo refused for the shut gate recorded", h.blocks.list())
	}
	if c := pinger.called(); len(c) != 0 {
		t.Fatalf("pinged %v with the gate shut", c)
	}
}

// startEchoGate starts a stack that proxies echoes to pinger, with an IPv6
// gate g the test opens; dialTimeout 0 is the default.
func startEchoGate(t *testing.T, dialTimeout time.Duration) (*gateProbe, *fakePinger, *harness) {
	t.Helper()
	g := &gateProbe{ch: make(chan struct{})}
	pinger := &fakePinger{up: map[netip.Addr]bool{}}
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Now()}}
	h.start(t, Config{
		Policy:      netpolicy.MustNew(netpolicy.Config{}),
		Dialer:      h.dialer,
		Gateways:    []netip.Addr{gateway4},
		Pinger:      pinger,
		DialTimeout: dialTimeout,
		Now:         h.clock.now,
		IPv6Ready:   g.ready,
	})
	return g, pinger, h
}
