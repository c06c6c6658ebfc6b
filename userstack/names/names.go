// Package names is the egress stack's half of the domain allowlist: the
// synthetic address pool (one address per name for the stack's life,
// never reused), the host-side resolver's cache with its single flight,
// the background lookups, and the DNS server the sandbox's resolv.conf
// names (dns.go) with its client of the host's resolver; and it hands
// the relay the first-bytes decision of each TCP flow to a name (package
// inspect's [inspect.Peek] and [inspect.Watch]). It holds no pointer to
// the stack: the embedder builds it ([New]) and gives it to the stack's
// Config.Names (it is a userstack.NameService), and what it needs of the
// stack comes in [Deps] when the stack attaches it ([Names.Attach]). The
// stack does not import this package.
package names

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/userstack/inspect"
	"github.com/claude-sandbox/claude-sandbox/userstack/relayapi"
)

// The domain allowlist (issue 17): the stack decides flows by the name
// the sandbox asked for, not by the address it dials.
//
// With Config.Names set, the stack answers the sandbox's DNS itself
// (dns.go): a query for an allowed name is resolved on the host side and
// answered with a synthetic address from a reserved pool, one per name
// for the stack's life and never reused for another; a query for any
// other name is answered NXDOMAIN and never leaves the stack. A flow to a
// synthetic address maps back to its name; the rules decide the name and
// port, and at connect time the name is resolved again on the host side
// and the first address the policy does not block is dialed (an allowed
// name that resolves into a private range stays refused: no DNS
// rebinding into the host's network). A TCP flow to a name is dialed at
// its SYN, as a flow to an address is, but nothing the sandbox sends
// reaches the host before its first bytes are seen (package userstack's peek.go): a TLS
// ClientHello's SNI, or an HTTP request's Host, must be the flow's name. Everything else on the
// internet (an IP literal) is refused unless an allow-ip/allow-cidr entry
// names it: default-deny.

// Rules is the domain allowlist the stack enforces; a
// *netpolicy.Domains is one.
type Rules interface {
	// AllowName reports whether name may be resolved at all.
	AllowName(name string) (ok bool, rule string)
	// Allow reports whether a connection to name on port may be made.
	Allow(name string, port uint16) (ok bool, rule string)
}

// The synthetic address pools.
//
// IPv4: 198.18.0.0/15, the benchmarking range (RFC 2544, RFC 6890): not
// globally routed, never a real destination on the internet, and not in
// any range the jail or its lab uses (the jail's own addresses are the
// documentation /24s, 192.0.2.0/24 and its fallbacks). 131070 names.
//
// IPv6: 2001:2::/64, the first /64 of the IPv6 benchmarking range
// 2001:2::/48 (RFC 5180), for the same reasons. A unique-local prefix
// would do too, but fc00::/7 is a blocked destination range (routes to
// the sink and the tun0 filter refuse it), and the pool must reach the
// stack over tun0 like the internet does.
//
// The jail passes the pools to netpolicy as allow-cidr entries, so the
// kernel routes punch them to tun0 even when the host routes the
// benchmarking range somewhere (a more specific host route is internal,
// and would otherwise send the pool to the sink).
var (
	DefaultPool4 = netip.MustParsePrefix("198.18.0.0/15")
	DefaultPool6 = netip.MustParsePrefix("2001:2::/64")
)

// DefaultPeekTimeout is how long a TCP flow to a name waits for the
// sandbox's first bytes before it is dialed anyway (a protocol in which
// the server speaks first: SSH, SMTP, a database's greeting). A quarter
// of a second: far above the time a client takes to send its ClientHello
// or request once connected (microseconds on the TUN), short enough that
// a client waiting for a banner does not notice it.
const DefaultPeekTimeout = 250 * time.Millisecond

