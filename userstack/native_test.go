package userstack

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// The stack's own sockets (Config.Dialer nil) are opened on the thread
// that hands it the sandbox's packet. These tests hand packets in from a
// thread moved into a network namespace of their own, holding nothing but
// loopback (with a TEST-NET address, which the policy allows, and a route
// for another TEST-NET range that goes nowhere): every socket the stack
// opens, and every packet, stays in that namespace.

var (
	nsServer  = netip.MustParseAddr("203.0.113.7")  // on lo
	nsVoid    = netip.MustParseAddr("198.51.100.2") // via the dummy: never answers
	nsVoidNet = netip.MustParsePrefix("198.51.100.0/24")
	// nsUnreachable has an unreachable route: connect fails at once.
	nsUnreachable = netip.MustParseAddr("192.0.2.99")
)

// inPrivateNetns runs f on a thread in a new network namespace set up as
// above. The thread is never unlocked: it ends with f's goroutine.
func inPrivateNetns(t *testing.T, f func()) {
	t.Helper()
	testutil.NeedsRoot(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if err := setUpTestNetns(); err != nil {
			t.Errorf("set up the namespace: %v", err)
			return
		}
		f()
	}()
	<-done
	if t.Failed() {
		t.FailNow()
	}
}

// setUpTestNetns sets the calling thread's (fresh) network namespace up as
// above: lo up with nsServer, nsVoidNet routed to lo, nsUnreachable
// unreachable.
func setUpTestNetns() error {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err == nil {
		err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: netipNet(netip.PrefixFrom(nsServer, 32))})
	}
	if err == nil {
		// Routed to lo but not local: dropped there, unanswered.
		err = netlink.RouteAdd(&netlink.Route{Dst: netipNet(nsVoidNet), LinkIndex: lo.Attrs().Index, Scope: netlink.SCOPE_LINK})
	}
	if err == nil {
		err = netlink.RouteAdd(&netlink.Route{Dst: netipNet(netip.PrefixFrom(nsUnreachable, 32)), Type: unix.RTN_UNREACHABLE})
	}
	return err
}

func netipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// newNativeHarness is a stack with the default policy and its own
// sockets, on a channel endpoint.
func newNativeHarness(t *testing.T, dialTimeout time.Duration) *harness {
	t.Helper()
	h := &harness{blocks: &blocks{}}
	return h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), DialTimeout: dialTimeout})
}

