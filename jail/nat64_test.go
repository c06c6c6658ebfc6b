package jail

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNAT64Prefixes(t *testing.T) {
	for _, c := range []struct {
		answer, want string
	}{
		{"2001:db8:64::c000:aa", "2001:db8:64::/96"},
		{"2001:db8:64::c000:ab", "2001:db8:64::/96"},
		{"64:ff9b::c000:aa", "64:ff9b::/96"},
		{"2001:db8:122:344:c0:0:aa00:0", "2001:db8:122:344::/64"},
		{"2001:db8:c000:aa::", "2001:db8::/32"},
		{"2001:db8::1", ""}, // no well-known address in it: no prefix
	} {
		got := NAT64Prefixes([]netip.Addr{netip.MustParseAddr(c.answer)})
		if c.want == "" {
			if len(got) != 0 {
				t.Errorf("%s: %v, want none", c.answer, got)
			}
			continue
		}
		if len(got) != 1 || got[0].String() != c.want {
			t.Errorf("%s: %v, want %s", c.answer, got, c.want)
		}
	}
}

// finderProbe is a nat64Finder whose lookups the test answers.
type finderProbe struct {
	d       *nat64Finder
	lookups chan chan lookupAnswer // each lookup asks here for its answer
	calls   atomic.Int32
	found   chan foundCall
}

type lookupAnswer struct {
	prefixes []netip.Prefix
	ok       bool
}

type foundCall struct {
	prefixes []netip.Prefix
	latest   bool
}

func newFinderProbe(timeout time.Duration) *finderProbe {
	p := &finderProbe{lookups: make(chan chan lookupAnswer, 16), found: make(chan foundCall, 16)}
	p.d = &nat64Finder{
		lookup: func(ctx context.Context) ([]netip.Prefix, bool) {
			p.calls.Add(1)
			ans := make(chan lookupAnswer, 1)
			p.lookups <- ans
			select {
			case a := <-ans:
				return a.prefixes, a.ok
			case <-ctx.Done():
				return nil, false
			}
		},
		found:   func(pr []netip.Prefix, latest bool) { p.found <- foundCall{pr, latest} },
		timeout: timeout,
	}
	return p
}

// next returns the answer channel of the next lookup.
func (p *finderProbe) next(t *testing.T) chan lookupAnswer {
	t.Helper()
	select {
	case a := <-p.lookups:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("no lookup started")
		return nil
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the discovery never ended", what)
	}
}

var testPrefix = netip.MustParsePrefix("2001:db8:64::/96")

// Concurrent callers share one discovery; its answer is taken before any
// of them is let go; later callers get the ended discovery, no new query.
func TestNAT64FinderOnce(t *testing.T) {
	p := newFinderProbe(5 * time.Second)
	if p.calls.Load() != 0 {
		t.Fatal("a lookup before anyone asked")
	}
	chans := make(chan (<-chan struct{}), 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); chans <- p.d.ready() }()
	}
	wg.Wait()
	close(chans)
	var first <-chan struct{}
	for ch := range chans {
		if first == nil {
			first = ch
		}
		if ch != first {
			t.Fatal("concurrent callers got different discoveries")
		}
	}
	ans := p.next(t)
	if isClosed(first) {
		t.Fatal("the discovery ended before the resolver answered")
	}
	ans <- lookupAnswer{[]netip.Prefix{testPrefix}, true}
	waitClosed(t, first, "after the answer")
	select {
	case f := <-p.found:
		if !f.latest || len(f.prefixes) != 1 || f.prefixes[0] != testPrefix {
			t.Errorf("found %v latest %v, want %v latest", f.prefixes, f.latest, testPrefix)
		}
	default:
		t.Error("the waiters were let go before the answer was taken")
	}
	if ch := p.d.ready(); !isClosed(ch) {
		t.Error("a later caller waits again")
	}
	if n := p.calls.Load(); n != 1 {
		t.Errorf("%d lookups, want 1", n)
	}
}

// A resolver that does not answer: the discovery ends at its timeout,
// with no answer taken (the prefixes stay as they were), and is not
// retried until a reset.
func TestNAT64FinderTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	p := newFinderProbe(timeout)
	t0 := time.Now()
	ch := p.d.ready()
	p.next(t) // never answered
	waitClosed(t, ch, "a silent resolver")
	if d := time.Since(t0); d < timeout {
		t.Errorf("ended after %v, before the timeout %v", d, timeout)
	}
	select {
	case f := <-p.found:
		t.Errorf("a timed-out discovery gave an answer: %v", f)
	default:
	}
	if ch := p.d.ready(); !isClosed(ch) || p.calls.Load() != 1 {
		t.Errorf("asked again after a timeout (%d lookups), want the next after a reset", p.calls.Load())
	}
}