// Config turns the domain allowlist on (the stack's Config.Names).
type Config struct {
	// Rules decide names and ports (required).
	Rules Rules
	// Pool4 and Pool6 are the synthetic address pools; zero: DefaultPool4,
	// DefaultPool6. Pool4 must hold at least 4 addresses, Pool6 be /64 or
	// wider.
	Pool4, Pool6 netip.Prefix
	// NoIPv6: AAAA queries get an empty answer (the sandbox has no IPv6
	// route: a synthetic IPv6 address would only make it wait).
	NoIPv6 bool
	// PeekTimeout: see DefaultPeekTimeout; zero: the default.
	PeekTimeout time.Duration
}

// Names is the stack's half of the allowlist: the pool, the host-side
// resolver's cache with its single flight, the background lookups and
// the DNS server (dns.go). Safe for concurrent use.
type Names struct {
	deps  Deps // set by Attach, before any flow
	rules Rules
	cfg   Config

	mu       sync.Mutex
	attached bool
	byName   map[string]*nameEntry
	byAddr   map[netip.Addr]*nameEntry
	next4    uint32 // offset of the next IPv4 address in Pool4
	next6    uint64 // offset of the next IPv6 address in Pool6
	cache    map[cacheKey]cacheEntry
	// lookups are the upstream lookups under way, one per name and type:
	// whoever needs the same answer meanwhile waits for it.
	lookups map[cacheKey]*lookupCall

	dnsSlots    chan struct{} // queries being answered at once
	dnsTCPSlots chan struct{} // TCP connections to the resolver being served
	bgSlots     chan struct{} // background lookups under way (prefetch, a UDP flow to a name)
}

// Deps is what the names side takes from the stack, given when the stack
// attaches it ([Names.Attach]).
type Deps = relayapi.Deps

// lookupCall is one lookup upstream under way; done is closed once its
// result is set.
type lookupCall struct {
	done  chan struct{}
	addrs []netip.Addr
	rcode dnsmessage.RCode
	err   error
}

type nameEntry struct {
	name   string
	v4, v6 netip.Addr
}

type cacheKey struct {
	name  string
	qtype dnsmessage.Type
}

type cacheEntry struct {
	addrs   []netip.Addr
	rcode   dnsmessage.RCode
	err     error // the lookup failed (no answer from upstream): cached for dnsFailTTL
	ttl     uint32
	expires time.Time
}

// TTLMin is the least time, in seconds, an upstream answer is cached:
// an answer with TTL 0 would expire as it is written, and every datagram
// of a UDP flow to the name (which waits for a fresh answer, never
// upstream) would ask upstream again without ever being relayed.
const TTLMin = 5

// dnsNegTTL is how long, in seconds, an answer without addresses
// (NXDOMAIN, NODATA, SERVFAIL) or a failed lookup (a timeout, an
// unreachable upstream) is cached: a name whose AAAA lookup times out is
// not asked again for each datagram or query, and its A answer is used
// meanwhile.
const dnsNegTTL = 5

// MaxDNSInFlight bounds the sandbox's queries being resolved at once;
// more are dropped (the resolver library retries).
const MaxDNSInFlight = 64

// MaxBackgroundLookups bounds the lookups upstream that no query waits
// for (prefetch, a UDP flow to a name) under way at once; more are not started.
const MaxBackgroundLookups = 16

// MaxCachedAddrs bounds the addresses kept of one answer upstream (the
// first ones, in its order): an answer over TCP can carry ~4,000, for each
// of the cache's 4,096 entries.
const MaxCachedAddrs = 32

