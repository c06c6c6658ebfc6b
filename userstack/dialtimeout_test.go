package userstack

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// A flow to a name whose host never answers ends at the stack's
// DialTimeout, silently (the sandbox's SYN is never answered: its own
// retries time out, ETIMEDOUT, as without the jail), not at the kernel's
// connect timeout (about two minutes of SYN retries) or never. The bound
// is generous: what is checked is that the flow ends long before the
// kernel would give up, not how precisely.
const (
	deferredDialTimeout = 200 * time.Millisecond
	deferredDialBound   = 10 * time.Second // the kernel's own: ~127 s
)

// deferredDialResets opens a flow to name (already resolved by the
// stack's DNS to a synthetic address) and waits for the hung dial's end:
// the flow gone, nothing sent to the sandbox.
func deferredDialResets(t *testing.T, h *namesHarness, name string) {
	t.Helper()
	a := answerAddrs(t, h.query(t, name+".", dnsmessage.TypeA), name+".")
	if len(a) != 1 {
		t.Fatalf("A %s: %v", name, a)
	}
	src, dst := netip.AddrPortFrom(jail4, 44500), netip.AddrPortFrom(a[0], 7000)
	start := time.Now()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	for i := 0; tcpFlows(h.st) != 0; i++ {
		if i > 4000 {
			t.Fatal("the hung dial never ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(start); d > deferredDialBound {
		t.Fatalf("the hung dial ended after %v, want about DialTimeout (%v)", d, deferredDialTimeout)
	}
	if o, ok := queuedOut(t, h); ok {
		t.Fatalf("the sandbox got a packet (protocol %d), want none: a timeout", o.proto)
	}
}

// hangDialer is the zone's dialer whose TCP dials to anything but the
// upstream resolver never complete: they end only with their context.
type hangDialer struct{ *zoneDialer }

func (d hangDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if network == "tcp" && address != upstream.String() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return d.zoneDialer.DialContext(ctx, network, address)
}

// Through a Dialer: the dial's context carries DialTimeout (dialConn).
func TestNamesDeferredDialTimeoutDialer(t *testing.T) {
	h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	z := newZoneDialer()
	z.addA("void.test", "203.0.113.10")
	h.start(t, Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{}),
		Dialer:         hangDialer{z},
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
		DialTimeout:    deferredDialTimeout,
		Names:          newNames(t, NameConfig{Rules: fakeRules{allow: map[string][]uint16{"void.test": nil}}, PeekTimeout: 20 * time.Millisecond}),
	})
	deferredDialResets(t, &namesHarness{harness: h, zone: z}, "void.test")
}

// With the stack's own sockets (Dialer nil, as the jail runs it): a
// non-blocking connect the event loop waits on. The whole test runs in a
// child process in a network namespace of its own (the stack's own dials
// and DNS exchanges run on worker goroutines, on any thread, so one
// thread moved into a namespace would not hold them): the resolver is
// served on nsServer, the name resolves to nsVoid, whose SYNs are dropped
// on that namespace's lo. Nothing leaves the namespace.
func TestNamesDeferredDialTimeoutOwnSocket(t *testing.T) {
	if !inOwnNetnsChild(t, "TestNamesDeferredDialTimeoutOwnSocket") {
		return
	}
	deferredDialResets(t, startVoidOwnSocket(t, deferredDialTimeout, 0), "void.test")
}

// startVoidOwnSocket starts a stack with its own sockets (Dialer nil, as
// the jail runs it) for a test in a network namespace of its own
// (inOwnNetnsChild): its resolver is served on nsServer and resolves the
// allowed name void.test to nsVoid, which never answers. maxInFlight 0 is
// the default.
func startVoidOwnSocket(t *testing.T, dialTimeout time.Duration, maxInFlight int) *namesHarness {
	t.Helper()
	return startNamesOwnSocket(t, map[string]netip.Addr{"void.test": nsVoid}, dialTimeout, maxInFlight, 20*time.Millisecond)
}

// startNamesOwnSocket starts a stack with its own sockets (Dialer nil, as
// the jail runs it) for a test in a network namespace of its own
// (inOwnNetnsChild): its resolver is served on nsServer and resolves each
// name of addrs, allowed on every port, to its address. maxInFlight 0 is
// the default.
func startNamesOwnSocket(t *testing.T, addrs map[string]netip.Addr, dialTimeout time.Duration, maxInFlight int, peek time.Duration) *namesHarness {
	t.Helper()
	z := newZoneDialer()
	allow := map[string][]uint16{}
	for n, a := range addrs {
		z.addA(n, a.String())
		allow[n] = nil
	}
	serveZoneUDP(t, z)
	h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{}),
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{netip.AddrPortFrom(nsServer, 53)},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
		DialTimeout:    dialTimeout,
		MaxInFlight:    maxInFlight,
		Names:          newNames(t, NameConfig{Rules: fakeRules{allow: allow}, PeekTimeout: peek}),
	})
	return &namesHarness{harness: h, zone: z}
}

// inOwnNetnsChild runs the test named name again in a child process in a
// network namespace of its own, set up by setUpTestNetns, and reports
// true in that child, where the test's body runs; in the parent it checks
// that the child passed and reports false. The stack's own dials and DNS
// exchanges run on worker goroutines, on any thread, so one thread moved
// into a namespace (inPrivateNetns) would not hold them: the whole
// process is moved. Nothing leaves the namespace.
func inOwnNetnsChild(t *testing.T, name string) bool {
	t.Helper()
	rerun, isolated := testutil.RerunInOwnNetns()
	if !rerun {
		testutil.NeedsRoot(t)
		testutil.RunTestInOwnNetns(t, name, 120*time.Second)
		return false
	}
	if !isolated {
		t.Fatal("the child is in its parent's network namespace: it does not configure that one's loopback")
	}
	if err := setUpTestNetns(); err != nil {
		t.Fatalf("set up the namespace: %v", err)
	}
	return true
}

// serveZoneUDP answers DNS queries to nsServer:53 from z, until the test
// ends (in a namespace of inOwnNetnsChild).
func serveZoneUDP(t *testing.T, z *zoneDialer) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", netip.AddrPortFrom(nsServer, 53).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(z.answer(buf[:n]), from)
		}
	}()
}
