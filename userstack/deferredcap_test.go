package userstack

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// A flow to a name (peek.go) counts among the connections opening
// (Config.MaxInFlight) from its SYN until its handshake completes, its
// lookup and host connect included, as a flow to an address does. (When
// the dial was deferred past the handshake, the count once ended at the
// sandbox's handshake ACK: a sandbox that completed its handshakes could
// hold any number of host sockets connecting to an address that never
// answers, each for up to DialTimeout, in the launcher.)

const (
	capFlows    = 4  // the configured cap
	capAttempts = 12 // flows the sandbox tries to open, all at once
)

// queuedOut returns the next packet the stack has sent already, if any
// (readOut without the wait: the stack answers a SYN on the injecting
// goroutine).
func queuedOut(t *testing.T, h *namesHarness) (out, bool) {
	t.Helper()
	pkt := h.ep.Read()
	if pkt == nil {
		return out{}, false
	}
	defer pkt.DecRef()
	v := pkt.ToView()
	b := append([]byte(nil), v.AsSlice()...)
	v.Release()
	return parseOut(t, b), true
}

// openNameFlow sends a SYN from src to dst, waits for the SYN-ACK (the
// name's host connected), completes the handshake and sends first.
func openNameFlow(t *testing.T, h *namesHarness, src, dst netip.AddrPort, first []byte) {
	t.Helper()
	iss := h.handshake(t, src, dst)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: first}.bytes())
}

// resolveName asks the stack's resolver for name's (synthetic) address.
func resolveName(t *testing.T, h *namesHarness, name string) netip.Addr {
	t.Helper()
	a := answerAddrs(t, h.query(t, name+".", dnsmessage.TypeA), name+".")
	if len(a) != 1 {
		t.Fatalf("A %s: %v", name, a)
	}
	return a[0]
}

// nameSYNs sends capAttempts SYNs to dst at once, from srcBase on.
func nameSYNs(h *namesHarness, dst netip.AddrPort, srcBase uint16) {
	for i := range uint16(capAttempts) {
		h.send(tcpSeg{src: netip.AddrPortFrom(jail4, srcBase+i), dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	}
}

// noTCPAnswer fails if the stack sent the sandbox a TCP segment.
func noTCPAnswer(t *testing.T, h *namesHarness) {
	t.Helper()
	for {
		o, ok := queuedOut(t, h)
		if !ok {
			return
		}
		if o.proto == header.TCPProtocolNumber {
			t.Fatalf("a %v to port %d, want no answer to a SYN whose dial never ends", o.tcp().Flags(), o.tcp().DestinationPort())
		}
	}
}

// waitUntil polls cond, boundedly (a failsafe, not a timing assertion).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 4000 {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingDialer is the zone's dialer whose TCP dials to void never
// complete (they end with their context: DialTimeout); it counts those in
// progress and the most ever at once.
type countingDialer struct {
	*zoneDialer
	void      string
	cur, peak atomic.Int32
}

func (d *countingDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if network != "tcp" || address != d.void {
		return d.zoneDialer.DialContext(ctx, network, address)
	}
	n := d.cur.Add(1)
	for {
		p := d.peak.Load()
		if n <= p || d.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-ctx.Done()
	d.cur.Add(-1)
	return nil, ctx.Err()
}

// Through a Dialer: no more dials are ever in progress than the cap, the
// SYNs past it are dropped (the sandbox retries them), no SYN is answered
// while its dial hangs, and room comes back when the dials give up (the
// sandbox's side sees nothing: a timeout) or once a connected flow's
// handshake completes.
func TestNamesDeferredDialsCappedDialer(t *testing.T) {
	h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	z := newZoneDialer()
	z.addA("void.test", "203.0.113.10")
	z.addA("ok.test", "203.0.113.11")
	d := &countingDialer{zoneDialer: z, void: "203.0.113.10:443"}
	h.start(t, Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{}),
		Dialer:         d,
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
		DialTimeout:    time.Second,
		MaxInFlight:    capFlows,
		Names:          newNames(t, NameConfig{Rules: fakeRules{allow: map[string][]uint16{"void.test": nil, "ok.test": nil}}, PeekTimeout: 20 * time.Millisecond}),
	})
	nh := &namesHarness{harness: h, zone: z}
	void := netip.AddrPortFrom(resolveName(t, nh, "void.test"), 443)
	ok := netip.AddrPortFrom(resolveName(t, nh, "ok.test"), 443)
	nameSYNs(nh, void, 45000)
	waitUntil(t, "the first flows' dials", func() bool { return d.cur.Load() >= capFlows })
	time.Sleep(100 * time.Millisecond) // any dial past the cap would have started by now
	if p := d.peak.Load(); p != capFlows {
		t.Fatalf("%d dials in progress at once, want %d (the cap)", p, capFlows)
	}
	noTCPAnswer(t, nh)

	// The dials time out: the flows end without a word to the sandbox
	// (its SYN retries time out), their places under the cap back.
	waitUntil(t, "the timed out flows' teardown", func() bool { return tcpFlows(h.st) == 0 })
	noTCPAnswer(t, nh)

	// A flow that connects and completes its handshake leaves the count:
	// the cap's places are all there for the next flows.
	openNameFlow(t, nh, netip.AddrPortFrom(jail4, 45100), ok, clientHello(t, "ok.test"))
	okDial := z.next(t)
	defer okDial.peer.Close()
	hostReads(t, okDial, 5) // the ClientHello's record header: checked, and relayed
	nameSYNs(nh, void, 45200)
	waitUntil(t, "the retried flows' dials", func() bool { return d.cur.Load() >= capFlows })
}

// synSentSockets counts the TCP sockets of the test's network namespace
// whose connect is under way (SYN_SENT, state 02 of /proc/net/tcp).
func synSentSockets(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 3 && f[3] == "02" {
			n++
		}
	}
	return n
}

// With the stack's own sockets (Dialer nil, as the jail runs it), in a
// network namespace of its own: the name resolves to nsVoid, which never
// answers; the host sockets connecting there, counted by the kernel, are
// never more than the cap.
func TestNamesDeferredDialsCappedOwnSocket(t *testing.T) {
	if !inOwnNetnsChild(t, "TestNamesDeferredDialsCappedOwnSocket") {
		return
	}
	nh := startVoidOwnSocket(t, 2*time.Second, capFlows)
	void := netip.AddrPortFrom(resolveName(t, nh, "void.test"), 443)
	nameSYNs(nh, void, 45200)
	peak := 0
	waitUntil(t, "the first flows' connects", func() bool {
		peak = max(peak, synSentSockets(t))
		return peak >= capFlows
	})
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		peak = max(peak, synSentSockets(t))
	}
	if peak != capFlows {
		t.Fatalf("%d host sockets connecting at once, want %d (the cap)", peak, capFlows)
	}
	noTCPAnswer(t, nh)

	// The connects time out (DialTimeout): each flow ends silently, its
	// host socket closed, its place back; a retried SYN is dialed again.
	waitUntil(t, "the timed out flows' teardown", func() bool { return tcpFlows(nh.st) == 0 && synSentSockets(t) == 0 })
	noTCPAnswer(t, nh)
	nh.send(tcpSeg{src: netip.AddrPortFrom(jail4, 45300), dst: void, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	waitUntil(t, "the retried flow's connect", func() bool { return synSentSockets(t) == 1 })
}
