package userstack

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Established flows are capped (Config.MaxFlows; issue 34): each holds a
// host socket, and only the flows still opening were capped
// (MaxInFlight), so 200 established relays held 200 host sockets with
// MaxInFlight 8. A SYN over the cap gets a RST and a block record naming
// the cap, and is never dialed; a flow that ends gives its place back.
func TestTCPEstablishedFlowsCapped(t *testing.T) {
	const capFlows, attempts = 8, 200
	h := &harness{dialer: &fakeDialer{calls: make(chan dial, attempts)}, blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{
		Policy:      netpolicy.MustNew(netpolicy.Config{}),
		Dialer:      h.dialer,
		Gateways:    []netip.Addr{gateway4},
		Now:         h.clock.now,
		MaxInFlight: capFlows,
		MaxFlows:    capFlows,
	})
	dst := netip.MustParseAddrPort("203.0.113.10:80")
	var open []*conn
	refused := 0
	for i := range attempts {
		src := netip.AddrPortFrom(jail4, uint16(30000+i))
		if len(open) < capFlows {
			open = append(open, handshake(t, h, src, dst)) // established
			continue
		}
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
		o := readOut(t, h.ep)
		if o.tcp().DestinationPort() != src.Port() || o.tcp().Flags() != header.TCPFlagRst|header.TCPFlagAck {
			t.Fatalf("flow %d over the cap: got %v to port %d, want RST|ACK", i, o.tcp().Flags(), o.tcp().DestinationPort())
		}
		refused++
	}
	if n := len(h.dialer.calls); n != 0 {
		t.Fatalf("%d dials past the cap's %d", n, capFlows)
	}
	if n := tcpFlows(h.st); n != capFlows {
		t.Fatalf("%d flows, want the cap's %d", n, capFlows)
	}
	bl := h.blocks.list()
	if len(bl) != attempts-capFlows || !strings.HasPrefix(bl[0].Rule, "too many TCP connections open at once (8") || bl[0].Dst != dst {
		t.Fatalf("%d block records (first %+v), want %d naming the cap", len(bl), bl[0], attempts-capFlows)
	}

	// One flow ends (the sandbox resets it): its place is free again.
	c := open[0]
	c.at(c.nxt, header.TCPFlagRst, nil)
	waitUntil(t, "the reset flow's teardown", func() bool { return tcpFlows(h.st) == capFlows-1 })
	handshake(t, h, netip.AddrPortFrom(jail4, 31000), dst)
}

// The default cap follows the launcher's descriptor limit.
func TestDefaultMaxFlows(t *testing.T) {
	for _, tt := range []struct {
		nofile uint64
		udp    int
		want   int
	}{
		{1024, 512, 256},
		{4096, 512, 1792},
		{1 << 20, 512, maxDefaultFlows},
		{256, 512, minDefaultFlows},
		{^uint64(0), 512, maxDefaultFlows},
	} {
		if got := flowsForNOFILE(tt.nofile, tt.udp); got != tt.want {
			t.Errorf("flowsForNOFILE(%d, %d) = %d, want %d", tt.nofile, tt.udp, got, tt.want)
		}
	}
}