// New returns the names side for cfg, to give the stack (its
// Config.Names), which attaches it when it starts ([Names.Attach]).
func New(cfg Config) (*Names, error) {
	if cfg.Rules == nil {
		return nil, errors.New("the egress stack's domain allowlist has no rules")
	}
	if !cfg.Pool4.IsValid() {
		cfg.Pool4 = DefaultPool4
	}
	if !cfg.Pool6.IsValid() {
		cfg.Pool6 = DefaultPool6
	}
	if !cfg.Pool4.Addr().Is4() || cfg.Pool4.Bits() > 30 || !cfg.Pool6.Addr().Is6() || cfg.Pool6.Addr().Is4In6() || cfg.Pool6.Bits() > 64 {
		return nil, fmt.Errorf("the egress stack's synthetic address pools %v and %v: want an IPv4 /30 or wider and an IPv6 /64 or wider", cfg.Pool4, cfg.Pool6)
	}
	cfg.Pool4, cfg.Pool6 = cfg.Pool4.Masked(), cfg.Pool6.Masked()
	if cfg.PeekTimeout <= 0 {
		cfg.PeekTimeout = DefaultPeekTimeout
	}
	return &Names{
		rules: cfg.Rules, cfg: cfg,
		byName:      map[string]*nameEntry{},
		byAddr:      map[netip.Addr]*nameEntry{},
		cache:       map[cacheKey]cacheEntry{},
		lookups:     map[cacheKey]*lookupCall{},
		dnsSlots:    make(chan struct{}, MaxDNSInFlight),
		dnsTCPSlots: make(chan struct{}, MaxDNSTCPConns),
		bgSlots:     make(chan struct{}, MaxBackgroundLookups),
	}, nil
}

// Attach gives n what it needs of the stack that serves it (the stack
// calls it once, when it starts, before any flow). A Names serves one
// stack: a second Attach fails.
func (n *Names) Attach(deps Deps) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attached {
		return errors.New("the domain allowlist's names side is attached to a stack already")
	}
	n.attached = true
	n.deps = deps
	return nil
}

// inPool reports whether a is a synthetic address (handed out or not).
func (n *Names) inPool(a netip.Addr) bool {
	a = a.Unmap()
	return n.cfg.Pool4.Contains(a) || n.cfg.Pool6.Contains(a)
}

// MaxNames bounds the names given a synthetic address (a variable for the
// tests).
var MaxNames = 1 << 16

// errPoolFull: every address of a pool is taken.
var errPoolFull = errors.New("the synthetic address pool is exhausted")

// synthetic returns name's synthetic address of the family v6 asks for,
// allocating it on first use: stable for the stack's life, never given to
// another name.
func (n *Names) synthetic(name string, v6 bool) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.byName[name]
	if e == nil {
		// Entries are kept for the stack's life (an address is never
		// given to another name): a sandbox asking for name after name
		// under an allowed wildcard would grow the table without end.
		if len(n.byName) >= MaxNames {
			return netip.Addr{}, errTooManyNames
		}
		e = &nameEntry{name: name}
	}
	addr, alloc := &e.v4, n.alloc4
	if v6 {
		addr, alloc = &e.v6, n.alloc6
	}
	if !addr.IsValid() {
		a, err := alloc()
		if err != nil {
			return a, err // no entry left behind for a name with no address
		}
		*addr = a
		n.byAddr[a] = e
		n.byName[name] = e
	}
	return *addr, nil
}

// errTooManyNames: MaxNames names have a synthetic address already.
var errTooManyNames = errors.New("too many names")

// alloc4 takes the next IPv4 address of the pool, skipping the pool's
// first and last and every address ending in .0 or .255 (some software
// still takes them for network or broadcast addresses).
func (n *Names) alloc4() (netip.Addr, error) {
	size := uint32(1) << (32 - n.cfg.Pool4.Bits())
	base := n.cfg.Pool4.Addr().As4()
	b := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	for n.next4+1 < size-1 {
		n.next4++
		v := b + n.next4
		if last := byte(v); last == 0 || last == 255 {
			continue
		}
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
	}
	return netip.Addr{}, errPoolFull
}

// alloc6 takes the next IPv6 address of the pool (its interface
// identifier counts up from 1).
func (n *Names) alloc6() (netip.Addr, error) {
	if n.next6 == 1<<63 {
		return netip.Addr{}, errPoolFull
	}
	n.next6++
	a := n.cfg.Pool6.Addr().As16()
	v := n.next6
	for i := 15; i >= 8; i-- {
		a[i] |= byte(v)
		v >>= 8
	}
	return netip.AddrFrom16(a), nil
}

