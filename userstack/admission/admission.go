// Package admission is the egress stack's one admission point: whether a
// new flow from the sandbox may leave, and to where.
//
// [Admitter.Admit] decides a new flow (TCP, UDP or an ICMP echo) from its
// protocol and addresses and returns a typed [Decision]: refuse (with a
// [Kind] and the rule text the block record carries), dial a target,
// wait on the IPv6 gate and decide again, inspect the first bytes of a
// TCP flow to a name, wait for a UDP flow's name to resolve, answer DNS
// or a gateway's host port locally, or ask (the ask mode may hold a
// refused flow). It never blocks and records nothing: the relay acts on
// the decision (a RST, an ICMP unreachable, the block record, the dial).
//
// It owns the policy wrapper (the host's loopback and unspecified
// addresses refused whatever the policy allows; with the domain
// allowlist, the open internet and the synthetic pool's other forms
// refused), the gateway's host ports, the IPv6 gate's lookup and the
// translation of a name's synthetic address to a host-side address. The
// names side (the pool, the rules, the resolver cache) is reached through
// the narrow [Names] interface; nothing here knows gVisor, sockets or the
// stack.
package admission

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Action is what the relay does with a new flow.
type Action uint8

const (
	// Refuse: refused; Kind says why, Rule is the record's text. The
	// relay resets (TCP) or answers ICMP port unreachable (UDP), and
	// records the refusal (Decision.Recorded).
	Refuse Action = iota
	// Dial: Target is the host-side destination.
	Dial
	// Wait: an allowed IPv6 destination (Target) waits for the IPv6 gate
	// (Gate) before it leaves; then [Admitter.Check] decides it again.
	Wait
	// Inspect: a TCP flow to a name (Name; Rule the allowlist's rule):
	// dialed by name ([Admitter.FromCache], [Admitter.Resolve]), its
	// first bytes inspected before any reach the host.
	Inspect
	// Resolve: a UDP flow to a name whose address is not fresh in the
	// resolver cache: a background lookup was started (or is under
	// way); the datagram is dropped and the sandbox sends again.
	Resolve
	// LocalDNS: port 53 of a local address. Target is the host's
	// resolver to relay to; zero: the stack's own resolver (the domain
	// allowlist) answers.
	LocalDNS
	// HostPort: an allowed host port of a gateway; Target is the host's
	// loopback.
	HostPort
	// Ask: refused (Kind, Rule), but the ask mode may hold it: Name (a
	// name's flow) or HostPort (a gateway port) say what is asked. Once
	// approved, [Admitter.Approved] gives the decision to act on.
	Ask
	// Local: an echo request to a local address: answered by the stack.
	Local
)

var actionNames = [...]string{"refuse", "dial", "wait", "inspect", "resolve", "local-dns", "host-port", "ask", "local"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", a)
}

// Kind is why a flow is refused (or asked about).
type Kind uint8

const (
	// KindNone: not refused.
	KindNone Kind = iota
	// KindBlocked: a block rule of the policy (a built-in or private
	// range, a connected subnet, a host route, the fail-closed policy)
	// or an invalid destination.
	KindBlocked
	// KindViaDefault: a host route through a default route's gateway
	// (Decision.ViaDefault names it).
	KindViaDefault
	// KindNotAllowlisted: an internet address with the domain allowlist
	// on (only names, allow-ip and allow-cidr entries leave).
	KindNotAllowlisted
	// KindHostLoopback: the host's loopback or an unspecified address,
	// in any form.
	KindHostLoopback
	// KindSyntheticUnknown: a synthetic address never handed out.
	KindSyntheticUnknown
	// KindSyntheticForm: the synthetic pool in another form (NAT64).
	KindSyntheticForm
	// KindSyntheticProto: a synthetic address outside the flows the
	// allowlist decides (an echo, a reply from another port).
	KindSyntheticProto
	// KindQUIC: UDP 443 to a name.
	KindQUIC
	// KindNameNotAllowed: the allowlist refuses the name on that port.
	KindNameNotAllowed
	// KindBlockedAddrs: the name resolves only to refused addresses.
	KindBlockedAddrs
	// KindNoResolve: the name does not resolve on the host.
	KindNoResolve
	// KindLocalNotDNS: a local address on a port that is neither DNS
	// nor an allowed host port.
	KindLocalNotDNS
	// KindNoResolver: TCP to port 53 of a local address with no
	// resolver to relay to: reset, not recorded.
	KindNoResolver
	// KindIPv6NotReady: the IPv6 gate stayed shut.
	KindIPv6NotReady
	// KindClosing: the stack closed while the flow waited: nothing
	// answered, not recorded.
	KindClosing
	// KindTooManyFlows: the relay's cap on open flows (the relay's own
	// refusal, recorded with its own rule).
	KindTooManyFlows
	// KindAskDenied: the ask mode refused (denied, expired, too many
	// pending).
	KindAskDenied
)

