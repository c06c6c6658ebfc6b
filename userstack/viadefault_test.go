package userstack

import (
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// A flow the stack refuses because of a host route through the default
// gateway is recorded with that route, typed (Block.ViaDefault: the
// jail's exit summary names it from there, not from the rule's text), for
// TCP, UDP and ICMP, in the route's IPv4 and NAT64 forms; a refusal by
// another host route carries none.
func TestBlockViaDefaultTyped(t *testing.T) {
	via := netip.MustParsePrefix("198.51.100.0/24")
	other := netip.MustParsePrefix("203.0.113.0/24")
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{
		Policy:     netpolicy.MustNew(netpolicy.Config{HostRoutes: []netip.Prefix{via, other}, ViaDefault: []netip.Prefix{via}}),
		Dialer:     h.dialer,
		Gateways:   []netip.Addr{gateway4},
		VirtualDNS: []netip.Addr{dns4},
		Upstreams:  []netip.AddrPort{upstream},
		Now:        h.clock.now,
	})
	src4, src6 := netip.AddrPortFrom(jail4, 43000), netip.AddrPortFrom(jail6, 43000)
	viaDst := netip.MustParseAddrPort("198.51.100.7:443")
	nat64Dst := netip.MustParseAddrPort("[64:ff9b::198.51.100.7]:443")
	otherDst := netip.MustParseAddrPort("203.0.113.9:443")
	h.send(tcpSeg{src: src4, dst: viaDst, flags: header.TCPFlagSyn, seq: 1}.bytes())
	h.send(tcpSeg{src: src6, dst: nat64Dst, flags: header.TCPFlagSyn, seq: 1}.bytes())
	h.send(udpBytes(src4, viaDst, []byte("x")))
	h.send(echoBytes(jail4, viaDst.Addr()))
	h.send(tcpSeg{src: src4, dst: otherDst, flags: header.TCPFlagSyn, seq: 1}.bytes())
	h.dialer.none(t)
	bl := h.blocks.list()
	if len(bl) != 5 {
		t.Fatalf("blocks %+v, want 5", bl)
	}
	for _, b := range bl {
		want := via
		if b.Dst == otherDst {
			want = netip.Prefix{}
		}
		if b.ViaDefault != want {
			t.Errorf("block %+v: ViaDefault %v, want %v", b, b.ViaDefault, want)
		}
	}
}
