package netpolicy

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
)

// Proto is the transport protocol of a flow.
type Proto uint8

// Protocols a flow can use.
const (
	ProtoTCP Proto = iota + 1
	ProtoUDP
	ProtoICMP
)

// String returns "tcp", "udp", "icmp" or "proto(N)".
func (p Proto) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMP:
		return "icmp"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// MarshalText encodes the protocol as its String form.
func (p Proto) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText decodes "tcp", "udp" or "icmp".
func (p *Proto) UnmarshalText(b []byte) error {
	switch string(b) {
	case "tcp":
		*p = ProtoTCP
	case "udp":
		*p = ProtoUDP
	case "icmp":
		*p = ProtoICMP
	default:
		return fmt.Errorf("unknown protocol %q", b)
	}
	return nil
}

// DNSPort is the only port a DNS punch opens.
const DNSPort = 53

// Verdict is the answer of [Policy.Check].
type Verdict struct {
	Allowed bool
	// Rule says which rule decided, for logs and error messages only, e.g.
	// "private range 10.0.0.0/8", "allow-ip 10.1.2.3", "dns resolver
	// 10.0.0.2:53" or "internet". Code given a Verdict decides on Kind
	// and Entry, not on this text.
	Rule string
	// Kind is what kind of rule decided.
	Kind VerdictKind
	// Entry is the prefix of the entry or built-in range that decided
	// (KindAllow, KindBlock): as configured, so for the IPv4-mapped and
	// NAT64 forms of an IPv4 entry it is the IPv4 prefix. Zero for the
	// other kinds.
	Entry netip.Prefix
	// ViaDefault: a block rule that is a host route through a default
	// route's gateway ([Config.ViaDefault]); Entry is that route. The
	// exit summary names those ([Block.ViaDefault]).
	ViaDefault bool
}

// ViaDefaultRoute returns the host route through a default route's
// gateway that refused the flow (v.ViaDefault), for [Block.ViaDefault];
// the zero prefix for any other verdict.
func (v Verdict) ViaDefaultRoute() netip.Prefix {
	if v.Allowed || !v.ViaDefault {
		return netip.Prefix{}
	}
	return v.Entry
}

// VerdictKind is what kind of rule decided a [Verdict].
type VerdictKind uint8

const (
	// KindRefused (the zero value): refused by no rule of the policy:
	// an invalid destination, or a verdict a caller made of its own.
	KindRefused VerdictKind = iota
	// KindBlock: a block rule (a built-in range, a connected subnet, a
	// host route, the fail-closed policy).
	KindBlock
	// KindAllow: an allow entry (allow-ip, allow-cidr).
	KindAllow
	// KindDNS: a DNS resolver's punch on port 53.
	KindDNS
	// KindInternet: no rule names the destination (Rule is RuleInternet).
	KindInternet
)

// RouteKind is what the kernel layer does with a prefix.
type RouteKind uint8

// Route kinds, in the order the kernel layer installs them.
const (
	// RouteBlock is a blocked range: the kernel layer routes it to the
	// jail's sink, whose reader records the attempt and refuses it.
	RouteBlock RouteKind = iota + 1
	// RoutePunch routes the prefix via the TUN device despite a wider
	// block.
	RoutePunch
)

// String returns "block" or "punch".
func (k RouteKind) String() string {
	switch k {
	case RouteBlock:
		return "block"
	case RoutePunch:
		return "punch"
	}
	return fmt.Sprintf("routekind(%d)", uint8(k))
}

// RouteEntry is one prefix of the kernel route plan.
type RouteEntry struct {
	Prefix netip.Prefix
	Kind   RouteKind
	// Reason is the rule the entry comes from (same wording as
	// [Verdict.Rule]).
	Reason string
}