var kindNames = [...]string{"none", "blocked", "via-default-route", "not-allowlisted", "host-loopback",
	"synthetic-unknown", "synthetic-form", "synthetic-proto", "quic", "name-not-allowed",
	"blocked-addresses", "no-resolve", "local-not-dns", "no-resolver", "ipv6-not-ready", "closing",
	"too-many-flows", "ask-denied"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// The rule texts of the refusals made here (block records, docs and tests
// match on them).
const (
	RuleHostLoopback     = "host loopback: only --allow-host-port ports at the gateway address reach it"
	RuleSyntheticProto   = "synthetic address of a name (only TCP and UDP reach names)"
	RuleNotAllowlisted   = "not on the domain allowlist (an address, not a name: allow it with --allow-ip)"
	RuleSyntheticForm    = "synthetic address pool in another form (NAT64)"
	RuleSyntheticUnknown = "synthetic address never handed out by the sandbox's resolver"
	RuleQUIC             = "udp 443 (QUIC) to a name: use TCP"
	RuleNameNotAllowed   = "domain not allowed on this port"
	RuleLocalNotDNS      = "local address, not a DNS port"
	RuleNoResolve        = "does not resolve on the host"
	RuleBlockedAddrs     = "resolves only to blocked addresses: "
	RuleIPv6NotReady     = "IPv6 destination held until the policy was ready, which it was not in time"
	RuleAskApproved      = "ask: approved once"
)

// Decision is what [Admitter.Admit] decided for a new flow.
type Decision struct {
	Action Action
	// Kind is why it is refused (Refuse, Ask); KindNone otherwise.
	Kind Kind
	// Rule is the rule that decided, for humans: the block record's
	// text for a refusal, the policy's or the allowlist's rule for an
	// allowed flow (Config.OnFlow); "" for a local destination.
	Rule string
	// Name is the host name the flow is for (a synthetic address), when
	// the domain allowlist decided it.
	Name string
	// Target is the host-side destination (Dial, Wait, LocalDNS,
	// HostPort).
	Target netip.AddrPort
	// Gate is the IPv6 gate the flow waits on (Wait).
	Gate <-chan struct{}
	// HostPort: an Ask about a gateway port.
	HostPort bool
	// ViaDefault is the host route through a default route's gateway
	// that refused the flow (KindViaDefault).
	ViaDefault netip.Prefix
}

// Recorded reports whether the relay records d's refusal as a block.
func (d Decision) Recorded() bool {
	return d.Action == Refuse && d.Kind != KindNoResolver && d.Kind != KindClosing
}

// Block is d's refusal of a flow of proto to dst, as a block record.
func (d Decision) Block(proto netpolicy.Proto, dst netip.AddrPort) netpolicy.Block {
	return netpolicy.Block{Proto: proto, Dst: dst, Name: d.Name, Rule: d.Rule, ViaDefault: d.ViaDefault}
}

func refuse(k Kind, rule string) Decision { return Decision{Action: Refuse, Kind: k, Rule: rule} }

// Names is the domain allowlist's side the admitter asks: the synthetic
// pool, the rules and the host-side resolver's cache.
type Names interface {
	// InPool reports whether a is a synthetic address (handed out or not).
	InPool(a netip.Addr) bool
	// NameOf maps a synthetic address handed out back to its name.
	NameOf(a netip.Addr) (string, bool)
	// Allow is the rules' verdict on name and port.
	Allow(name string, port uint16) (ok bool, rule string)
	// Cached returns name's addresses of a family (AAAA when v6) fresh
	// in the cache (nil when none), and the TTL of the cache's entry,
	// fresh or not (0: none).
	Cached(name string, v6 bool) (addrs []netip.Addr, ttl uint32)
	// Background starts a lookup of name's records of a family on a
	// worker unless they are fresh in the cache or being looked up, and
	// reports whether they were fresh. It never blocks.
	Background(name string, v6 bool) (fresh bool)
	// Lookup resolves name's records of a family (may block; cached).
	Lookup(ctx context.Context, name string, v6 bool) ([]netip.Addr, error)
}

// Config is what the stack gives its admitter.
type Config struct {
	// Policy is the shared egress policy (required).
	Policy *netpolicy.Policy
	// Local are the addresses the stack answers as (gateways and virtual
	// DNS addresses); Gateways those of them that are gateways.
	Local, Gateways []netip.Addr
	// Upstream is the host's resolver port 53 of a local address is
	// relayed to (zero: none).
	Upstream netip.AddrPort
	// HostPorts are the gateway's host ports at first ([Admitter.SetHostPorts]).
	HostPorts []netpolicy.HostPort
	// HostLoopback is the loopback address an IPv4 gateway's host port
	// leads to (the stack probes the host's sockets).
	HostLoopback func(netpolicy.HostPort) netip.Addr
	// IPv6Ready is the IPv6 gate (nil: none): the channel a flow to an
	// allowed IPv6 destination waits on until it is closed.
	IPv6Ready func() <-chan struct{}
	// AwaitIPv6 waits for a gate (Resolve's blocking path): false when
	// it stayed shut or the stack closes.
	AwaitIPv6 func(gate <-chan struct{}) bool
	// Ask: the ask mode is on.
	Ask bool
	// Names, when set, turns the domain allowlist on; Pool4 is its IPv4
	// synthetic pool (its allow-cidr entry opens the pool's NAT64 forms
	// too, which are refused here).
	Names Names
	Pool4 netip.Prefix
	// Now is the clock (UDP name targets' expiry); Logf logs.
	Now  func() time.Time
	Logf func(string, ...any)
}

// Admitter decides new flows. Safe for concurrent use.
type Admitter struct {
	cfg       Config
	local     map[netip.Addr]bool
	hostPorts atomic.Pointer[[]netpolicy.HostPort]

	mu  sync.Mutex
	udp map[netip.AddrPort]udpTarget // a name's synthetic address and port -> host side
}

// udpTarget is the host-side destination of a synthetic address and port
// a UDP mapping sends to, checked again each time a new mapping uses it.
type udpTarget struct {
	target  netip.AddrPort
	expires time.Time
}

// maxUDPTargets bounds the UDP name targets kept (all dropped past it).
const maxUDPTargets = 4096

// New returns the admitter for cfg.
func New(cfg Config) *Admitter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.HostLoopback == nil {
		cfg.HostLoopback = func(netpolicy.HostPort) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, 1}) }
	}
	if cfg.AwaitIPv6 == nil {
		cfg.AwaitIPv6 = func(<-chan struct{}) bool { return false }
	}
	a := &Admitter{cfg: cfg, local: map[netip.Addr]bool{}, udp: map[netip.AddrPort]udpTarget{}}
	for _, l := range append(slices.Clone(cfg.Local), cfg.Gateways...) {
		a.local[l.Unmap()] = true
	}
	return a
}

