package jail

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/names"
)

// With a domain allowlist every host resolver sits behind the stack's own
// (none is punched: DNS to it would bypass the list), the sandbox's
// resolv.conf names only the gateway, and the synthetic pools are routed
// to tun0 even when the host routes the benchmarking range elsewhere.
func TestPrepareNames(t *testing.T) {
	facts := HostFacts{
		ResolvConf: "nameserver 10.0.0.2\nnameserver 127.0.0.53\nsearch corp.example\n",
		Connected:  pfx("10.0.0.5/24"),
		Routed:     pfx("198.18.0.0/16"),
		IPv6Egress: true,
	}
	s, err := PrepareNames(facts, nil, []string{"api.github.com", "@npm"}, []string{"evil.npmjs.org"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.2:53"), netip.MustParseAddrPort("127.0.0.53:53")}; !slices.Equal(s.Upstreams, want) {
		t.Errorf("upstreams %v, want %v", s.Upstreams, want)
	}
	if got := s.Policy.DNSResolvers(); len(got) != 0 {
		t.Errorf("resolvers punched: %v", got)
	}
	if v := s.Policy.Check(netpolicy.ProtoUDP, netip.MustParseAddrPort("10.0.0.2:53")); v.Allowed {
		t.Errorf("the host's resolver is reachable directly: %v", v)
	}
	if want := "nameserver " + s.Gateway.String() + "\nsearch corp.example\n"; !strings.HasSuffix(s.ResolvConf.Data, want) || strings.Count(s.ResolvConf.Data, "nameserver") != 1 {
		t.Errorf("resolv.conf:\n%s", s.ResolvConf.Data)
	}
	routes := s.Routes.String()
	for _, want := range []string{"route add 198.18.0.0/15 dev tun0", "route add 2001:2::/64 dev tun0"} {
		if !strings.Contains(routes, want) {
			t.Errorf("routes lack %q:\n%s", want, routes)
		}
	}
	if s.Names == nil || s.Names.NoIPv6 {
		t.Fatalf("names config %+v", s.Names)
	}
	if ok, _ := s.Names.Rules.AllowName("registry.npmjs.org"); !ok {
		t.Error("the @npm preset is not expanded")
	}
	if ok, _ := s.Names.Rules.AllowName("evil.npmjs.org"); ok {
		t.Error("deny-domain does not win")
	}
	if !slices.Equal(s.AllowDomains, []string{"api.github.com", "@npm"}) {
		t.Errorf("AllowDomains %v", s.AllowDomains)
	}

	// Without an allowlist: as before, byte for byte.
	plain, err := PrepareNames(facts, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := Prepare(facts, nil)
	if plain.Names != nil || plain.ResolvConf.Data != old.ResolvConf.Data || plain.Routes.String() != old.Routes.String() || strings.Contains(plain.Routes.String(), "198.18.0.0/15 dev tun0") {
		t.Errorf("no allowlist changed the jail")
	}

	for _, c := range []struct {
		allow, deny []string
		want        string
	}{
		{nil, []string{"x.com"}, "--deny-domain narrows"},
		{[]string{"10.1.2.3"}, nil, "use --allow-ip"},
		{[]string{"a..b"}, nil, "--allow-domain"},
	} {
		if _, err := PrepareNames(facts, nil, c.allow, c.deny); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v/%v: %v, want %q", c.allow, c.deny, err, c.want)
		}
	}
	_ = names.DefaultPool4
}
