package userstack

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// A live policy update reaches a UDP mapping already in use (issue 34 bug
// 5): once 203.0.113.0/24 is internal, the mapping that sent to
// nsServer neither relays the sandbox's next datagram there (refused with
// ICMP port unreachable and recorded, as a new destination would be) nor
// a reply from it; another destination of the same mapping goes on.
func TestUDPMappingFollowsLivePolicy(t *testing.T) {
	inPrivateNetns(t, func() {
		ctlAddr := netip.MustParseAddr("198.51.100.9") // local, in the netns
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: netipNet(netip.PrefixFrom(ctlAddr, 32))})
		}
		if err != nil {
			t.Error(err)
			return
		}
		srv, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 5380).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer srv.Close()
		ctl, err := net.ListenPacket("udp4", netip.AddrPortFrom(ctlAddr, 5381).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer ctl.Close()
		h := &harness{blocks: &blocks{}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{})})
		src := netip.AddrPortFrom(jail4, 42030)
		dst := netip.AddrPortFrom(nsServer, 5380)
		b := make([]byte, 64)
		readUDP := func() string {
			for {
				o := readOut(t, h.ep)
				if o.proto == header.UDPProtocolNumber {
					return netip.AddrPortFrom(o.src, o.udp().SourcePort()).String() + " " + string(o.udp().Payload())
				}
			}
		}

		h.send(udpBytes(src, dst, []byte("before")))
		_, mapped, err := srv.ReadFrom(b)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := srv.WriteTo([]byte("reply"), mapped); err != nil {
			t.Error(err)
			return
		}
		if got := readUDP(); got != dst.String()+" reply" {
			t.Errorf("control: the sandbox got %q, want the reply", got)
			return
		}

		h.st.SetPolicy(netpolicy.MustNew(netpolicy.Config{ConnectedSubnets: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}))

		// A reply from the now internal peer, then (through the same
		// mapping: the same host port) one from another destination the
		// sandbox sends to: the host socket queues them in that order,
		// so the first the sandbox gets is the stale one unless it was
		// dropped.
		if _, err := srv.WriteTo([]byte("stale"), mapped); err != nil {
			t.Error(err)
			return
		}
		h.send(udpBytes(src, netip.AddrPortFrom(ctlAddr, 5381), []byte("other")))
		_, mapped2, err := ctl.ReadFrom(b)
		if err != nil {
			t.Error(err)
			return
		}
		if mapped2.(*net.UDPAddr).Port != mapped.(*net.UDPAddr).Port {
			t.Errorf("the other destination saw host port %v, want the mapping's %v", mapped2, mapped)
		}
		if _, err := ctl.WriteTo([]byte("fresh"), mapped2); err != nil {
			t.Error(err)
			return
		}
		if got := readUDP(); got != netip.AddrPortFrom(ctlAddr, 5381).String()+" fresh" {
			t.Errorf("after the update the sandbox got %q, want only the allowed destination's reply", got)
		}

		// The sandbox sends to the now internal peer again: refused.
		h.send(udpBytes(src, dst, []byte("after")))
		for {
			o := readOut(t, h.ep)
			if o.proto == header.ICMPv4ProtocolNumber && header.ICMPv4(o.transport).Type() == header.ICMPv4DstUnreachable {
				break
			}
		}
		// The send (a sendmsg on loopback) would have been queued before
		// the refusal: nothing is there.
		_ = srv.SetReadDeadline(time.Now())
		if n, _, err := srv.ReadFrom(b); err == nil {
			t.Errorf("the internal peer got %q after the update", b[:n])
		}
		bl := h.blocks.list()
		if len(bl) == 0 || bl[len(bl)-1].Dst != dst || !strings.Contains(bl[len(bl)-1].Rule, "203.0.113.0/24") {
			t.Errorf("blocks %+v, want the datagram to %v recorded", bl, dst)
		}
	})
}

// tickClock moves on by a nanosecond each time it is read.
type tickClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tickClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Nanosecond)
	return c.t
}

func (c *tickClock) peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// A name's UDP target is read once per decision (issue 34 bug 8): when it
// expires between admission's read and the route's, the flow is decided on
// what admission read (or resolved afresh), never refused as a "local
// address". The target's expiry is swept over the reads' clock ticks.
func TestNamesUDPTargetReadOnce(t *testing.T) {
	clock := &tickClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := newNamesHarnessWith(t, map[string][]uint16{"api.test": nil}, NameConfig{}, func(c *Config) { c.Now = clock.now })
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	dst := netip.AddrPortFrom(api, 5000)
	d := sendUntilDial(t, h, netip.AddrPortFrom(jail4, 45400), dst, []byte("ping"))
	d.peer.Close()
	for k := range 40 {
		if !h.st.adm.SetUDPTargetExpiry(dst, clock.peek().Add(time.Duration(k)*time.Nanosecond)) {
			t.Fatalf("no UDP target for %v", dst)
		}
		key := flowKey{src: netip.AddrPortFrom(jail4, uint16(45401+k)), dst: dst}
		f, target, gate, ok := h.st.newUDPFlow(key)
		if !ok || gate != nil {
			t.Fatalf("expiry %d ticks on: refused (%v, gate %v), blocks %+v", k, ok, gate != nil, h.blocks.list())
		}
		if f != nil {
			if target.String() != "203.0.113.10:5000" {
				t.Fatalf("expiry %d ticks on: target %v", k, target)
			}
			d := h.zone.next(t)
			d.peer.Close()
		}
	}
	if bl := h.blocks.list(); len(bl) != 0 {
		t.Fatalf("blocks %+v", bl)
	}
}