// A connection through the stack's own socket: the SYN is answered once
// the connect completes; a server that speaks first is heard only after
// the sandbox's handshake ACK (its data waits in the socket meanwhile);
// data flows both ways; the server's close reaches the sandbox as a FIN.
func TestNativeTCPConnectsAndRelays(t *testing.T) {
	inPrivateNetns(t, func() {
		ln, err := net.Listen("tcp4", netip.AddrPortFrom(nsServer, 8080).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		got := make(chan []byte, 1)
		greeted := make(chan struct{})
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- nil
				return
			}
			defer c.Close()
			_, _ = c.Write([]byte("hello"))
			close(greeted)
			b := make([]byte, 4)
			_, err = io.ReadFull(c, b)
			if err != nil {
				b = nil
			}
			got <- b
		}()
		h := newNativeHarness(t, 5*time.Second)
		src := netip.AddrPortFrom(jail4, 42000)
		dst := netip.AddrPortFrom(nsServer, 8080)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 100}.bytes())
		o := readOut(t, h.ep)
		if f := o.tcp().Flags(); f != header.TCPFlagSyn|header.TCPFlagAck || o.tcp().AckNumber() != 101 {
			t.Errorf("answer to the SYN: %v ack %d, want SYN-ACK acking 101", f, o.tcp().AckNumber())
			return
		}
		iss := o.tcp().SequenceNumber()
		<-greeted // the greeting waits in the socket until the handshake ends
		if h.ep.NumQueued() != 0 {
			t.Errorf("%d packets before the handshake ended", h.ep.NumQueued())
		}
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 101, ack: iss + 1}.bytes())
		o = readOut(t, h.ep)
		// An idle connection whose remote vanished must end: the host
		// socket probes (the sandbox's own keepalives stop at the relay).
		h.st.mu.Lock()
		f := h.st.tcp[flowKey{src: src, dst: dst}]
		h.st.mu.Unlock()
		f.mu.Lock()
		ka, kerr := unix.GetsockoptInt(f.fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		f.mu.Unlock()
		if ka != 1 || kerr != nil {
			t.Errorf("SO_KEEPALIVE on the host socket: %d %v, want 1", ka, kerr)
		}
		if p := o.tcpPayload(); !bytes.Equal(p, []byte("hello")) || o.tcp().SequenceNumber() != iss+1 {
			t.Errorf("after the handshake: %q at %d, want the greeting at %d", p, o.tcp().SequenceNumber(), iss+1)
			return
		}
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 101, ack: iss + 6, payload: []byte("ping")}.bytes())
		if b := <-got; !bytes.Equal(b, []byte("ping")) {
			t.Errorf("the server read %q, want ping", b)
			return
		}
		// The server closed after reading: a FIN follows (after the
		// ACK of ping, if that went alone).
		for {
			o = readOut(t, h.ep)
			if o.tcp().Flags().Contains(header.TCPFlagFin) {
				break
			}
			if len(o.tcpPayload()) > 0 || o.tcp().Flags().Contains(header.TCPFlagRst) {
				t.Errorf("before the FIN: %v %q", o.tcp().Flags(), o.tcpPayload())
				return
			}
		}
	})
}

// A destination that refuses (no listener) gives the sandbox a RST, one
// the host cannot reach (an unreachable route) an ICMP host unreachable,
// and one that never answers (the dial times out) nothing at all: the
// flow ends silently, and the sandbox's own SYN retries time out.
func TestNativeTCPDialFailures(t *testing.T) {
	for _, tt := range []struct {
		name string
		dst  netip.AddrPort
	}{
		{"refused", netip.AddrPortFrom(nsServer, 8081)},
		{"unreachable", netip.AddrPortFrom(nsUnreachable, 80)},
		{"timed out", netip.AddrPortFrom(nsVoid, 80)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inPrivateNetns(t, func() {
				h := newNativeHarness(t, 300*time.Millisecond)
				src := netip.AddrPortFrom(jail4, 42001)
				h.send(tcpSeg{src: src, dst: tt.dst, flags: header.TCPFlagSyn, seq: 7}.bytes())
				switch tt.name {
				case "refused":
					o := readOut(t, h.ep)
					if f := o.tcp().Flags(); !f.Contains(header.TCPFlagRst) || f.Contains(header.TCPFlagSyn) || o.tcp().AckNumber() != 8 {
						t.Errorf("answer: %v ack %d, want RST acking 8", f, o.tcp().AckNumber())
					}
				case "unreachable":
					o := readOut(t, h.ep)
					if ic := header.ICMPv4(o.transport); o.proto != header.ICMPv4ProtocolNumber || ic.Type() != header.ICMPv4DstUnreachable || ic.Code() != header.ICMPv4HostUnreachable {
						t.Errorf("answer: protocol %d, want ICMP host unreachable", o.proto)
					}
				default:
					for i := 0; tcpFlows(h.st) != 0; i++ {
						if i > 4000 {
							t.Fatal("the flow outlived its timed-out dial")
						}
						time.Sleep(5 * time.Millisecond)
					}
					if h.ep.NumQueued() != 0 {
						o := readOut(t, h.ep)
						t.Errorf("a timed-out dial was answered: protocol %d", o.proto)
					}
				}
			})
		})
	}
}

