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

// A deferred dial (a TCP flow to an allowed name, peek.go) counts among
// the connections opening (Config.MaxInFlight) until its host connect
// ends, the wait for its first bytes included. It once left the count at
// the sandbox's handshake ACK: a sandbox that completed its handshakes and
// sent a ClientHello for the name on each could hold any number of host
// sockets connecting to an address that never answers, each for up to
// DialTimeout, in the launcher (outside the sandbox).

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

// openNameFlow sends a SYN from src to dst and, if the stack answers it,
// completes the handshake and sends first. It reports whether the SYN was
// answered; packets the stack sent meanwhile for other flows (ACKs of
// their data) are taken and dropped.
func openNameFlow(t *testing.T, h *namesHarness, src, dst netip.AddrPort, first []byte) bool {
	t.Helper()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	var iss uint32
	answered := false
	for {
		o, ok := queuedOut(t, h)
		if !ok {
			break
		}
		if o.proto != header.TCPProtocolNumber || o.tcp().DestinationPort() != src.Port() {
			continue
		}
		if o.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck {
			t.Fatalf("port %d: got %v, want SYN|ACK or nothing", src.Port(), o.tcp().Flags())
		}
		iss, answered = o.tcp().SequenceNumber(), true
	}
	if !answered {
		return false
	}
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: iss + 1}.bytes())
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: first}.bytes())
	return true
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

// floodName opens capAttempts flows to dst at once, each sending first as
// soon as it is established, and returns the sources of the flows the
// stack answered and of those it did not.
func floodName(t *testing.T, h *namesHarness, dst netip.AddrPort, srcBase uint16, first []byte) (answered, dropped []netip.AddrPort) {
	t.Helper()
	for i := range uint16(capAttempts) {
		src := netip.AddrPortFrom(jail4, srcBase+i)
		if openNameFlow(t, h, src, dst, first) {
			answered = append(answered, src)
		} else {
			dropped = append(dropped, src)
		}
	}
	return answered, dropped
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
// flows past it get no answer to their SYN (dropped, as any SYN over the
// cap: the sandbox retries it), and room comes back when the dials give
// up, or as soon as a dial connects. Before the fix every flow was
// answered and dialed: capAttempts dials at once.
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
		Names:          &NameConfig{Rules: fakeRules{allow: map[string][]uint16{"void.test": nil, "ok.test": nil}}, PeekTimeout: 20 * time.Millisecond},
	})
	nh := &namesHarness{harness: h, zone: z}
	void := netip.AddrPortFrom(resolveName(t, nh, "void.test"), 443)
	ok := netip.AddrPortFrom(resolveName(t, nh, "ok.test"), 443)
	answered, dropped := floodName(t, nh, void, 45000, clientHello(t, "void.test"))
	waitUntil(t, "the answered flows' dials", func() bool { return d.cur.Load() >= int32(min(len(answered), capFlows)) })
	time.Sleep(100 * time.Millisecond) // any dial past the cap would have started by now
	if p := d.peak.Load(); p > capFlows || len(answered) != capFlows || len(dropped) != capAttempts-capFlows {
		t.Fatalf("%d dials in progress at once, %d SYNs answered, %d dropped; want at most %d dials, %d answered (the cap)",
			p, len(answered), len(dropped), capFlows, capFlows)
	}
	if p := d.peak.Load(); p != capFlows {
		t.Fatalf("%d dials at once, want %d (every answered flow dialed)", p, capFlows)
	}

	// The dials time out: each flow reset, its place under the cap back.
	for range capFlows {
		nh.waitRST(t)
	}
	waitUntil(t, "the timed out flows' teardown", func() bool { return tcpFlows(h.st) == 0 })

	// A deferred dial that connects leaves the count at once: the cap's
	// places are all there for the next flows (the refused ones, retried).
	if !openNameFlow(t, nh, netip.AddrPortFrom(jail4, 45100), ok, clientHello(t, "ok.test")) {
		t.Fatal("no room after the dials gave up")
	}
	okDial := z.next(t)
	defer okDial.peer.Close()
	hostReads(t, okDial, 5) // the ClientHello's record header: connected, and relayed
	for i, src := range dropped[:capFlows] {
		if !openNameFlow(t, nh, src, void, clientHello(t, "void.test")) {
			t.Fatalf("retry %d of %d: no room, with the connected flow still counted as opening", i+1, capFlows)
		}
	}
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
// never more than the cap. Before the fix all capAttempts were.
func TestNamesDeferredDialsCappedOwnSocket(t *testing.T) {
	if !inOwnNetnsChild(t, "TestNamesDeferredDialsCappedOwnSocket") {
		return
	}
	nh := startVoidOwnSocket(t, 2*time.Second, capFlows)
	void := netip.AddrPortFrom(resolveName(t, nh, "void.test"), 443)
	answered, dropped := floodName(t, nh, void, 45200, clientHello(t, "void.test"))
	peak := 0
	waitUntil(t, "the answered flows' connects", func() bool {
		peak = max(peak, synSentSockets(t))
		return peak >= min(len(answered), capFlows)
	})
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		peak = max(peak, synSentSockets(t))
	}
	if peak > capFlows || len(answered) != capFlows || len(dropped) != capAttempts-capFlows {
		t.Fatalf("%d host sockets connecting at once, %d SYNs answered, %d dropped; want at most %d sockets, %d answered (the cap)",
			peak, len(answered), len(dropped), capFlows, capFlows)
	}

	// The connects time out (DialTimeout): each flow reset, its host
	// socket closed, its place back; a retried SYN is answered.
	for range capFlows {
		nh.waitRST(t)
	}
	waitUntil(t, "the timed out flows' teardown", func() bool { return tcpFlows(nh.st) == 0 && synSentSockets(t) == 0 })
	if !openNameFlow(t, nh, dropped[0], void, clientHello(t, "void.test")) {
		t.Fatal("no room after the connects gave up")
	}
}