// Config is everything a [Policy] is built from besides the built-in
// blocked ranges. The zero Config gives the default policy.
type Config struct {
	// ConnectedSubnets are the connected subnets of every host interface
	// (IPv4 and IPv6). Host bits are ignored (192.168.1.7/24 blocks
	// 192.168.1.0/24). Loopback subnets may be included; they are already
	// blocked.
	ConnectedSubnets []netip.Prefix
	// Allow are the allow entries: a single-address prefix (/32, /128) is
	// an allow-ip, anything wider an allow-cidr. Use [ParseAllow] to build
	// them from configuration strings.
	Allow []netip.Prefix
	// DNSResolvers are the resolver addresses the sandbox may reach on
	// port 53 (TCP and UDP), whatever range they sit in.
	DNSResolvers []netip.Addr
	// HostRoutes are the destinations the host reaches through anything
	// but its default routes: a more specific route, a VPN interface, a
	// container bridge, a policy-routing table. They are internal and
	// blocked (reason "host route ...") unless allowed.
	HostRoutes []netip.Prefix
	// ViaDefault are the HostRoutes whose route goes through a default
	// route's gateway (a static route, DHCP option 121): still internal,
	// the block's reason says so ([Verdict.ViaDefault]), as they are the ones
	// a user may know to be internet.
	ViaDefault []netip.Prefix
	// Internet are ranges the user says are internet (--internet-cidr):
	// a host route within one of them is not internal. It lifts nothing
	// else: a built-in range or a connected subnet stays blocked.
	Internet []netip.Prefix
	// NAT64 are network-specific NAT64 prefixes the host's resolver
	// synthesises AAAA records under (RFC 7050). The embedded form of
	// every blocked IPv4 range under each of them is blocked too.
	NAT64 []netip.Prefix
}

// Policy is an egress policy. It is safe for concurrent use. Its rules
// change only as a whole, atomically, through [Policy.Set]: every call
// sees one complete rule set, the old or the new.
type Policy struct {
	cur atomic.Pointer[ruleset]
}

// ruleset is one immutable generation of a Policy's rules.
type ruleset struct {
	gen uint64 // unique among the rule sets built (Policy.Generation)
	// rules sorted by prefix length, longest first; allow before block on
	// equal length. The first match decides.
	rules []rule
	dns   []netip.Addr
	nat64 []netip.Prefix // network-specific NAT64 prefixes, while building
}

func (p *Policy) load() *ruleset { return p.cur.Load() }

// generations numbers the rule sets built, from 1.
var generations atomic.Uint64

// Generation identifies the rule set in force: it changes with every
// [Policy.Set] of a policy built apart ([New], [FailClosed]), and two
// policies sharing a rule set (one Set from the other) have the same. A
// verdict got under one generation stands until it changes: a caller
// that keeps a decision (a UDP mapping's peers) keeps its generation and
// decides again when it differs.
func (p *Policy) Generation() uint64 { return p.load().gen }

// Set replaces p's rules with next's, atomically: flows checked from now
// on get next's verdicts. Later changes to next do not reach p.
func (p *Policy) Set(next *Policy) { p.cur.Store(next.load()) }

// FailClosed returns a policy that refuses every destination with the
// given reason (DNS included): what the jail switches to when it can no
// longer tell what is internal.
func FailClosed(reason string) *Policy {
	all4, all6 := netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")
	rs := &ruleset{rules: []rule{
		{prefix: all4, act: actBlock, reason: reason, entry: all4},
		{prefix: all6, act: actBlock, reason: reason, entry: all6},
	}, gen: generations.Add(1)}
	p := &Policy{}
	p.cur.Store(rs)
	return p
}

type action uint8

const (
	actBlock action = iota + 1
	actAllow
)

type rule struct {
	prefix netip.Prefix
	act    action
	reason string
	entry  netip.Prefix // the configured prefix prefix is a form of (Verdict.Entry)
	via    bool         // a host route through a default route's gateway (Verdict.ViaDefault)
}

type builtin struct {
	prefix string
	reason string
	act    action
}