// Admit decides a new flow of proto from src to dst (for ICMP, an echo
// request; dst's port 0). It never blocks and records nothing.
func (a *Admitter) Admit(proto netpolicy.Proto, src, dst netip.AddrPort) Decision {
	if a.IsLocal(dst.Addr()) {
		return a.admitLocal(proto, dst)
	}
	if proto != netpolicy.ProtoICMP && a.cfg.Names != nil && a.cfg.Names.InPool(dst.Addr()) {
		return a.admitName(proto, dst)
	}
	d := a.Check(proto, dst)
	if d.Action == Refuse {
		if proto != netpolicy.ProtoICMP && a.askOnAddress(dst) {
			d.Action = Ask
		}
		return d
	}
	if gate := a.ipv6Gate(dst.Addr()); gate != nil {
		d.Action, d.Gate = Wait, gate
	}
	return d
}

// Approved is the decision for a flow the ask mode approved once (d was
// Admit's Ask for it).
func (a *Admitter) Approved(proto netpolicy.Proto, src, dst netip.AddrPort, d Decision) Decision {
	switch {
	case d.Name != "" && proto == netpolicy.ProtoTCP:
		return Decision{Action: Inspect, Name: d.Name, Rule: RuleAskApproved}
	case d.Name != "":
		return a.udpName(dst, d.Name, RuleAskApproved)
	case d.HostPort && proto == netpolicy.ProtoTCP:
		// Once: to the port's loopback, whether or not it became a host
		// port meanwhile.
		return Decision{Action: HostPort, Target: a.loopback(proto, dst), Rule: RuleAskApproved}
	case d.HostPort:
		// A UDP gateway port approved becomes a host port (for UDP, once
		// is the session: see the jail's approve): routed again.
		if t, ok := a.hostPortTarget(proto, dst); ok {
			return Decision{Action: HostPort, Target: t}
		}
		return refuse(KindLocalNotDNS, RuleLocalNotDNS)
	}
	d = Decision{Action: Dial, Target: dst, Rule: RuleAskApproved}
	if gate := a.ipv6Gate(dst.Addr()); gate != nil {
		d.Action, d.Gate = Wait, gate
	}
	return d
}