// nameOf maps a synthetic address back to its name.
func (n *Names) nameOf(a netip.Addr) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.byAddr[a.Unmap()]
	if e == nil {
		return "", false
	}
	return e.name, true
}

// Addr returns the synthetic address handed out for name (IPv6 when
// v6), if there is one. For tests and diagnostics.
func (n *Names) Addr(name string, v6 bool) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.byName[inspect.Canon(name)]
	if e == nil {
		return netip.Addr{}, false
	}
	if v6 {
		return e.v6, e.v6.IsValid()
	}
	return e.v4, e.v4.IsValid()
}

// cachedTTL returns what the cache holds, fresh, for name and t, and the
// TTL of its entry for them, fresh or not (0: none).
func (n *Names) cachedTTL(name string, t dnsmessage.Type) ([]netip.Addr, uint32) {
	now := n.deps.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.cache[cacheKey{name, t}]
	if ok && now.Before(e.expires) {
		return e.addrs, e.ttl
	}
	return nil, e.ttl
}

// lookup resolves name's records of type t (A or AAAA) through the
// upstream resolver, cached for their TTL (at least TTLMin, at most 5
// minutes; a failure or a negative answer for dnsNegTTL).
//
// One lookup per name and type is under way at a time: a caller that
// finds one waits for its result (or its own ctx) instead of asking
// upstream again, so a flood of queries or datagrams for a name the
// upstream is slow to answer costs one query upstream, not one each.
func (n *Names) lookup(ctx context.Context, name string, t dnsmessage.Type) ([]netip.Addr, dnsmessage.RCode, error) {
	key := cacheKey{name, t}
	now := n.deps.Now()
	n.mu.Lock()
	if e, ok := n.cache[key]; ok && now.Before(e.expires) {
		n.mu.Unlock()
		return e.addrs, e.rcode, e.err
	}
	if c := n.lookups[key]; c != nil {
		n.mu.Unlock()
		select {
		case <-c.done:
			return c.addrs, c.rcode, c.err
		case <-ctx.Done():
			return nil, dnsmessage.RCodeServerFailure, ctx.Err()
		}
	}
	c := &lookupCall{done: make(chan struct{})}
	n.lookups[key] = c
	n.mu.Unlock()
	c.addrs, c.rcode, c.err = n.lookupUpstream(ctx, key, now)
	n.mu.Lock()
	delete(n.lookups, key)
	n.mu.Unlock()
	close(c.done)
	return c.addrs, c.rcode, c.err
}

// lookupUpstream asks upstream for key and caches what it answered.
func (n *Names) lookupUpstream(ctx context.Context, key cacheKey, now time.Time) ([]netip.Addr, dnsmessage.RCode, error) {
	addrs, ttl, rcode, err := n.resolveUpstream(ctx, key.name, key.qtype)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller gave up (or the stack closes): not the upstream's
		// answer, nothing to cache.
		return nil, dnsmessage.RCodeServerFailure, err
	case err != nil:
		addrs, ttl, rcode = nil, dnsNegTTL, dnsmessage.RCodeServerFailure
	case len(addrs) == 0:
		ttl = dnsNegTTL
	default:
		ttl = max(min(ttl, dnsTTLMax), TTLMin)
	}
	n.mu.Lock()
	if len(n.cache) >= 4096 {
		for k, e := range n.cache { // drop the expired ones, or all
			if !now.Before(e.expires) || len(n.cache) >= 4096 {
				delete(n.cache, k)
			}
		}
	}
	n.cache[key] = cacheEntry{addrs: addrs, rcode: rcode, err: err, ttl: ttl, expires: now.Add(time.Duration(ttl) * time.Second)}
	n.mu.Unlock()
	return addrs, rcode, err
}