// After a reset the next caller starts a new discovery; a failed one
// leaves the prefixes alone (no answer taken); a discovery a reset
// overtook still lets its waiters go, its answer marked not latest.
func TestNAT64FinderReset(t *testing.T) {
	p := newFinderProbe(5 * time.Second)
	ch1 := p.d.ready()
	p.next(t) <- lookupAnswer{[]netip.Prefix{testPrefix}, true}
	waitClosed(t, ch1, "first")
	<-p.found

	p.d.reset()
	if p.calls.Load() != 1 {
		t.Fatal("a reset asked by itself")
	}
	ch2 := p.d.ready()
	if ch2 == ch1 || isClosed(ch2) {
		t.Fatal("after a reset the caller did not wait for a new discovery")
	}
	ans2 := p.next(t)
	p.d.reset() // the network changed again while asking
	ch3 := p.d.ready()
	ans3 := p.next(t)
	ans2 <- lookupAnswer{[]netip.Prefix{netip.MustParsePrefix("2001:db8:aa::/96")}, true}
	waitClosed(t, ch2, "the overtaken discovery")
	if f := <-p.found; f.latest {
		t.Error("the overtaken discovery's answer is taken as the latest")
	}
	if isClosed(ch3) {
		t.Fatal("the new discovery ended with the old one")
	}
	ans3 <- lookupAnswer{nil, false} // the resolver fails
	waitClosed(t, ch3, "a failed discovery")
	select {
	case f := <-p.found:
		t.Errorf("a failed discovery gave an answer: %v", f)
	default:
	}
	if n := p.calls.Load(); n != 3 {
		t.Errorf("%d lookups, want 3", n)
	}

	p.d.close()
	if ch := p.d.ready(); isClosed(ch) || p.calls.Load() != 3 {
		t.Error("a closed finder still asks, or lets a flow go (its answer is not in force)")
	}
}

// The prefix set: the latest answer replaces it (also by none: the host
// left the NAT64 network), an overtaken one only adds to it.
func TestNextNAT64(t *testing.T) {
	a, b := testPrefix, netip.MustParsePrefix("2001:db8:bb::/96")
	for _, c := range []struct {
		cur, found []netip.Prefix
		latest     bool
		want       []netip.Prefix
	}{
		{nil, []netip.Prefix{a}, true, []netip.Prefix{a}},
		{[]netip.Prefix{a}, []netip.Prefix{b}, true, []netip.Prefix{b}},
		{[]netip.Prefix{a}, nil, true, nil},
		{[]netip.Prefix{a}, []netip.Prefix{b}, false, []netip.Prefix{a, b}},
		{[]netip.Prefix{a}, []netip.Prefix{a}, false, []netip.Prefix{a}},
		{[]netip.Prefix{a}, nil, false, []netip.Prefix{a}},
	} {
		if got := nextNAT64(c.cur, c.found, c.latest); !slices.Equal(got, c.want) {
			t.Errorf("nextNAT64(%v, %v, %v) = %v, want %v", c.cur, c.found, c.latest, got, c.want)
		}
	}
}

// baseDeps is what a NAT64 answer depends on, for a host on 10.0.0.0/24.
func baseDeps() nat64Deps {
	d := nat64Deps{
		known:    true,
		links:    []string{"1 lo up running", "2 eth0 up running"},
		addrs:    []string{"1 127.0.0.1/8", "2 10.0.0.5/24", "2 2001:db8:1::5/64"},
		defaults: []string{"table 254 family 2 default type 1 via 10.0.0.1 dev 2 metric 100", "table 254 family 10 default type 1 via fe80::1 dev 2 metric 1024"},
		routed:   []string{"10.0.0.5/32", "127.0.0.0/8"},
		resolv:   "nameserver 10.0.0.53\n",
	}
	d.sort() // as read
	return d
}