// admitLocal decides a flow to one of the stack's own addresses.
func (a *Admitter) admitLocal(proto netpolicy.Proto, dst netip.AddrPort) Decision {
	switch {
	case proto == netpolicy.ProtoICMP:
		return Decision{Action: Local}
	case proto == netpolicy.ProtoTCP && dst.Port() == netpolicy.DNSPort:
		if a.cfg.Names != nil {
			return Decision{Action: LocalDNS} // the stack's own resolver
		}
		if !a.cfg.Upstream.IsValid() {
			return refuse(KindNoResolver, "")
		}
		return Decision{Action: LocalDNS, Target: a.cfg.Upstream}
	case proto == netpolicy.ProtoUDP && dst.Port() == netpolicy.DNSPort && a.cfg.Upstream.IsValid():
		return Decision{Action: LocalDNS, Target: a.cfg.Upstream}
	}
	if t, ok := a.hostPortTarget(proto, dst); ok {
		return Decision{Action: HostPort, Target: t}
	}
	d := refuse(KindLocalNotDNS, RuleLocalNotDNS)
	if a.cfg.Ask && a.isGateway(dst.Addr()) {
		d.Action, d.HostPort = Ask, true
	}
	return d
}

// admitName decides a flow to a synthetic address: by its name and port.
func (a *Admitter) admitName(proto netpolicy.Proto, dst netip.AddrPort) Decision {
	name, ok := a.cfg.Names.NameOf(dst.Addr())
	if !ok {
		return refuse(KindSyntheticUnknown, RuleSyntheticUnknown)
	}
	if proto == netpolicy.ProtoUDP && dst.Port() == 443 {
		// QUIC: refused with ICMP port unreachable, so that the client
		// falls back to TCP, where the SNI is checked before anything
		// leaves.
		return Decision{Action: Refuse, Kind: KindQUIC, Rule: RuleQUIC, Name: name}
	}
	ok, rule := a.cfg.Names.Allow(name, dst.Port())
	if !ok {
		d := Decision{Action: Refuse, Kind: KindNameNotAllowed, Rule: rule, Name: name}
		if a.cfg.Ask && Askable(rule) {
			d.Action = Ask
		} else if rule == "" {
			d.Rule = RuleNameNotAllowed
		}
		return d
	}
	if proto == netpolicy.ProtoTCP {
		return Decision{Action: Inspect, Name: name, Rule: rule}
	}
	return a.udpName(dst, name, rule)
}

// Askable reports whether a name refused by rule may be asked about: not
// on the allowlist (an explicit deny rule is not asked about).
func Askable(rule string) bool { return rule == netpolicy.DomainNotAllowed }