// UDP through the stack's own socket: a datagram goes out, the reply
// comes back framed from the destination to the sandbox's port.
func TestNativeUDPRelays(t *testing.T) {
	inPrivateNetns(t, func() {
		pc, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 5353).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer pc.Close()
		go func() {
			b := make([]byte, 64)
			n, from, err := pc.ReadFrom(b)
			if err == nil {
				_, _ = pc.WriteTo(append([]byte("re:"), b[:n]...), from)
			}
		}()
		h := newNativeHarness(t, 5*time.Second)
		src := netip.AddrPortFrom(jail4, 42002)
		dst := netip.AddrPortFrom(nsServer, 5353)
		h.send(udpBytes(src, dst, []byte("q")))
		o := readOut(t, h.ep)
		if o.proto != header.UDPProtocolNumber || o.src != nsServer || o.dst != jail4 ||
			o.udp().SourcePort() != 5353 || o.udp().DestinationPort() != 42002 || string(o.udp().Payload()) != "re:q" {
			t.Errorf("reply: proto %d %v:%d -> %v:%d %q", o.proto, o.src, o.udp().SourcePort(), o.dst, o.udp().DestinationPort(), o.udp().Payload())
		}
	})
}

// The cap on connections still opening holds for the stack's own
// sockets: with destinations that never answer, a SYN over the cap is
// dropped (no socket, no answer: the sandbox retries it), and room comes
// back when a dial gives up.
func TestNativeTCPCapsOpeningConnections(t *testing.T) {
	inPrivateNetns(t, func() {
		h := newNativeHarness(t, 300*time.Millisecond)
		h.st.cfg.MaxInFlight = 2
		dst := netip.AddrPortFrom(nsVoid, 80)
		syn := func(port uint16) {
			h.send(tcpSeg{src: netip.AddrPortFrom(jail4, port), dst: dst, flags: header.TCPFlagSyn, seq: 50}.bytes())
		}
		flows := func() (n int) {
			h.st.mu.Lock()
			defer h.st.mu.Unlock()
			return len(h.st.tcp)
		}
		syn(42100)
		syn(42101)
		syn(42102) // over the cap
		if n := flows(); n != 2 {
			t.Errorf("%d flows opening, want 2 (the cap)", n)
			return
		}
		if q := h.ep.NumQueued(); q != 0 {
			t.Errorf("%d answers to SYNs still dialing or over the cap", q)
			return
		}
		for i := 0; flows() != 0; i++ { // both dials time out: torn down, silently
			if i == 2000 { // failsafe, not a timing assertion
				t.Errorf("%d flows left after their dials gave up", flows())
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		if q := h.ep.NumQueued(); q != 0 {
			t.Errorf("%d answers to SYNs whose dials timed out", q)
			return
		}
		syn(42102) // retried: room again
		if n := flows(); n != 1 {
			t.Errorf("%d flows after the retry, want 1", n)
		}
	})
}

// A UDP mapping is endpoint-independent and its filter address-dependent
// (issue 15): one sandbox socket that sends to two ports of a server
// leaves from one host port for both, a reply from a third port of that
// server (one the sandbox never sent to) reaches the sandbox from that
// port, and a datagram from an address the sandbox never sent to does not.
func TestNativeUDPMappingAndFiltering(t *testing.T) {
	inPrivateNetns(t, func() {
		stranger := netip.MustParseAddr("203.0.113.8")
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: netipNet(netip.PrefixFrom(stranger, 32))})
		}
		if err != nil {
			t.Error(err)
			return
		}
		listen := func(a netip.Addr, port uint16) net.PacketConn {
			pc, err := net.ListenPacket("udp4", netip.AddrPortFrom(a, port).String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pc.Close() })
			return pc
		}
		one, two, third, other := listen(nsServer, 5354), listen(nsServer, 5356), listen(nsServer, 5355), listen(stranger, 5354)
		h := newNativeHarness(t, 5*time.Second)
		src := netip.AddrPortFrom(jail4, 42003)
		b := make([]byte, 64)
		h.send(udpBytes(src, netip.AddrPortFrom(nsServer, 5354), []byte("q1")))
		_, from1, err := one.ReadFrom(b)
		if err != nil {
			t.Error(err)
			return
		}
		h.send(udpBytes(src, netip.AddrPortFrom(nsServer, 5356), []byte("q2")))
		_, from2, err := two.ReadFrom(b)
		if err != nil {
			t.Error(err)
			return
		}
		if from1.String() != from2.String() {
			t.Errorf("one sandbox socket left from %v and %v, want one host port for both destinations", from1, from2)
		}
		if n := h.st.UDPFlows(); n != 1 {
			t.Errorf("%d mappings, want 1", n)
		}
		// A stranger writes first, then the server answers from a port
		// the sandbox never sent to.
		if _, err := other.WriteTo([]byte("spoof"), from1); err != nil {
			t.Error(err)
			return
		}
		if _, err := third.WriteTo([]byte("other port"), from1); err != nil {
			t.Error(err)
			return
		}
		o := readOut(t, h.ep)
		if o.proto != header.UDPProtocolNumber || string(o.udp().Payload()) != "other port" || o.src != nsServer || o.udp().SourcePort() != 5355 || o.udp().DestinationPort() != 42003 {
			t.Errorf("the sandbox got %q from %v:%d, want the other port's reply from %v:5355", o.udp().Payload(), o.src, o.udp().SourcePort(), nsServer)
		}
		if q := h.ep.NumQueued(); q != 0 {
			t.Errorf("%d more packets reached the sandbox (the stranger's)", q)
		}
	})
}

