package jail

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// The host's NAT64 prefix (RFC 7050): a resolver doing DNS64 answers the
// AAAA query for ipv4only.arpa (which has only A records, 192.0.0.170 and
// 192.0.0.171) with those addresses embedded under the network's NAT64
// prefix. When that prefix is a network-specific one, the embedded forms
// of every blocked IPv4 range under it are blocked too (the well-known
// 64:ff9b::/96 always is).
//
// The jail asks lazily and without a gap: nothing is asked until the
// sandbox's first flow to an IPv6 destination the policy allows (the
// userstack's IPv6 gate, userstack.Config.IPv6Ready). That flow, and any
// other one meanwhile, waits for the answer (one query for all of them,
// bounded by nat64Timeout), and is then checked against the policy the
// answer gave. A sandbox that never makes such a flow sends no query.
// When the resolver does not answer in time (or fails), the flows go on
// under the prefixes known so far (none at first: only 64:ff9b::/96 is
// blocked then), and the next discovery is due after the next change of
// the host's network.
//
// A change of the host's network drops the answer: the next IPv6 flow
// asks again, while the prefixes found so far stay blocked until a new
// answer replaces them. A change is one that may change the answer: at
// each re-read of the host (the live watch's, after rtnetlink
// notifications, and the one after an answer), what the answer may
// depend on (nat64Deps: the host's links and whether they are up, its
// addresses, its default routes, its routed destinations and its
// resolv.conf) is compared with the previous read. Notifications that
// change none of it (an address's lifetime refreshed, a route announced
// again unchanged, a link's MTU) keep the answer. When in doubt the
// answer is dropped: the re-read failed or was incomplete, notifications
// were lost, the launch's read is unknown, or a discovery was under way
// or ended just before the notifications came (nat64Settle: it may have
// seen the network in the middle of a change that the re-read no longer
// shows).

// nat64Timeout bounds one discovery: the query and the policy's update.
const nat64Timeout = 3 * time.Second

// nat64Settle is how long before the notifications that woke the live
// watch a discovery's end still counts as overlapping them (the watch
// wakes later than the change it learns of: the scheduler's delay).
const nat64Settle = time.Second

// nat64ResolvConf is the file the resolver of lookupNAT64 (Go's) reads.
const nat64ResolvConf = "/etc/resolv.conf"

// nat64Name is the well-known name of RFC 7050.
const nat64Name = "ipv4only.arpa"

// wellKnownV4 are the addresses ipv4only.arpa has.
var wellKnownV4 = []netip.Addr{netip.MustParseAddr("192.0.0.170"), netip.MustParseAddr("192.0.0.171")}

// nat64Lengths are the prefix lengths RFC 6052 allows, longest first.
var nat64Lengths = []int{96, 64, 56, 48, 40, 32}

// NAT64Prefixes returns the NAT64 prefixes the synthesized AAAA answers
// for ipv4only.arpa reveal: for each answer, the prefix under which one
// of the well-known addresses sits at an RFC 6052 position.
func NAT64Prefixes(answers []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range answers {
		if !a.Is6() || a.Is4In6() {
			continue
		}
		b := a.As16()
		for _, l := range nat64Lengths {
			var v4 [4]byte
			pos := l / 8
			for i := range v4 {
				if pos == 8 {
					pos++
				}
				v4[i] = b[pos]
				pos++
			}
			if l < 96 && b[8] != 0 {
				continue // the u octet must be zero
			}
			if !slices.Contains(wellKnownV4, netip.AddrFrom4(v4)) {
				continue
			}
			p := netip.PrefixFrom(a, l).Masked()
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
			break
		}
	}
	return out
}

// lookupNAT64 asks the host's resolver (as /etc/resolv.conf names it) for
// the AAAA records of ipv4only.arpa. ok reports an answer: prefixes, or
// none (the name has no AAAA record: no DNS64); a failure or a timeout
// is no answer.
func lookupNAT64(ctx context.Context) (prefixes []netip.Prefix, ok bool) {
	r := &net.Resolver{PreferGo: true}
	ips, err := r.LookupNetIP(ctx, "ip6", nat64Name)
	if err != nil {
		var de *net.DNSError
		return nil, errors.As(err, &de) && de.IsNotFound
	}
	return NAT64Prefixes(ips), true
}

// nat64Finder runs the discovery on demand: once for all the callers of
// ready until reset.
type nat64Finder struct {
	// lookup asks the resolver (lookupNAT64; tests give their own).
	lookup func(ctx context.Context) ([]netip.Prefix, bool)
	// found takes an answer (before the waiters are let go): latest is
	// false for a discovery that a reset overtook.
	found   func(prefixes []netip.Prefix, latest bool)
	timeout time.Duration

	mu      sync.Mutex
	done    chan struct{} // the current discovery's; nil: none since the last reset
	closed  bool
	runs    int       // discoveries started (tests)
	running int       // discoveries under way
	ended   time.Time // when the last one ended
}