// udpName decides a datagram to a new destination that is an allowed
// name's synthetic address: translated from the resolver cache; when the
// cache has nothing fresh the name is looked up on a worker (Resolve: the
// datagram dropped, the sender retries).
func (a *Admitter) udpName(dst netip.AddrPort, name, rule string) Decision {
	if t, ok := a.UDPTarget(dst); ok {
		// Cached for new mappings, but decided again: a live policy
		// update may have blocked the address since (or the IPv6 gate
		// closed again after a network change). Otherwise the entry is
		// dropped and the name decided afresh below, which gives the
		// refusal by name.
		if a.TargetAllowed(netpolicy.ProtoUDP, t) && a.ipv6Gate(t.Addr()) == nil {
			return Decision{Action: Dial, Target: t, Name: name, Rule: rule}
		}
		a.mu.Lock()
		delete(a.udp, dst)
		a.mu.Unlock()
	}
	now := a.cfg.Now()
	// Only the family Resolve tries first must be fresh in the cache (the
	// synthetic address's own); the other only when the first has no
	// address the policy allows. Not fresh: looked up on a worker, the
	// datagram dropped. Every datagram of a flood comes here until the
	// lookup ends: Background starts none while one for the name is
	// under way, and a failed one is cached like an answer.
	first := firstV6(dst)
	if !a.cfg.Names.Background(name, first) {
		return Decision{Action: Resolve, Name: name, Rule: rule}
	}
	d := a.FromCache(netpolicy.ProtoUDP, dst, name)
	if d.Action == Resolve {
		if !a.cfg.Names.Background(name, !first) {
			return Decision{Action: Resolve, Name: name, Rule: rule}
		}
		// Both fresh in the cache: pick takes it from there (and gives
		// the refusal).
		d = a.pick(context.Background(), netpolicy.ProtoUDP, dst, name, false)
	}
	if d.Action != Dial {
		return d
	}
	_, ttl := a.cfg.Names.Cached(name, false)
	a.mu.Lock()
	if len(a.udp) >= maxUDPTargets {
		clear(a.udp)
	}
	a.udp[dst] = udpTarget{target: d.Target, expires: now.Add(time.Duration(max(ttl, 30)) * time.Second)}
	a.mu.Unlock()
	d.Rule = rule
	return d
}

// UDPTarget returns the host-side destination admitted for a name's
// synthetic dst (the packet path's translation; never blocks).
func (a *Admitter) UDPTarget(dst netip.AddrPort) (netip.AddrPort, bool) {
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.udp[dst]
	if !ok || !now.Before(t.expires) {
		return netip.AddrPort{}, false
	}
	return t.target, true
}

// Route is where a datagram to dst, a destination its mapping admitted,
// goes on the host: a name's translation, the resolver or a host port
// for a local address (local), dst itself otherwise; false when there is
// none (a name's translation expired, a local port that is neither).
func (a *Admitter) Route(proto netpolicy.Proto, dst netip.AddrPort) (target netip.AddrPort, local, ok bool) {
	switch {
	case a.cfg.Names != nil && a.cfg.Names.InPool(dst.Addr()):
		target, ok = a.UDPTarget(dst)
		return target, false, ok
	case a.IsLocal(dst.Addr()):
		if dst.Port() == netpolicy.DNSPort && a.cfg.Upstream.IsValid() {
			return a.cfg.Upstream, true, true
		}
		target, ok = a.hostPortTarget(proto, dst)
		return target, true, ok
	}
	return dst, false, true
}

// FromCache is what Resolve would decide from the cache alone, from the
// first family it tries (dst's own), when that family has an address to
// take: Dial the first one the policy allows for proto, or Wait for the
// IPv6 gate. Resolve: none fresh in the cache (the other family, or a
// lookup, is Resolve's). Nothing to record.
func (a *Admitter) FromCache(proto netpolicy.Proto, dst netip.AddrPort, name string) Decision {
	addrs, _ := a.cfg.Names.Cached(name, firstV6(dst))
	for _, ad := range addrs {
		target := netip.AddrPortFrom(ad, dst.Port())
		if !a.TargetAllowed(proto, target) {
			continue
		}
		if gate := a.ipv6Gate(ad); gate != nil {
			return Decision{Action: Wait, Gate: gate, Target: target, Name: name}
		}
		return Decision{Action: Dial, Target: target, Name: name}
	}
	return Decision{Action: Resolve, Name: name}
}

// Resolve resolves name on the host side at connect time (a TCP flow to
// a name, on a worker: it may block on a lookup upstream and on the IPv6
// gate) and decides the first address (of dst's family first) the policy
// does not refuse: Dial it, or Refuse (KindBlockedAddrs, KindNoResolve,
// KindClosing when ctx ended). It lives here, beside Admit's cache-only
// path, so that one loop picks a name's address for both.
func (a *Admitter) Resolve(ctx context.Context, proto netpolicy.Proto, dst netip.AddrPort, name string) Decision {
	return a.pick(ctx, proto, dst, name, true)
}

