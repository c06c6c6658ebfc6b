package admission

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

var (
	pool4 = netip.MustParsePrefix("198.18.0.0/15")
	pool6 = netip.MustParsePrefix("2001:2::/64")

	gw4      = netip.MustParseAddr("192.0.2.1")
	gw6      = netip.MustParseAddr("fd00:192:0:2::1")
	vdns     = netip.MustParseAddr("192.0.2.53")
	upstream = netip.MustParseAddrPort("10.0.0.2:53")
	src      = netip.MustParseAddrPort("192.0.2.100:40000")

	viaRoute   = netip.MustParsePrefix("198.51.100.0/24")
	otherRoute = netip.MustParsePrefix("203.0.113.0/24")

	// Synthetic addresses the fake resolver handed out.
	synAllowed  = netip.MustParseAddr("198.18.0.1") // ok.test: 93.184.216.34 cached
	synStale    = netip.MustParseAddr("198.18.0.2") // stale.test: nothing fresh
	synDenied   = netip.MustParseAddr("198.18.0.3") // other.test: not on the allowlist
	synBlocked  = netip.MustParseAddr("198.18.0.4") // internal.test: 10.0.0.5 only
	synNone     = netip.MustParseAddr("198.18.0.5") // none.test: no address
	synV6       = netip.MustParseAddr("2001:2::1")  // six.test: 2606:4700::1111 only
	synDeniedEx = netip.MustParseAddr("198.18.0.6") // deny.test: an explicit deny
)

// fakeNames is the names side: a fixed pool, a fixed cache.
type fakeNames struct {
	byAddr  map[netip.Addr]string
	allowed map[string]bool
	denied  map[string]bool
	cache   map[string][]netip.Addr // "name/4", "name/6": fresh answers
	started []string                // background lookups started
}

func newFakeNames() *fakeNames {
	return &fakeNames{
		byAddr: map[netip.Addr]string{
			synAllowed: "ok.test", synStale: "stale.test", synDenied: "other.test", synBlocked: "internal.test",
			synNone: "none.test", synV6: "six.test", synDeniedEx: "deny.test",
		},
		allowed: map[string]bool{"ok.test": true, "stale.test": true, "internal.test": true, "none.test": true, "six.test": true},
		denied:  map[string]bool{"deny.test": true},
		cache: map[string][]netip.Addr{
			"ok.test/4": {netip.MustParseAddr("93.184.216.34")}, "ok.test/6": {},
			"internal.test/4": {netip.MustParseAddr("10.0.0.5")}, "internal.test/6": {},
			"none.test/4": {}, "none.test/6": {},
			"six.test/6": {netip.MustParseAddr("2606:4700::1111")}, "six.test/4": {},
		},
	}
}

func fam(v6 bool) string {
	if v6 {
		return "/6"
	}
	return "/4"
}

func (f *fakeNames) InPool(a netip.Addr) bool {
	a = a.Unmap()
	return pool4.Contains(a) || pool6.Contains(a)
}
func (f *fakeNames) NameOf(a netip.Addr) (string, bool) { n, ok := f.byAddr[a.Unmap()]; return n, ok }
func (f *fakeNames) Allow(name string, port uint16) (bool, string) {
	switch {
	case f.allowed[name]:
		return true, "allow-domain " + name
	case f.denied[name]:
		return false, netpolicy.DomainDenied
	}
	return false, netpolicy.DomainNotAllowed
}
func (f *fakeNames) Cached(name string, v6 bool) ([]netip.Addr, uint32) {
	return f.cache[name+fam(v6)], 60
}
func (f *fakeNames) Background(name string, v6 bool) bool {
	if _, ok := f.cache[name+fam(v6)]; ok {
		return true
	}
	f.started = append(f.started, name+fam(v6))
	return false
}
func (f *fakeNames) Lookup(ctx context.Context, name string, v6 bool) ([]netip.Addr, error) {
	if a, ok := f.cache[name+fam(v6)]; ok {
		return a, nil
	}
	return nil, errors.New("timeout")
}

// policy is the jail's policy for the tests: the pools punched (as the
// jail does), a host route through the default gateway and one through
// another hop, and allow entries naming the host's loopback and the
// unspecified addresses (which New does not refuse: a policy built in
// code) and one internet address.
func policy() *netpolicy.Policy {
	return netpolicy.MustNew(netpolicy.Config{
		Allow: []netip.Prefix{pool4, pool6,
			netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128"),
			netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("::/128"),
			netip.MustParsePrefix("8.8.4.4/32")},
		HostRoutes: []netip.Prefix{viaRoute, otherRoute},
		ViaDefault: []netip.Prefix{viaRoute},
	})
}