// Built-in IPv4 blocks. Each is mirrored into the IPv4-mapped and NAT64
// well-known-prefix spaces.
var builtinV4 = []builtin{
	{"10.0.0.0/8", "private range", actBlock},
	{"172.16.0.0/12", "private range", actBlock},
	{"192.168.0.0/16", "private range", actBlock},
	{"100.64.0.0/10", "shared/CGNAT range", actBlock},
	{"169.254.0.0/16", "link-local/metadata", actBlock},
	{"127.0.0.0/8", "loopback", actBlock},
	{"0.0.0.0/8", "this-network", actBlock},
	{"224.0.0.0/4", "multicast", actBlock},
	{"240.0.0.0/4", "reserved", actBlock},
}

// Built-in IPv6 blocks.
var builtinV6 = []builtin{
	{"::1/128", "loopback", actBlock},
	{"::/128", "unspecified", actBlock},
	{"fc00::/7", "unique-local", actBlock},
	{"fe80::/10", "link-local", actBlock},
	{"fec0::/10", "site-local", actBlock},
	{"ff00::/8", "multicast", actBlock},
	// The local-use NAT64 prefix (RFC 8215): operators choose where the
	// IPv4 address is embedded inside it, so no per-range form can be
	// computed; the whole space is blocked. An allow-cidr reopens it.
	{"64:ff9b:1::/48", "nat64 local-use", actBlock},
}

var (
	mappedPrefix = netip.MustParsePrefix("::ffff:0:0/96")
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
)