// pick is Resolve (wait) and its cache-only form (not wait: takes only
// what the cache holds; an allowed IPv6 address that waits for the IPv6
// gate is returned as Wait on that gate).
func (a *Admitter) pick(ctx context.Context, proto netpolicy.Proto, dst netip.AddrPort, name string, wait bool) Decision {
	var blocked []string
	found := false
	first := firstV6(dst)
	for _, v6 := range []bool{first, !first} {
		var addrs []netip.Addr
		var err error
		if wait {
			addrs, err = a.cfg.Names.Lookup(ctx, name, v6)
		} else {
			addrs, _ = a.cfg.Names.Cached(name, v6)
		}
		if err != nil {
			t := "TypeA"
			if v6 {
				t = "TypeAAAA"
			}
			a.cfg.Logf("userstack: resolve %s %v: %v", name, t, err)
			continue
		}
		for _, ad := range addrs {
			found = true
			target := netip.AddrPortFrom(ad, dst.Port())
			if a.cfg.Names.InPool(ad) {
				blocked = append(blocked, ad.String()+" (synthetic pool)")
				continue
			}
			v := a.hostCheck(proto, target)
			var gate <-chan struct{}
			if v.Allowed {
				gate = a.ipv6Gate(ad)
			}
			if gate != nil {
				if !wait {
					return Decision{Action: Wait, Gate: gate, Target: target, Name: name}
				}
				if !a.cfg.AwaitIPv6(gate) {
					if ctx.Err() != nil {
						return Decision{Action: Refuse, Kind: KindClosing, Name: name}
					}
					blocked = append(blocked, ad.String()+" (the IPv6 policy was not ready in time)")
					continue
				}
				v = a.hostCheck(proto, target) // the policy the gate waited for
			}
			if !v.Allowed {
				blocked = append(blocked, fmt.Sprintf("%s (%s)", ad, v.Rule))
				continue
			}
			return Decision{Action: Dial, Target: target, Name: name}
		}
	}
	if len(blocked) > 0 || found {
		return Decision{Action: Refuse, Kind: KindBlockedAddrs, Name: name, Rule: RuleBlockedAddrs + strings.Join(blocked, ", ")}
	}
	return Decision{Action: Refuse, Kind: KindNoResolve, Name: name, Rule: RuleNoResolve}
}

// firstV6 reports whether a name whose synthetic address is dst is
// resolved AAAA first: dst's own family first.
func firstV6(dst netip.AddrPort) bool { return dst.Addr().Is6() && !dst.Addr().Is4In6() }

// hostCheck is the policy's verdict on a host-side destination, except
// that the host's loopback and the unspecified addresses (0.0.0.0, ::: a
// host-side connect to them reaches the host's loopback), also in their
// mapped and well-known NAT64 forms, are refused whatever the policy
// allows: an allow-ip entry naming them, or a policy built in code. The
// host's loopback is reached only through a gateway's allowed host port,
// never by address or by name.
func (a *Admitter) hostCheck(proto netpolicy.Proto, dst netip.AddrPort) netpolicy.Verdict {
	v, _ := a.hostCheckKind(proto, dst)
	return v
}

// hostCheckKind is hostCheck, and KindHostLoopback when that refusal is
// the host's loopback's.
func (a *Admitter) hostCheckKind(proto netpolicy.Proto, dst netip.AddrPort) (netpolicy.Verdict, Kind) {
	v := a.cfg.Policy.Check(proto, dst)
	if h := netpolicy.HostSideAddr(dst.Addr()); v.Allowed && (h.IsLoopback() || h.IsUnspecified()) {
		return netpolicy.Verdict{Rule: RuleHostLoopback}, KindHostLoopback
	}
	return v, KindNone
}

// TargetAllowed reports whether a name's host-side address may be dialed
// (as Resolve decides each address): not a synthetic address, and
// allowed by the policy.
func (a *Admitter) TargetAllowed(proto netpolicy.Proto, target netip.AddrPort) bool {
	return (a.cfg.Names == nil || !a.cfg.Names.InPool(target.Addr())) && a.hostCheck(proto, target).Allowed
}