// ranSince reports a discovery under way, or one that ended after t.
func (d *nat64Finder) ranSince(t time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running > 0 || (!d.ended.IsZero() && d.ended.After(t))
}

// ready returns a channel that is closed when the current discovery has
// ended, starting one if there is none. It never blocks (the userstack
// calls it on its packet loop).
func (d *nat64Finder) ready() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		// Never opens: a flow still waiting when the jail closes ends
		// with the stack (refused), never let go under an old policy.
		return neverOpen
	}
	if d.done == nil {
		d.done = make(chan struct{})
		d.runs++
		d.running++
		go d.run(d.done)
	}
	return d.done
}

func (d *nat64Finder) run(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	prefixes, ok := d.lookup(ctx)
	d.mu.Lock()
	latest, closed := d.done == done, d.closed
	d.running--
	d.ended = time.Now()
	d.mu.Unlock()
	if closed {
		// The answer is not put in force: its waiters must not go on
		// either. They end with the stack, which closes next.
		return
	}
	if ok {
		d.found(prefixes, latest)
	}
	close(done)
}

// neverOpen is the gate of a closed finder.
var neverOpen = make(chan struct{})

// reset drops the current discovery's result: the next ready starts a
// new one. A discovery under way still ends and lets its waiters go.
func (d *nat64Finder) reset() {
	d.mu.Lock()
	d.done = nil
	d.mu.Unlock()
}

// close ends the discoveries: from now on the gate never opens (the
// stack, closed next, refuses the flows still waiting), and a discovery
// under way lets nobody go.
func (d *nat64Finder) close() {
	d.mu.Lock()
	d.closed = true
	d.done = nil
	d.mu.Unlock()
}

// nextNAT64 is the set of NAT64 prefixes after an answer: the latest
// answer replaces the set (the host's network is what it says now), an
// answer a reset overtook (of the network before a change) only adds to
// it: the set never shrinks until the current network has answered.
func nextNAT64(cur, found []netip.Prefix, latest bool) []netip.Prefix {
	if latest {
		return slices.Clone(found)
	}
	out := slices.Clone(cur)
	for _, p := range found {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// useNAT64 takes a discovery's answer and, when it changes the prefixes,
// rebuilds the policy with them (before the flows that waited go on).
func (j *Jail) useNAT64(found []netip.Prefix, latest bool) {
	if j.closed.Load() {
		return
	}
	j.mu.Lock()
	old := j.nat64
	j.nat64 = nextNAT64(old, found, latest)
	now := j.nat64
	j.mu.Unlock()
	if slices.Equal(old, now) {
		return
	}
	names := "none"
	if len(now) > 0 {
		var s []string
		for _, p := range now {
			s = append(s, p.String())
		}
		names = strings.Join(s, ", ")
	}
	j.refresh([]string{"host's NAT64 prefixes discovered (RFC 7050): " + names}, nil)
}

// nat64Deps is what of the host's network the NAT64 answer may depend on,
// as far as the jail can see it (discoverNetwork reads it): the links,
// up or not; the addresses, by link; the default routes (and the routes
// as wide, halves of a default route), with their gateways, interfaces
// and metrics; the destinations routed otherwise; and the resolv.conf
// the resolver reads. Each list is sorted: the order of a dump is no
// change.
type nat64Deps struct {
	known    bool // false: not read, or not completely
	links    []string
	addrs    []string
	defaults []string
	routed   []string
	resolv   string
}

func (d *nat64Deps) sort() {
	for _, l := range [][]string{d.links, d.addrs, d.defaults, d.routed} {
		slices.Sort(l)
	}
}

// same reports two reads known to be alike.
func (d nat64Deps) same(e nat64Deps) bool {
	return d.known && e.known && slices.Equal(d.links, e.links) && slices.Equal(d.addrs, e.addrs) &&
		slices.Equal(d.defaults, e.defaults) && slices.Equal(d.routed, e.routed) && d.resolv == e.resolv
}

// hostChange is what prompts a re-read of the host by the live watch:
// rtnetlink notifications about changes made at since or later; lost:
// some of them were lost.
type hostChange struct {
	since time.Time
	lost  bool
}

// checkNAT64 drops the NAT64 answer when the host's network may have
// changed it (see the top of this file): now is the re-read's, c its
// cause (nil: a re-read not prompted by notifications). Called with j.upd
// held.
func (j *Jail) checkNAT64(now nat64Deps, c *hostChange) {
	var why string
	switch {
	case !j.deps.known || !now.known:
		why = "host network not read completely"
	case !now.same(j.deps):
		why = "host network changed"
	case c == nil:
	case c.lost:
		why = "notifications lost"
	case j.n64.ranSince(c.since):
		why = "a discovery overlapped the change"
	}
	j.deps = now
	if why != "" {
		j.n64.reset()
		j.debug("NAT64 answer dropped", "why", why)
	}
}