// Address-dependent filtering stays under the policy: a reply from a
// port of the destination's address that the policy refuses (here a
// resolver inside a blocked range, reachable on port 53 only) never
// reaches the sandbox, while the resolver's own answer does.
func TestNativeUDPReplyFromBlockedPortDropped(t *testing.T) {
	inPrivateNetns(t, func() {
		dns, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 53).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer dns.Close()
		other, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 5355).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer other.Close()
		h := &harness{blocks: &blocks{}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{
			ConnectedSubnets: []netip.Prefix{netip.PrefixFrom(nsServer, 24)},
			DNSResolvers:     []netip.Addr{nsServer},
		})})
		src := netip.AddrPortFrom(jail4, 42004)
		h.send(udpBytes(src, netip.AddrPortFrom(nsServer, 53), []byte("q")))
		b := make([]byte, 64)
		_, from, err := dns.ReadFrom(b)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := other.WriteTo([]byte("blocked port"), from); err != nil {
			t.Error(err)
			return
		}
		if _, err := dns.WriteTo([]byte("answer"), from); err != nil {
			t.Error(err)
			return
		}
		o := readOut(t, h.ep)
		if o.proto != header.UDPProtocolNumber || string(o.udp().Payload()) != "answer" || o.udp().SourcePort() != 53 {
			t.Errorf("the sandbox got %q from port %d, want only the resolver's answer", o.udp().Payload(), o.udp().SourcePort())
		}
		if q := h.ep.NumQueued(); q != 0 {
			t.Errorf("%d more packets reached the sandbox", q)
		}
	})
}