// Check is the policy's decision on an address (not a name): Dial dst,
// or Refuse. With the allowlist on, the open internet is refused (only
// allow-ip/allow-cidr entries and the DNS punches open anything). It
// neither asks nor looks at the IPv6 gate: the relay uses it to decide a
// flow again after the gate, and a UDP peer after a policy change.
func (a *Admitter) Check(proto netpolicy.Proto, dst netip.AddrPort) Decision {
	n := a.cfg.Names
	if n != nil && n.InPool(dst.Addr()) {
		// A synthetic address outside the flows the allowlist decides
		// (an echo request, a reply from another port): nothing real
		// behind it.
		return refuse(KindSyntheticProto, RuleSyntheticProto)
	}
	v, k := a.hostCheckKind(proto, dst)
	switch {
	case !v.Allowed:
		d := refuse(KindBlocked, v.Rule)
		switch {
		case k != KindNone:
			d.Kind = k
		case v.ViaDefault:
			d.Kind, d.ViaDefault = KindViaDefault, v.ViaDefaultRoute()
		}
		return d
	case n == nil:
	case v.Kind == netpolicy.KindInternet:
		return refuse(KindNotAllowlisted, RuleNotAllowlisted)
	case v.Kind == netpolicy.KindAllow && v.Entry == a.cfg.Pool4:
		// The pool's NAT64 forms, which its allow-cidr entry (the jail's
		// punch) opens too: they lead to no name.
		return refuse(KindSyntheticForm, RuleSyntheticForm)
	}
	return Decision{Action: Dial, Target: dst, Rule: v.Rule}
}

// askOnAddress reports whether a refusal of an address flow (not a name)
// may be asked about: not the host's loopback or an unspecified address,
// not the synthetic pool.
func (a *Admitter) askOnAddress(dst netip.AddrPort) bool {
	if !a.cfg.Ask {
		return false
	}
	h := netpolicy.HostSideAddr(dst.Addr())
	if h.IsLoopback() || h.IsUnspecified() || h.IsMulticast() || !h.IsValid() {
		return false
	}
	return a.cfg.Names == nil || !a.cfg.Names.InPool(dst.Addr()) && !a.cfg.Names.InPool(h)
}

// ipv6Gate returns the channel a flow to dst waits on before it leaves,
// or nil when it needs none: no gate configured, not an IPv6 destination,
// or the gate open already. Asking may start what the gate waits for.
func (a *Admitter) ipv6Gate(dst netip.Addr) <-chan struct{} {
	if a.cfg.IPv6Ready == nil || !dst.Is6() || dst.Is4In6() {
		return nil
	}
	ch := a.cfg.IPv6Ready()
	select {
	case <-ch:
		return nil
	default:
		return ch
	}
}

// IsLocal reports whether ad is one of the addresses the stack answers as.
func (a *Admitter) IsLocal(ad netip.Addr) bool { return a.local[ad.Unmap()] }

func (a *Admitter) isGateway(ad netip.Addr) bool {
	ad = ad.Unmap()
	for _, g := range a.cfg.Gateways {
		if g.Unmap() == ad {
			return true
		}
	}
	return false
}

// HostPorts returns the host loopback ports the sandbox reaches now.
func (a *Admitter) HostPorts() []netpolicy.HostPort {
	if p := a.hostPorts.Load(); p != nil {
		return *p
	}
	return a.cfg.HostPorts
}

// SetHostPorts replaces the host loopback ports, in force for the next
// new flow.
func (a *Admitter) SetHostPorts(ports []netpolicy.HostPort) {
	ps := slices.Clone(ports)
	a.hostPorts.Store(&ps)
}

// hostPortTarget returns where a flow of proto to dst goes when dst is a
// gateway's allowed host port; false otherwise.
func (a *Admitter) hostPortTarget(proto netpolicy.Proto, dst netip.AddrPort) (netip.AddrPort, bool) {
	ports := a.HostPorts()
	if len(ports) == 0 || !a.isGateway(dst.Addr()) {
		return netip.AddrPort{}, false
	}
	for _, h := range ports {
		if h.Proto == proto && h.Port == dst.Port() {
			return a.loopback(proto, dst), true
		}
	}
	return netip.AddrPort{}, false
}

// loopback is the host loopback address and port a gateway's port dst
// leads to: [::1] for an IPv6 gateway, HostLoopback's choice for an IPv4
// one.
func (a *Admitter) loopback(proto netpolicy.Proto, dst netip.AddrPort) netip.AddrPort {
	lo := netip.IPv6Loopback()
	if dst.Addr().Unmap().Is4() {
		lo = a.cfg.HostLoopback(netpolicy.HostPort{Proto: proto, Port: dst.Port()})
	}
	return netip.AddrPortFrom(lo, dst.Port())
}

// SetUDPTargetExpiry moves the expiry of the UDP target admitted for dst
// (false: none). For tests that race the expiry against the reads.
func (a *Admitter) SetUDPTargetExpiry(dst netip.AddrPort, at time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.udp[dst]
	if ok {
		t.expires = at
		a.udp[dst] = t
	}
	return ok
}
