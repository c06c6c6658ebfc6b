package netpolicy

import (
	"net/netip"
	"testing"
)

// A host route through the default gateway is internal, and says so; an
// --internet-cidr covering it lifts it, and nothing else.
func TestInternetCIDRLiftsHostRoutesOnly(t *testing.T) {
	route := netip.MustParsePrefix("198.18.50.0/24")
	dst := netip.MustParseAddr("198.18.50.9")
	cfg := Config{HostRoutes: []netip.Prefix{route, netip.MustParsePrefix("203.0.113.0/24")}, ViaDefault: []netip.Prefix{route}}
	v := MustNew(cfg).Check(ProtoTCP, netip.AddrPortFrom(dst, 443))
	if v.Allowed || v.Rule != "host route 198.18.50.0/24 via the default gateway" {
		t.Fatalf("via the default gateway: %+v, want blocked naming the gateway", v)
	}
	if p := v.ViaDefaultRoute(); !v.ViaDefault || p != route {
		t.Errorf("%+v: ViaDefaultRoute() = %v, want %v", v, p, route)
	}
	// Its IPv4-mapped and NAT64 forms are the same route.
	for _, a := range []string{"::ffff:198.18.50.9", "64:ff9b::198.18.50.9"} {
		if v := MustNew(cfg).Check(ProtoTCP, netip.AddrPortFrom(netip.MustParseAddr(a), 443)); v.ViaDefaultRoute() != route {
			t.Errorf("%s: %+v, want via the default gateway %v", a, v, route)
		}
	}
	v = MustNew(cfg).Check(ProtoTCP, netip.AddrPortFrom(netip.MustParseAddr("203.0.113.1"), 443))
	if v.Allowed || v.Rule != "host route 203.0.113.0/24" {
		t.Errorf("another host route: %+v", v)
	}
	if v.ViaDefault || v.ViaDefaultRoute().IsValid() {
		t.Errorf("a host route through another hop counted as via the default gateway: %+v", v)
	}

	cfg.Internet = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("10.0.0.0/8")}
	cfg.ConnectedSubnets = []netip.Prefix{netip.MustParsePrefix("198.19.7.0/24")}
	pol := MustNew(cfg)
	if v := pol.Check(ProtoTCP, netip.AddrPortFrom(dst, 443)); !v.Allowed {
		t.Errorf("exempted host route still blocked: %+v", v)
	}
	if v := pol.Check(ProtoTCP, netip.AddrPortFrom(netip.MustParseAddr("203.0.113.1"), 443)); v.Allowed {
		t.Errorf("a host route outside the internet CIDR opened: %+v", v)
	}
	for _, a := range []string{"10.1.2.3", "198.19.7.5"} {
		if v := pol.Check(ProtoTCP, netip.AddrPortFrom(netip.MustParseAddr(a), 443)); v.Allowed {
			t.Errorf("--internet-cidr opened %s (%+v): it lifts host routes only", a, v)
		}
	}
}

// A host route into a NAT64 prefix (an IPv6-only network's router
// announcing 64:ff9b::/96, or the network's own prefix) does not make the
// IPv4 internet internal: the embedded address decides.
func TestHostRouteIntoNAT64PrefixJudgedByEmbeddedAddress(t *testing.T) {
	own := netip.MustParsePrefix("2001:db8:64::/96")
	routes := []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96"), own}
	pol := MustNew(Config{HostRoutes: routes, ViaDefault: routes, NAT64: []netip.Prefix{own}})
	for _, c := range []struct {
		dst   string
		allow bool
	}{
		{"[64:ff9b::cb00:710a]:443", true},     // 203.0.113.10
		{"[2001:db8:64::cb00:710a]:443", true}, // the same, network-specific
		{"[64:ff9b::a14:5]:22", false},         // 10.20.0.5
		{"[2001:db8:64::a9fe:a9fe]:80", false}, // 169.254.169.254
	} {
		if v := pol.Check(ProtoTCP, netip.MustParseAddrPort(c.dst)); v.Allowed != c.allow {
			t.Errorf("%s: %+v, want allowed %v", c.dst, v, c.allow)
		}
	}
}