// New builds a Policy from the built-in blocks and cfg. It fails on an
// invalid prefix or address in cfg, never silently dropping an entry.
func New(cfg Config) (*Policy, error) {
	p := &ruleset{}
	var errs []error
	for _, n := range cfg.NAT64 {
		if !n.IsValid() || !n.Addr().Is6() || n.Addr().Is4In6() || !slices.Contains([]int{32, 40, 48, 56, 64, 96}, n.Bits()) {
			errs = append(errs, fmt.Errorf("netpolicy: invalid NAT64 prefix %v (RFC 6052 allows /32, /40, /48, /56, /64, /96)", n))
			continue
		}
		n = n.Masked()
		if n != nat64Prefix && !slices.Contains(p.nat64, n) {
			p.nat64 = append(p.nat64, n)
		}
	}
	for _, b := range builtinV4 {
		pfx := netip.MustParsePrefix(b.prefix)
		p.addV4(pfx, b.act, b.reason+" "+pfx.String())
	}
	for _, b := range builtinV6 {
		pfx := netip.MustParsePrefix(b.prefix)
		p.add(pfx, b.act, b.reason+" "+pfx.String())
	}
	for _, s := range cfg.ConnectedSubnets {
		if !s.IsValid() {
			errs = append(errs, fmt.Errorf("invalid connected subnet %v", s))
			continue
		}
		s = unmapPrefix(s).Masked()
		p.addV4(s, actBlock, "connected subnet "+s.String())
	}
	var allowed []netip.Prefix
	for _, a := range cfg.Allow {
		if pfx, err := checkAllow(a); err == nil {
			allowed = append(allowed, pfx)
		}
	}
hostRoutes:
	for _, s := range cfg.HostRoutes {
		if !s.IsValid() {
			errs = append(errs, fmt.Errorf("netpolicy: invalid host route %v", s))
			continue
		}
		s = unmapPrefix(s).Masked()
		// An allow entry that covers the route wins: the user named
		// that destination, and a VPN's more specific route must not
		// take it back.
		for _, a := range slices.Concat(allowed, cfg.Internet) {
			a = unmapPrefix(a).Masked()
			if a.IsValid() && a.Addr().Is4() == s.Addr().Is4() && a.Bits() <= s.Bits() && a.Contains(s.Addr()) {
				continue hostRoutes
			}
		}
		// A route into a NAT64 prefix (a router's RFC 4191 route for
		// 64:ff9b::/96, on an IPv6-only network) is the way to the IPv4
		// internet, not to one network: each address under it is judged
		// by the IPv4 address it embeds, whose internal forms are rules
		// of their own (addV4).
		for _, n := range append([]netip.Prefix{nat64Prefix}, p.nat64...) {
			if s.Addr().Is6() && n.Bits() <= s.Bits() && n.Contains(s.Addr()) {
				continue hostRoutes
			}
		}
		reason, via := "host route "+s.String(), false
		for _, v := range cfg.ViaDefault {
			if v.IsValid() && unmapPrefix(v).Masked() == s {
				reason, via = reason+viaDefaultSuffix, true
				break
			}
		}
		n := len(p.rules)
		p.addV4(s, actBlock, reason)
		for i := n; via && i < len(p.rules); i++ {
			p.rules[i].via = true // the rules (forms) added for this route
		}
	}
	for _, a := range cfg.Allow {
		pfx, err := checkAllow(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.addV4(pfx, actAllow, allowReason(pfx))
	}
	for _, r := range cfg.DNSResolvers {
		if !r.IsValid() || r.Unmap().IsUnspecified() {
			errs = append(errs, fmt.Errorf("invalid DNS resolver %v", r))
			continue
		}
		r = r.Unmap().WithZone("")
		if !slices.Contains(p.dns, r) {
			p.dns = append(p.dns, r)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortStableFunc(p.rules, func(a, b rule) int {
		if c := cmp.Compare(b.prefix.Bits(), a.prefix.Bits()); c != 0 {
			return c
		}
		// Allow wins ties.
		return compareBool(b.act == actAllow, a.act == actAllow)
	})
	p.nat64 = nil // only needed while building
	p.gen = generations.Add(1)
	pol := &Policy{}
	pol.cur.Store(p)
	return pol, nil
}

// viaDefaultSuffix ends the reason of a host route through a default
// route's gateway.
const viaDefaultSuffix = " via the default gateway"

// MustNew is New that panics on error, for tests and fixed configurations.
func MustNew(cfg Config) *Policy {
	p, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return p
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func allowReason(p netip.Prefix) string {
	if p.IsSingleIP() {
		return "allow-ip " + p.Addr().String()
	}
	return "allow-cidr " + p.String()
}

// add appends a rule unless an identical (prefix, action) rule exists.
func (p *ruleset) add(pfx netip.Prefix, act action, reason string) {
	p.addForm(pfx, pfx, act, reason)
}

// addForm is add for a form of the configured prefix entry.
func (p *ruleset) addForm(pfx, entry netip.Prefix, act action, reason string) {
	for _, r := range p.rules {
		if r.prefix == pfx && r.act == act {
			return
		}
	}
	p.rules = append(p.rules, rule{prefix: pfx, act: act, reason: reason, entry: entry})
}

// addV4 adds pfx and, when it is IPv4, its IPv4-mapped and NAT64
// well-known-prefix forms, so that every spelling of an IPv4 destination
// gets the same verdict in both layers.
func (p *ruleset) addV4(pfx netip.Prefix, act action, reason string) {
	p.add(pfx, act, reason)
	if !pfx.Addr().Is4() {
		return
	}
	v4 := pfx.Addr().As4()
	for _, base := range []netip.Prefix{mappedPrefix, nat64Prefix} {
		b := base.Addr().As16()
		copy(b[12:], v4[:])
		form := netip.PrefixFrom(netip.AddrFrom16(b), 96+pfx.Bits())
		kind := "ipv4-mapped"
		if base == nat64Prefix {
			kind = "nat64"
		}
		p.addForm(form, pfx, act, kind+" "+reason)
	}
	for _, n := range p.nat64 {
		for _, form := range embedV4(n, pfx) {
			p.addForm(form, pfx, act, "nat64 prefix "+n.String()+": "+reason)
		}
	}
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return netip.PrefixFrom(p.Addr().WithZone(""), p.Bits())
}

// Check decides whether a new flow of proto to dst may leave. An
// IPv4-mapped destination is unmapped first; a zone is ignored; an invalid
// destination is refused. Port 0 is fine for ICMP.
func (p *Policy) Check(proto Proto, dst netip.AddrPort) Verdict {
	addr := dst.Addr().Unmap().WithZone("")
	if !addr.IsValid() {
		return Verdict{Rule: "invalid destination"}
	}
	rs := p.load()
	if dst.Port() == DNSPort && (proto == ProtoTCP || proto == ProtoUDP) && slices.Contains(rs.dns, addr) {
		return Verdict{Allowed: true, Rule: "dns resolver " + netip.AddrPortFrom(addr, DNSPort).String(), Kind: KindDNS}
	}
	for _, r := range rs.rules {
		if r.prefix.Contains(addr) {
			if r.act == actAllow {
				return Verdict{Allowed: true, Rule: r.reason, Kind: KindAllow, Entry: r.entry}
			}
			return Verdict{Rule: r.reason, Kind: KindBlock, Entry: r.entry, ViaDefault: r.via}
		}
	}
	return Verdict{Allowed: true, Rule: RuleInternet, Kind: KindInternet}
}

// RuleInternet is the rule of a destination no rule names: the open
// internet. The domain allowlist (package userstack) turns it into a
// refusal.
const RuleInternet = "internet"

// DNSResolvers returns the resolver addresses punched on port 53.
func (p *Policy) DNSResolvers() []netip.Addr { return slices.Clone(p.load().dns) }

// RoutePlan returns the kernel route plan inputs: every blocked prefix
// (RouteBlock), then every punch
// (allow entries and DNS resolvers as host routes). Within a kind, IPv4
// comes before IPv6 and prefixes are in address order, so the output is
// stable. A prefix appears once: when an allow and a block share a prefix
// only the punch is listed (allow wins ties, as in Check). The default
// route is not part of the plan.
//
// IPv4-mapped forms (::ffff:0:0/96) are left out: Linux never routes them
// through the IPv6 table (an AF_INET6 socket sends to a mapped address over
// IPv4, so the IPv4 routes apply), and netlink libraries encode such a
// prefix as IPv4, which the kernel rejects. The NAT64 forms are included.
func (p *Policy) RoutePlan() []RouteEntry {
	seen := map[netip.Prefix]bool{}
	var out []RouteEntry
	rs := p.load()
	// Rules are sorted allow-first within a prefix length, so the punch of
	// a tied prefix is seen before its block.
	for _, r := range rs.rules {
		if seen[r.prefix] || mappedPrefix.Contains(r.prefix.Addr()) {
			continue
		}
		seen[r.prefix] = true
		e := RouteEntry{Prefix: r.prefix, Reason: r.reason, Kind: RouteBlock}
		if r.act == actAllow {
			e.Kind = RoutePunch
		}
		out = append(out, e)
	}
	for _, a := range rs.dns {
		pfx := netip.PrefixFrom(a, a.BitLen())
		if seen[pfx] {
			continue
		}
		seen[pfx] = true
		out = append(out, RouteEntry{Prefix: pfx, Kind: RoutePunch, Reason: "dns resolver " + a.String()})
	}
	slices.SortStableFunc(out, func(a, b RouteEntry) int {
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		if c := compareBool(a.Prefix.Addr().Is6(), b.Prefix.Addr().Is6()); c != 0 {
			return c
		}
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits())
	})
	return out
}

// Blocked reports whether addr falls in a built-in blocked range or a
// connected subnet, ignoring allow entries. It is the "would the default
// policy refuse this?" question, used by tests and diagnostics.
func (p *Policy) Blocked(addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	for _, r := range p.load().rules {
		if r.act != actAllow && r.prefix.Contains(addr) {
			return true
		}
	}
	return false
}