// A live re-read of the host keeps the NAT64 answer (the next IPv6 flow
// goes on with no new query) when nothing it may depend on changed, and
// drops it (the next IPv6 flow waits for a new query) when the host's
// addresses, links, default routes or resolvers changed, and when in
// doubt: notifications lost, a read incomplete or failed, a discovery
// that overlapped the notifications.
func TestNAT64KeptUntilNetworkChanges(t *testing.T) {
	type host struct {
		deps nat64Deps
		err  error
	}
	for _, c := range []struct {
		name   string
		change func(d *nat64Deps) // the host's network at the re-read
		read   error              // the re-read fails
		lost   bool               // notifications were lost
		before bool               // the notifications came while the discovery ran
		answer bool               // the re-read after a NAT64 answer, not the watch's
		keep   bool
	}{
		{name: "nothing changed", change: func(*nat64Deps) {}, keep: true},
		{name: "nothing changed, after an answer", change: func(*nat64Deps) {}, answer: true, keep: true},
		{name: "dumped in another order", change: func(d *nat64Deps) {
			slices.Reverse(d.links)
			slices.Reverse(d.addrs)
			slices.Reverse(d.defaults)
			d.sort()
		}, keep: true},
		{name: "address changed", change: func(d *nat64Deps) { d.addrs[1] = "2 10.0.0.6/24" }},
		{name: "address added", change: func(d *nat64Deps) { d.addrs = append(d.addrs, "2 2001:db8:2::5/64"); d.sort() }},
		{name: "address removed", change: func(d *nat64Deps) { d.addrs = d.addrs[:2] }},
		{name: "address moved to another link", change: func(d *nat64Deps) {
			d.links = append(d.links, "3 wlan0 up running")
			d.addrs[1] = "3 10.0.0.5/24"
			d.sort()
		}},
		{name: "link down", change: func(d *nat64Deps) { d.links[1] = "2 eth0 down -" }},
		{name: "link lost carrier", change: func(d *nat64Deps) { d.links[1] = "2 eth0 up -" }},
		{name: "default gateway changed", change: func(d *nat64Deps) {
			d.defaults[0] = "table 254 family 2 default type 1 via 10.0.0.254 dev 2 metric 100"
		}},
		{name: "default route added (a VPN's halves)", change: func(d *nat64Deps) {
			d.defaults = append(d.defaults, "table 254 family 2 0.0.0.0/1 type 1 via <nil> dev 4 metric 0")
			d.sort()
		}},
		{name: "IPv6 default route removed", change: func(d *nat64Deps) { d.defaults = d.defaults[:1] }},
		{name: "routed destination added", change: func(d *nat64Deps) { d.routed = append(d.routed, "172.16.0.0/12"); d.sort() }},
		{name: "resolvers changed", change: func(d *nat64Deps) { d.resolv = "nameserver 10.0.0.54\n" }},
		{name: "resolvers changed, after an answer", change: func(d *nat64Deps) { d.resolv = "nameserver 10.0.0.54\n" }, answer: true},
		{name: "read incomplete", change: func(d *nat64Deps) { d.known = false }},
		{name: "read failed", read: errors.New("netlink: no buffer space")},
		{name: "notifications lost", change: func(*nat64Deps) {}, lost: true},
		{name: "notifications during the discovery", change: func(*nat64Deps) {}, before: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			facts := HostFacts{Connected: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, deps: baseDeps()}
			setup, err := Prepare(facts, nil)
			if err != nil {
				t.Fatal(err)
			}
			j := New(setup, Options{})
			defer j.n64.close()
			var calls atomic.Int32
			j.n64.lookup = func(context.Context) ([]netip.Prefix, bool) {
				calls.Add(1)
				return nil, true // no DNS64: the policy stays as it is
			}
			var mu sync.Mutex
			now := host{deps: baseDeps()}
			j.readHost = func() (HostFacts, error) {
				mu.Lock()
				defer mu.Unlock()
				f := facts
				f.deps = now.deps
				return f, now.err
			}

			// The sandbox's first IPv6 flow.
			t0 := time.Now()
			waitClosed(t, j.n64.ready(), "first flow")
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d lookups for the first flow, want 1", n)
			}

			mu.Lock()
			if c.change != nil {
				c.change(&now.deps)
			}
			now.err = c.read
			mu.Unlock()
			change := &hostChange{since: time.Now(), lost: c.lost}
			if c.before {
				change.since = t0
			}
			if c.answer {
				change = nil
			}
			j.refresh([]string{"test"}, change)

			ch := j.n64.ready()
			if c.keep {
				if !isClosed(ch) || calls.Load() != 1 {
					t.Fatalf("the next IPv6 flow waits for a new query (%d lookups), want the answer kept", calls.Load())
				}
			} else {
				waitClosed(t, ch, "after the change")
				if n := calls.Load(); n != 2 {
					t.Fatalf("%d lookups, want the answer dropped and asked again", n)
				}
			}
			// Steady from now on: the same network again keeps the answer.
			if c.read == nil && now.deps.known {
				j.refresh([]string{"test again"}, &hostChange{since: time.Now()})
				if n := calls.Load(); !isClosed(j.n64.ready()) || calls.Load() != n {
					t.Errorf("a second re-read of the same network dropped the answer")
				}
			}
		})
	}
}

// A discovery under way when the jail closes lets none of its waiters go
// (its answer is never put in force: they would leave under the policy
// before it); the stack, closed next, refuses them.
func TestNAT64FinderCloseHoldsWaiters(t *testing.T) {
	p := newFinderProbe(5 * time.Second)
	ch := p.d.ready()
	ans := p.next(t)
	p.d.close()
	ans <- lookupAnswer{[]netip.Prefix{testPrefix}, true}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.d.mu.Lock()
		running := p.d.running
		p.d.mu.Unlock()
		if running == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the run's last steps, if it went on
	if isClosed(ch) {
		t.Fatal("a discovery that ended after close let its waiters go")
	}
	select {
	case f := <-p.found:
		t.Fatalf("an answer taken after close: %v", f)
	default:
	}
}

// The gate is there also when the host had no IPv6 at launch (the
// sandbox gets no IPv6 address): an allowed name may still be dialed at
// an IPv6 address on the host's side, after the host gains IPv6.
func TestIPv6GateWithoutIPv6AtLaunch(t *testing.T) {
	setup, err := Prepare(HostFacts{Connected: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if setup.Addr6.IsValid() {
		t.Fatal("the test wants a host without IPv6")
	}
	j := New(setup, Options{})
	defer j.n64.close()
	if j.ipv6Ready() == nil {
		t.Fatal("no IPv6 gate for a sandbox launched without IPv6")
	}
}