// variant is a policy setting the table runs under.
type variant struct {
	names, ask bool
	gateOpen   bool
}

func (v variant) String() string {
	s := "plain"
	if v.names {
		s = "allowlist"
	}
	if v.ask {
		s += "+ask"
	}
	if !v.gateOpen {
		s += "+gate-shut"
	}
	return s
}

func newAdmitter(v variant) (*Admitter, *fakeNames, chan struct{}) {
	gate := make(chan struct{})
	if v.gateOpen {
		close(gate)
	}
	fn := newFakeNames()
	cfg := Config{
		Policy:       policy(),
		Local:        []netip.Addr{vdns},
		Gateways:     []netip.Addr{gw4, gw6},
		Upstream:     upstream,
		HostPorts:    []netpolicy.HostPort{{Proto: netpolicy.ProtoTCP, Port: 8080}, {Proto: netpolicy.ProtoUDP, Port: 5353}},
		HostLoopback: func(netpolicy.HostPort) netip.Addr { return netip.MustParseAddr("127.0.0.1") },
		IPv6Ready:    func() <-chan struct{} { return gate },
		Ask:          v.ask,
		Now:          func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	if v.names {
		cfg.Names, cfg.Pool4 = fn, pool4
	}
	return New(cfg), fn, gate
}

type want struct {
	act    Action
	kind   Kind
	rule   string
	name   string
	target string // "" : none
	gate   bool
	hport  bool
}

var (
	tcp  = netpolicy.ProtoTCP
	udp  = netpolicy.ProtoUDP
	icmp = netpolicy.ProtoICMP
)

// The admission table: protocol x destination kind x policy.
func TestAdmitTable(t *testing.T) {
	plain := variant{gateOpen: true}
	allow := variant{names: true, gateOpen: true}
	ask := variant{ask: true, gateOpen: true}
	allowAsk := variant{names: true, ask: true, gateOpen: true}
	shut := variant{}
	allowShut := variant{names: true}
	every := []variant{plain, allow, ask, allowAsk}
	noNames := []variant{plain, ask}
	withNames := []variant{allow, allowAsk}

	const (
		private  = "private range 10.0.0.0/8"
		via      = "host route 198.51.100.0/24 via the default gateway"
		other    = "host route 203.0.113.0/24"
		internet = netpolicy.RuleInternet
	)
	refuse := func(k Kind, rule string) want { return want{act: Refuse, kind: k, rule: rule} }
	askW := func(k Kind, rule string) want { return want{act: Ask, kind: k, rule: rule} }
	cases := []struct {
		what     string
		proto    []netpolicy.Proto
		dst      string
		variants []variant
		want     want
	}{
		// The internet, by address.
		{"internet", []netpolicy.Proto{tcp, udp}, "93.184.216.34:443", noNames, want{act: Dial, rule: internet, target: "93.184.216.34:443"}},
		{"internet echo", []netpolicy.Proto{icmp}, "93.184.216.34:0", noNames, want{act: Dial, rule: internet, target: "93.184.216.34:0"}},
		{"internet, allowlist", []netpolicy.Proto{tcp, udp, icmp}, "93.184.216.34:443", []variant{allow}, refuse(KindNotAllowlisted, RuleNotAllowlisted)},
		{"internet, allowlist, ask", []netpolicy.Proto{tcp, udp}, "93.184.216.34:443", []variant{allowAsk}, askW(KindNotAllowlisted, RuleNotAllowlisted)},
		{"internet echo, allowlist, ask", []netpolicy.Proto{icmp}, "93.184.216.34:0", []variant{allowAsk}, refuse(KindNotAllowlisted, RuleNotAllowlisted)},
		{"allow-ip", []netpolicy.Proto{tcp, udp}, "8.8.4.4:853", every, want{act: Dial, rule: "allow-ip 8.8.4.4", target: "8.8.4.4:853"}},
		{"allow-ip, mapped", []netpolicy.Proto{tcp}, "[::ffff:8.8.4.4]:853", every, want{act: Dial, rule: "allow-ip 8.8.4.4", target: "[::ffff:8.8.4.4]:853"}},

		// Private and internal.
		{"private", []netpolicy.Proto{tcp, udp, icmp}, "10.1.2.3:22", []variant{plain, allow}, refuse(KindBlocked, private)},
		{"private, ask", []netpolicy.Proto{tcp, udp}, "10.1.2.3:22", []variant{ask, allowAsk}, askW(KindBlocked, private)},
		{"private echo, ask", []netpolicy.Proto{icmp}, "10.1.2.3:0", []variant{ask, allowAsk}, refuse(KindBlocked, private)},
		{"private, NAT64", []netpolicy.Proto{tcp}, "[64:ff9b::a01:203]:22", []variant{plain, allow}, refuse(KindBlocked, "nat64 "+private)},
		{"host route via the default gateway", []netpolicy.Proto{tcp, udp, icmp}, "198.51.100.7:443", []variant{plain, allow}, refuse(KindViaDefault, via)},
		{"host route via the default gateway, mapped", []netpolicy.Proto{tcp}, "[::ffff:198.51.100.7]:443", []variant{plain}, refuse(KindViaDefault, via)},
		{"host route via the default gateway, ask", []netpolicy.Proto{tcp, udp}, "198.51.100.7:443", []variant{ask}, askW(KindViaDefault, via)},
		{"host route", []netpolicy.Proto{tcp, udp}, "203.0.113.9:443", []variant{plain, allow}, refuse(KindBlocked, other)},

		// The host's loopback and unspecified addresses, in every form,
		// whatever the policy allows; never asked about.
		{"host loopback", []netpolicy.Proto{tcp, udp, icmp}, "127.0.0.1:22", every, refuse(KindHostLoopback, RuleHostLoopback)},
		{"host loopback, mapped", []netpolicy.Proto{tcp, udp}, "[::ffff:127.0.0.1]:22", every, refuse(KindHostLoopback, RuleHostLoopback)},
		{"host loopback, NAT64", []netpolicy.Proto{tcp, udp}, "[64:ff9b::7f00:1]:22", every, refuse(KindHostLoopback, RuleHostLoopback)},
		{"host loopback v6", []netpolicy.Proto{tcp, udp}, "[::1]:22", every, refuse(KindHostLoopback, RuleHostLoopback)},
		{"unspecified", []netpolicy.Proto{tcp, udp}, "0.0.0.0:80", every, refuse(KindHostLoopback, RuleHostLoopback)},
		{"unspecified v6", []netpolicy.Proto{tcp, udp}, "[::]:80", every, refuse(KindHostLoopback, RuleHostLoopback)},
		{"unspecified, NAT64", []netpolicy.Proto{tcp}, "[64:ff9b::]:80", every, refuse(KindHostLoopback, RuleHostLoopback)},

		// The gateway: DNS, allowed host ports, other ports.
		{"gateway dns", []netpolicy.Proto{tcp, udp}, "192.0.2.1:53", noNames, want{act: LocalDNS, target: upstream.String()}},
		{"gateway dns, allowlist (the stack's own resolver)", []netpolicy.Proto{tcp}, "192.0.2.1:53", withNames, want{act: LocalDNS}},
		{"virtual dns", []netpolicy.Proto{tcp, udp}, "192.0.2.53:53", noNames, want{act: LocalDNS, target: upstream.String()}},
		{"gateway host port", []netpolicy.Proto{tcp}, "192.0.2.1:8080", every, want{act: HostPort, target: "127.0.0.1:8080"}},
		{"gateway host port, mapped", []netpolicy.Proto{tcp}, "[::ffff:192.0.2.1]:8080", every, want{act: HostPort, target: "127.0.0.1:8080"}},
		{"gateway host port v6", []netpolicy.Proto{tcp}, "[fd00:192:0:2::1]:8080", every, want{act: HostPort, target: "[::1]:8080"}},
		{"gateway host port udp", []netpolicy.Proto{udp}, "192.0.2.1:5353", every, want{act: HostPort, target: "127.0.0.1:5353"}},
		{"gateway host port, other protocol", []netpolicy.Proto{udp}, "192.0.2.1:8080", []variant{plain, allow}, refuse(KindLocalNotDNS, RuleLocalNotDNS)},
		{"gateway other port", []netpolicy.Proto{tcp, udp}, "192.0.2.1:9999", []variant{plain, allow}, refuse(KindLocalNotDNS, RuleLocalNotDNS)},
		{"gateway other port, ask", []netpolicy.Proto{tcp, udp}, "192.0.2.1:9999", []variant{ask, allowAsk}, want{act: Ask, kind: KindLocalNotDNS, rule: RuleLocalNotDNS, hport: true}},
		{"virtual dns other port, ask (not a gateway)", []netpolicy.Proto{tcp, udp}, "192.0.2.53:8080", every, refuse(KindLocalNotDNS, RuleLocalNotDNS)},
		{"gateway echo", []netpolicy.Proto{icmp}, "192.0.2.1:0", every, want{act: Local}},

		// Synthetic addresses.
		{"name, tcp", []netpolicy.Proto{tcp}, "198.18.0.1:443", withNames, want{act: Inspect, name: "ok.test", rule: "allow-domain ok.test"}},
		{"name, udp, cached", []netpolicy.Proto{udp}, "198.18.0.1:5000", withNames, want{act: Dial, name: "ok.test", rule: "allow-domain ok.test", target: "93.184.216.34:5000"}},
		{"name, udp, not fresh", []netpolicy.Proto{udp}, "198.18.0.2:5000", withNames, want{act: Resolve, name: "stale.test", rule: "allow-domain stale.test"}},
		{"name, udp 443", []netpolicy.Proto{udp}, "198.18.0.1:443", withNames, want{act: Refuse, kind: KindQUIC, rule: RuleQUIC, name: "ok.test"}},
		{"name, echo", []netpolicy.Proto{icmp}, "198.18.0.1:0", withNames, refuse(KindSyntheticProto, RuleSyntheticProto)},
		{"name off the allowlist", []netpolicy.Proto{tcp, udp}, "198.18.0.3:8443", []variant{allow}, want{act: Refuse, kind: KindNameNotAllowed, rule: netpolicy.DomainNotAllowed, name: "other.test"}},
		{"name off the allowlist, ask", []netpolicy.Proto{tcp, udp}, "198.18.0.3:8443", []variant{allowAsk}, want{act: Ask, kind: KindNameNotAllowed, rule: netpolicy.DomainNotAllowed, name: "other.test"}},
		{"name denied, ask", []netpolicy.Proto{tcp}, "198.18.0.6:443", withNames, want{act: Refuse, kind: KindNameNotAllowed, rule: netpolicy.DomainDenied, name: "deny.test"}},
		{"name resolving only to blocked addresses", []netpolicy.Proto{udp}, "198.18.0.4:5000", withNames, want{act: Refuse, kind: KindBlockedAddrs, rule: RuleBlockedAddrs + "10.0.0.5 (" + private + ")", name: "internal.test"}},
		{"name with no address", []netpolicy.Proto{udp}, "198.18.0.5:5000", withNames, want{act: Refuse, kind: KindNoResolve, rule: RuleNoResolve, name: "none.test"}},
		{"synthetic never handed out", []netpolicy.Proto{tcp, udp}, "198.18.0.99:443", withNames, refuse(KindSyntheticUnknown, RuleSyntheticUnknown)},
		{"synthetic never handed out, mapped", []netpolicy.Proto{tcp}, "[::ffff:198.18.0.99]:443", withNames, refuse(KindSyntheticUnknown, RuleSyntheticUnknown)},
		{"synthetic pool, NAT64 form", []netpolicy.Proto{tcp, udp, icmp}, "[64:ff9b::c612:1]:443", []variant{allow}, refuse(KindSyntheticForm, RuleSyntheticForm)},
		{"synthetic pool, NAT64 form, ask", []netpolicy.Proto{tcp}, "[64:ff9b::c612:1]:443", []variant{allowAsk}, refuse(KindSyntheticForm, RuleSyntheticForm)},

		// IPv6 and its gate.
		{"ipv6, gate open", []netpolicy.Proto{tcp, udp, icmp}, "[2606:4700::1111]:443", []variant{plain}, want{act: Dial, rule: internet, target: "[2606:4700::1111]:443"}},
		{"ipv6, gate shut", []netpolicy.Proto{tcp, udp, icmp}, "[2606:4700::1111]:443", []variant{shut}, want{act: Wait, rule: internet, target: "[2606:4700::1111]:443", gate: true}},
		{"ipv6 refused, gate shut (never waits)", []netpolicy.Proto{tcp, udp}, "[fc00::1]:443", []variant{shut}, refuse(KindBlocked, "unique-local fc00::/7")},
		{"ipv6, allowlist, gate shut", []netpolicy.Proto{tcp}, "[2606:4700::1111]:443", []variant{allowShut}, refuse(KindNotAllowlisted, RuleNotAllowlisted)},
		{"ipv6 gateway host port, gate shut", []netpolicy.Proto{tcp}, "[fd00:192:0:2::1]:8080", []variant{shut}, want{act: HostPort, target: "[::1]:8080"}},
		{"name to ipv6, udp, gate shut", []netpolicy.Proto{udp}, "[2001:2::1]:5000", []variant{allowShut}, want{act: Wait, name: "six.test", target: "[2606:4700::1111]:5000", gate: true}},
		{"name to ipv6, udp, gate open", []netpolicy.Proto{udp}, "[2001:2::1]:5000", []variant{allow}, want{act: Dial, name: "six.test", rule: "allow-domain six.test", target: "[2606:4700::1111]:5000"}},
	}
	for _, c := range cases {
		for _, v := range c.variants {
			for _, p := range c.proto {
				a, _, _ := newAdmitter(v)
				d := a.Admit(p, src, netip.MustParseAddrPort(c.dst))
				checkDecision(t, fmt.Sprintf("%s: %v %s (%v)", c.what, p, c.dst, v), d, c.want)
			}
		}
	}
}

func checkDecision(t *testing.T, what string, d Decision, w want) {
	t.Helper()
	target := ""
	if d.Target.IsValid() {
		target = d.Target.String()
	}
	if d.Action != w.act || d.Kind != w.kind || d.Rule != w.rule || d.Name != w.name || target != w.target || (d.Gate != nil) != w.gate || d.HostPort != w.hport {
		t.Errorf("%s:\n got %v %v rule %q name %q target %q gate %v hostport %v\nwant %v %v rule %q name %q target %q gate %v hostport %v",
			what, d.Action, d.Kind, d.Rule, d.Name, target, d.Gate != nil, d.HostPort,
			w.act, w.kind, w.rule, w.name, w.target, w.gate, w.hport)
	}
}

// A refusal by a host route through the default gateway carries the
// route, typed, into its block record; no other refusal does.
func TestBlockViaDefault(t *testing.T) {
	a, _, _ := newAdmitter(variant{gateOpen: true})
	dst := netip.MustParseAddrPort("198.51.100.7:443")
	b := a.Admit(tcp, src, dst).Block(tcp, dst)
	if b.ViaDefault != viaRoute || b.Rule != "host route 198.51.100.0/24 via the default gateway" {
		t.Errorf("block %+v, want ViaDefault %v", b, viaRoute)
	}
	dst = netip.MustParseAddrPort("203.0.113.9:443")
	if b := a.Admit(tcp, src, dst).Block(tcp, dst); b.ViaDefault.IsValid() {
		t.Errorf("another host route's block %+v names a route", b)
	}
}

// Which refusals the relay records.
func TestRecorded(t *testing.T) {
	a, _, _ := newAdmitter(variant{gateOpen: true})
	if d := a.Admit(tcp, src, netip.MustParseAddrPort("10.1.2.3:22")); !d.Recorded() {
		t.Errorf("%+v not recorded", d)
	}
	if d := a.Admit(tcp, src, netip.MustParseAddrPort("93.184.216.34:22")); d.Recorded() {
		t.Errorf("an allowed flow recorded: %+v", d)
	}
	// TCP to the resolver's port with no resolver: reset, not recorded.
	b := New(Config{Policy: policy(), Gateways: []netip.Addr{gw4}})
	if d := b.Admit(tcp, src, netip.AddrPortFrom(gw4, 53)); d.Action != Refuse || d.Kind != KindNoResolver || d.Recorded() {
		t.Errorf("no resolver: %+v", d)
	}
	// UDP there goes to the host ports instead (none: refused, recorded).
	if d := b.Admit(udp, src, netip.AddrPortFrom(gw4, 53)); d.Kind != KindLocalNotDNS || !d.Recorded() {
		t.Errorf("no resolver, udp: %+v", d)
	}
}

// What an approval in the ask mode leads to.
func TestApproved(t *testing.T) {
	v := variant{names: true, ask: true}
	a, _, _ := newAdmitter(v)
	cases := []struct {
		proto netpolicy.Proto
		dst   string
		want  want
	}{
		{tcp, "198.18.0.3:443", want{act: Inspect, name: "other.test", rule: RuleAskApproved}},
		{udp, "198.18.0.3:5000", want{act: Resolve, rule: RuleAskApproved, name: "other.test"}},
		{tcp, "10.1.2.3:22", want{act: Dial, rule: RuleAskApproved, target: "10.1.2.3:22"}},
		{udp, "10.1.2.3:22", want{act: Dial, rule: RuleAskApproved, target: "10.1.2.3:22"}},
		{tcp, "[fc00::1]:22", want{act: Wait, rule: RuleAskApproved, target: "[fc00::1]:22", gate: true}},
		{tcp, "192.0.2.1:9999", want{act: HostPort, rule: RuleAskApproved, target: "127.0.0.1:9999"}},
		{udp, "192.0.2.1:9999", refuse2(KindLocalNotDNS, RuleLocalNotDNS)},
	}
	for _, c := range cases {
		dst := netip.MustParseAddrPort(c.dst)
		d := a.Admit(c.proto, src, dst)
		if d.Action != Ask {
			t.Fatalf("%v %v: %+v, want Ask", c.proto, dst, d)
		}
		checkDecision(t, fmt.Sprintf("approved %v %v", c.proto, dst), a.Approved(c.proto, src, dst, d), c.want)
	}
	// A UDP gateway port approved becomes a host port (the jail's
	// approve): routed there.
	a.SetHostPorts(append(a.HostPorts(), netpolicy.HostPort{Proto: udp, Port: 9999}))
	dst := netip.MustParseAddrPort("192.0.2.1:9999")
	checkDecision(t, "approved udp host port", a.Approved(udp, src, dst, Decision{Action: Ask, HostPort: true}), want{act: HostPort, target: "127.0.0.1:9999"})
}

func refuse2(k Kind, rule string) want { return want{act: Refuse, kind: k, rule: rule} }

// A name's UDP target: a background lookup is started for the family
// tried first only; once translated, a new mapping reuses the target
// and Route finds it; a live policy change that blocks it is decided
// again (by name).
func TestUDPNameTarget(t *testing.T) {
	a, fn, _ := newAdmitter(variant{names: true, gateOpen: true})
	stale := netip.MustParseAddrPort("198.18.0.2:5000")
	if d := a.Admit(udp, src, stale); d.Action != Resolve || !slices.Equal(fn.started, []string{"stale.test/4"}) {
		t.Fatalf("stale: %+v, started %v", d, fn.started)
	}
	fn.cache["stale.test/4"] = []netip.Addr{netip.MustParseAddr("10.9.9.9"), netip.MustParseAddr("93.184.216.35")}
	d := a.Admit(udp, src, stale)
	if d.Action != Dial || d.Target.String() != "93.184.216.35:5000" {
		t.Fatalf("fresh: %+v", d)
	}
	if tgt, local, ok := a.Route(udp, stale); !ok || local || tgt != d.Target {
		t.Errorf("Route = %v %v %v, want %v", tgt, local, ok, d.Target)
	}
	if tgt, local, ok := a.Route(udp, netip.MustParseAddrPort("192.0.2.1:53")); !ok || !local || tgt != upstream {
		t.Errorf("Route to the resolver = %v %v %v", tgt, local, ok)
	}
	// The cached target no longer allowed (here: the cache changed to a
	// blocked address only, and the target's check fails): decided
	// afresh by name.
	a.cfg.Policy = netpolicy.MustNew(netpolicy.Config{Allow: []netip.Prefix{pool4}, ConnectedSubnets: []netip.Prefix{netip.MustParsePrefix("93.184.216.0/24")}})
	fn.cache["stale.test/6"] = []netip.Addr{}
	d = a.Admit(udp, src, stale)
	if d.Action != Refuse || d.Kind != KindBlockedAddrs || !strings.Contains(d.Rule, "93.184.216.35 (connected subnet 93.184.216.0/24)") {
		t.Errorf("after the policy change: %+v", d)
	}
	if _, _, ok := a.Route(udp, stale); ok {
		t.Error("the refused target is still routed")
	}
}

// Resolve (a TCP flow to a name, on a worker): lookups, the IPv6 gate
// waited for, the refusals.
func TestResolve(t *testing.T) {
	a, fn, gate := newAdmitter(variant{names: true})
	waited := 0
	a.cfg.AwaitIPv6 = func(g <-chan struct{}) bool {
		if g != gate {
			t.Errorf("waited on another gate")
		}
		waited++
		return false // stayed shut
	}
	ctx := context.Background()
	d := a.Resolve(ctx, tcp, netip.MustParseAddrPort("[2001:2::1]:443"), "six.test")
	if waited != 1 || d.Action != Refuse || d.Kind != KindBlockedAddrs || d.Rule != RuleBlockedAddrs+"2606:4700::1111 (the IPv6 policy was not ready in time)" {
		t.Errorf("gate shut: %+v (waited %d)", d, waited)
	}
	a.cfg.AwaitIPv6 = func(<-chan struct{}) bool { return true }
	if d := a.Resolve(ctx, tcp, netip.MustParseAddrPort("[2001:2::1]:443"), "six.test"); d.Action != Dial || d.Target.String() != "[2606:4700::1111]:443" {
		t.Errorf("gate opened: %+v", d)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	a.cfg.AwaitIPv6 = func(<-chan struct{}) bool { return false }
	if d := a.Resolve(cctx, tcp, netip.MustParseAddrPort("[2001:2::1]:443"), "six.test"); d.Kind != KindClosing || d.Recorded() {
		t.Errorf("closing: %+v", d)
	}
	// A lookup that fails for both families: does not resolve.
	if d := a.Resolve(ctx, tcp, netip.MustParseAddrPort("198.18.0.2:443"), "stale.test"); d.Kind != KindNoResolve || d.Rule != RuleNoResolve || d.Name != "stale.test" {
		t.Errorf("no answer: %+v", d)
	}
	// An answer into the pool itself.
	fn.cache["loop.test/4"] = []netip.Addr{synAllowed}
	fn.cache["loop.test/6"] = nil
	if d := a.Resolve(ctx, tcp, netip.MustParseAddrPort("198.18.0.7:443"), "loop.test"); d.Kind != KindBlockedAddrs || d.Rule != RuleBlockedAddrs+"198.18.0.1 (synthetic pool)" {
		t.Errorf("into the pool: %+v", d)
	}
	// FromCache: dst's own family only, nothing recorded or waited.
	if d := a.FromCache(tcp, netip.MustParseAddrPort("198.18.0.1:443"), "ok.test"); d.Action != Dial || d.Target.String() != "93.184.216.34:443" {
		t.Errorf("FromCache: %+v", d)
	}
	if d := a.FromCache(tcp, netip.MustParseAddrPort("198.18.0.5:443"), "six.test"); d.Action != Resolve {
		t.Errorf("FromCache, other family only: %+v", d)
	}
	if d := a.FromCache(tcp, netip.MustParseAddrPort("[2001:2::1]:443"), "six.test"); d.Action != Wait || d.Gate == nil {
		t.Errorf("FromCache, gate shut: %+v", d)
	}
}

// Check, the decision again after the IPv6 gate and for a UDP peer,
// never asks.
func TestCheckNeverAsks(t *testing.T) {
	a, _, _ := newAdmitter(variant{names: true, ask: true, gateOpen: true})
	for _, dst := range []string{"10.1.2.3:22", "93.184.216.34:443", "198.18.0.1:443", "127.0.0.1:22"} {
		if d := a.Check(tcp, netip.MustParseAddrPort(dst)); d.Action != Refuse {
			t.Errorf("Check %s: %+v", dst, d)
		}
	}
}

// The cost of one decision on the connection path: a TCP flow to an
// internet address (plain policy) and to a name (allowlist).
func BenchmarkAdmit(b *testing.B) {
	a, _, _ := newAdmitter(variant{gateOpen: true})
	dst := netip.MustParseAddrPort("93.184.216.34:443")
	b.Run("address", func(b *testing.B) {
		for range b.N {
			if d := a.Admit(tcp, src, dst); d.Action != Dial {
				b.Fatal(d)
			}
		}
	})
	n, _, _ := newAdmitter(variant{names: true, gateOpen: true})
	syn := netip.AddrPortFrom(synAllowed, 443)
	b.Run("name", func(b *testing.B) {
		for range b.N {
			if d := n.Admit(tcp, src, syn); d.Action != Inspect {
				b.Fatal(d)
			}
		}
	})
}
