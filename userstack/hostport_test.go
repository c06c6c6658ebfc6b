package userstack

import (
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// A gateway's allowed host port is dialed on the host's loopback; its
// other ports, the other protocol and the other local addresses (the
// virtual DNS address) stay refused and recorded.
func TestHostPorts(t *testing.T) {
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	allowed := netpolicy.HostPort{Proto: netpolicy.ProtoTCP, Port: 8080}
	h.start(t, Config{
		Policy:     netpolicy.MustNew(netpolicy.Config{}),
		Dialer:     h.dialer,
		Gateways:   []netip.Addr{gateway4},
		VirtualDNS: []netip.Addr{dns4},
		Upstreams:  []netip.AddrPort{upstream},
		HostPorts:  []netpolicy.HostPort{allowed, {Proto: netpolicy.ProtoUDP, Port: 5353}},
		Now:        h.clock.now,
	})
	// The machine's own listeners must not decide the test.
	h.st.hostLo.Store(allowed, hostLoChoice{netip.MustParseAddr("127.0.0.1"), h.clock.now()})
	h.send(tcpSeg{src: netip.AddrPortFrom(jail4, 40000), dst: netip.AddrPortFrom(gateway4, 8080), flags: header.TCPFlagSyn, seq: 1}.bytes())
	if d := h.dialer.next(t); d.network != "tcp" || d.address != "127.0.0.1:8080" {
		t.Errorf("dial %s %s, want tcp 127.0.0.1:8080", d.network, d.address)
	}
	if o := readOut(t, h.ep); o.src != gateway4 || o.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck {
		t.Errorf("answer to the allowed port: %v flags %v, want a SYN-ACK from the gateway", o.src, o.tcp().Flags())
	}
	for i, dst := range []netip.AddrPort{netip.AddrPortFrom(gateway4, 8081), netip.AddrPortFrom(gateway4, 5353), netip.AddrPortFrom(dns4, 8080)} {
		h.send(tcpSeg{src: netip.AddrPortFrom(jail4, uint16(40001+i)), dst: dst, flags: header.TCPFlagSyn, seq: 1}.bytes())
		if o := readOut(t, h.ep); !o.tcp().Flags().Contains(header.TCPFlagRst) {
			t.Errorf("tcp %s: flags %v, want a RST", dst, o.tcp().Flags())
		}
	}
	h.dialer.none(t)
	if bl := h.blocks.list(); len(bl) != 3 {
		t.Errorf("blocks %+v, want the three refusals", bl)
	}
}