// background looks name's records of types up on a worker, for a cache
// no query waits on (prefetch, a UDP flow to a name): not when each is fresh or
// already being looked up, and not when MaxBackgroundLookups are under
// way (the trigger, a datagram or a query, comes again). fresh: every
// one of types was fresh in the cache, nothing was started.
func (n *Names) background(name string, types ...dnsmessage.Type) (fresh bool) {
	now := n.deps.Now()
	var want []dnsmessage.Type
	fresh = true
	n.mu.Lock()
	for _, t := range types {
		key := cacheKey{name, t}
		if e, ok := n.cache[key]; ok && now.Before(e.expires) {
			continue
		}
		fresh = false
		if n.lookups[key] != nil {
			continue
		}
		want = append(want, t)
	}
	n.mu.Unlock()
	if len(want) == 0 {
		return fresh
	}
	select {
	case n.bgSlots <- struct{}{}:
	default:
		return false
	}
	if !n.deps.Spawn(func() {
		defer func() { <-n.bgSlots }()
		for _, t := range want {
			n.lookup(n.deps.Ctx, name, t) //nolint:errcheck
		}
	}) {
		<-n.bgSlots
	}
	return false
}

// The admitter's side (package admission's Names interface).

// InPool reports whether a is a synthetic address (handed out or not).
func (n *Names) InPool(a netip.Addr) bool { return n.inPool(a) }

// NameOf maps a synthetic address handed out back to its name.
func (n *Names) NameOf(a netip.Addr) (string, bool) { return n.nameOf(a) }

// Allow is the rules' verdict on name and port.
func (n *Names) Allow(name string, port uint16) (bool, string) { return n.rules.Allow(name, port) }

// Cached returns name's addresses of a family (AAAA when v6) fresh in the
// cache, and the TTL of the cache's entry, fresh or not.
func (n *Names) Cached(name string, v6 bool) ([]netip.Addr, uint32) {
	return n.cachedTTL(name, qtype(v6))
}

// Background starts a lookup of name's records of a family on a worker
// unless they are fresh or being looked up; true: they were fresh.
func (n *Names) Background(name string, v6 bool) bool { return n.background(name, qtype(v6)) }

// Lookup resolves name's records of a family (may block; cached, one
// lookup per name and type at a time).
func (n *Names) Lookup(ctx context.Context, name string, v6 bool) ([]netip.Addr, error) {
	addrs, _, err := n.lookup(ctx, name, qtype(v6))
	return addrs, err
}

func qtype(v6 bool) dnsmessage.Type {
	if v6 {
		return dnsmessage.TypeAAAA
	}
	return dnsmessage.TypeA
}

// Pool4 is the IPv4 synthetic pool.
func (n *Names) Pool4() netip.Prefix { return n.cfg.Pool4 }

// FirstBytesMax bounds the first bytes a flow to a name holds before
// they are decided (inspect.Max).
func (n *Names) FirstBytesMax() int { return inspect.Max }

// NewPeek starts the first-bytes decision of a TCP flow to name (package
// inspect); waitMax bounds the wait for the rest of a ClientHello begun.
func (n *Names) NewPeek(name string, waitMax time.Duration) relayapi.Peek {
	p := inspect.NewPeek(name, waitMax)
	return &p
}

// NewWatch starts watching a flow to name let through before its first
// message was seen, first being what its client sent so far (kept).
func (n *Names) NewWatch(name string, first []byte) relayapi.Watch {
	return inspect.NewWatch(name, first)
}

// PeekTimeout is how long a TCP flow to a name waits for its first bytes.
func (n *Names) PeekTimeout() time.Duration { return n.cfg.PeekTimeout }

// Held returns how many names have a synthetic address and how many
// addresses are handed out. For tests.
func (n *Names) Held() (names, addrs int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.byName), len(n.byAddr)
}

// MostCached returns the most addresses the cache holds for one name and
// type. For tests.
func (n *Names) MostCached() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	most := 0
	for _, e := range n.cache {
		most = max(most, len(e.addrs))
	}
	return most
}

// dedupAddrs drops repeated addresses, keeping the upstream order.
func dedupAddrs(in []netip.Addr) []netip.Addr {
	out := in[:0]
	for _, a := range in {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