// DNS to the virtual resolver address goes through the sandbox socket's
// mapping like any datagram: relayed to the upstream resolver, answered
// from the virtual address; and a datagram of a known destination costs
// no allocation on the way out.
func TestNativeUDPDNSRelayAndNoAllocation(t *testing.T) {
	inPrivateNetns(t, func() {
		up, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 53).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer up.Close()
		h := &harness{blocks: &blocks{}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), VirtualDNS: []netip.Addr{dns4},
			Upstreams: []netip.AddrPort{netip.AddrPortFrom(nsServer, 53)}})
		src := netip.AddrPortFrom(jail4, 42005)
		vdns := netip.AddrPortFrom(dns4, 53)
		h.send(udpBytes(src, vdns, []byte("query")))
		b := make([]byte, 64)
		n, from, err := up.ReadFrom(b)
		if err != nil || string(b[:n]) != "query" {
			t.Errorf("the resolver got %q, %v", b[:n], err)
			return
		}
		if _, err := up.WriteTo([]byte("answer"), from); err != nil {
			t.Error(err)
			return
		}
		o := readOut(t, h.ep)
		if o.proto != header.UDPProtocolNumber || string(o.udp().Payload()) != "answer" || o.src != dns4 || o.udp().SourcePort() != 53 {
			t.Errorf("the sandbox got %q from %v:%d, want the answer from %v", o.udp().Payload(), o.src, o.udp().SourcePort(), vdns)
		}
		payload := [][]byte{[]byte("again")}
		key := flowKey{src: src, dst: vdns}
		sent := true
		allocs := testing.AllocsPerRun(50, func() {
			sent = h.st.udpInput(key, payload) && sent
		})
		if !sent || allocs != 0 {
			t.Errorf("a datagram to a known destination: sent %v, %.1f allocations, want sent and 0", sent, allocs)
		}
	})
}

// A mapping keeps its host port across a quiet spell shorter than the
// idle timeout (5 minutes by default, RFC 4787's recommendation; it was
// one), and is released once idle for it.
func TestNativeUDPMappingKeptUntilIdleTimeout(t *testing.T) {
	inPrivateNetns(t, func() {
		srv, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 5360).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer srv.Close()
		h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Now: h.clock.now})
		src := netip.AddrPortFrom(jail4, 42006)
		dst := netip.AddrPortFrom(nsServer, 5360)
		b := make([]byte, 64)
		port := func() string {
			h.send(udpBytes(src, dst, []byte("x")))
			_, from, err := srv.ReadFrom(b)
			if err != nil {
				t.Error(err)
				return ""
			}
			return from.String()
		}
		first := port()
		const quiet = 5*time.Minute - time.Second
		h.clock.add(quiet)
		if n := h.st.ExpireIdle(); n != 0 {
			t.Errorf("a mapping idle %v expired (%d), want it kept for 5m", quiet, n)
		}
		if again := port(); again != first {
			t.Errorf("after a quiet spell the sandbox socket left from %s, was %s", again, first)
		}
		h.clock.add(5 * time.Minute)
		if n := h.st.ExpireIdle(); n != 1 || h.st.UDPFlows() != 0 {
			t.Errorf("expired %d mappings, %d left; want the idle one gone", n, h.st.UDPFlows())
		}
	})
}

// listeningDialer is a Dialer that is also a PacketListener, as an
// embedder's would be (net.Dialer and net.ListenConfig).
type listeningDialer struct {
	net.Dialer
	net.ListenConfig
}

// A Dialer that is a PacketListener gives the UDP mappings their sockets:
// the same endpoint-independent mapping and address-dependent filter.
func TestNativeUDPPacketListenerDialer(t *testing.T) {
	inPrivateNetns(t, func() {
		srv, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 5370).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer srv.Close()
		other, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 5371).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer other.Close()
		h := &harness{blocks: &blocks{}}
		h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: &listeningDialer{}})
		src := netip.AddrPortFrom(jail4, 42020)
		h.send(udpBytes(src, netip.AddrPortFrom(nsServer, 5370), []byte("q")))
		b := make([]byte, 64)
		_, from, err := srv.ReadFrom(b)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := other.WriteTo([]byte("other port"), from); err != nil {
			t.Error(err)
			return
		}
		o := readOut(t, h.ep)
		if o.proto != header.UDPProtocolNumber || string(o.udp().Payload()) != "other port" || o.udp().SourcePort() != 5371 {
			t.Errorf("the sandbox got %q from port %d, want the other port's reply", o.udp().Payload(), o.udp().SourcePort())
		}
	})
}
