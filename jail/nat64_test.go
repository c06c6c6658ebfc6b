package jail

import (
	"context"
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
	if ch := p.d.ready(); !isClosed(ch) || p.calls.Load() != 3 {
		t.Error("a closed finder still asks")
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
