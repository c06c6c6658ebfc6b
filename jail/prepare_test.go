package jail

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func TestPrepareAddresses(t *testing.T) {
	cases := []struct {
		name      string
		facts     HostFacts
		allow     []netip.Prefix
		gateway   string
		wantErr   string
		v6Address bool
	}{
		{name: "plain host", facts: HostFacts{Connected: pfx("10.0.0.5/24")}, gateway: "192.0.2.1"},
		{name: "host on 192.0.2.0/24", facts: HostFacts{Connected: pfx("192.0.2.7/24")}, gateway: "198.51.100.1"},
		{name: "resolver in a candidate", facts: HostFacts{ResolvConf: "nameserver 192.0.2.53\n"}, gateway: "198.51.100.1"},
		{name: "allow-cidr over candidates", allow: pfx("192.0.0.0/8"), gateway: "198.51.100.1"},
		{name: "all taken", facts: HostFacts{Connected: pfx("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")}, wantErr: "every candidate"},
		{name: "ipv6 egress", facts: HostFacts{IPv6Egress: true}, gateway: "192.0.2.1", v6Address: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Prepare(c.facts, c.allow)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Gateway.String() != c.gateway {
				t.Errorf("gateway %v, want %s", s.Gateway, c.gateway)
			}
			if !s.Addr4.IsSingleIP() || s.Addr4.Addr() == s.Gateway {
				t.Errorf("jail address %v", s.Addr4)
			}
			for _, conn := range c.facts.Connected {
				if conn.Contains(s.Gateway) || conn.Contains(s.Addr4.Addr()) {
					t.Errorf("jail address inside the connected subnet %v", conn)
				}
			}
			if s.Addr6.IsValid() != c.v6Address {
				t.Errorf("IPv6 address %v, want one: %v", s.Addr6, c.v6Address)
			}
			// Both layers come from the same policy: the route plan
			// blocks what the policy blocks.
			if !strings.Contains(s.Routes.String(), "route add 10.0.0.0/8 dev blk0") {
				t.Errorf("route plan lacks the private range:\n%s", s.Routes)
			}
			if v := s.Policy.Check(netpolicy.ProtoTCP, netip.MustParseAddrPort("10.1.2.3:22")); v.Allowed {
				t.Error("policy allows a private address")
			}
		})
	}
}

func TestPrepareDNS(t *testing.T) {
	cases := []struct {
		name      string
		resolv    string
		wantConf  []string // nameserver lines in order, then kept lines
		upstreams []string
		punched   []string // resolvers reachable on port 53 through the policy
		warn      bool
	}{
		{name: "routable resolver", resolv: "nameserver 10.255.255.53\nsearch corp.example\n",
			wantConf: []string{"nameserver 10.255.255.53", "search corp.example"}, punched: []string{"10.255.255.53"}},
		{name: "loopback stub", resolv: "nameserver 127.0.0.53\noptions edns0 trust-ad\n",
			wantConf: []string{"nameserver 192.0.2.1", "options edns0 trust-ad"}, upstreams: []string{"127.0.0.53:53"}},
		{name: "two stubs, one gateway line", resolv: "nameserver 127.0.0.53\nnameserver ::1\n",
			wantConf: []string{"nameserver 192.0.2.1"}, upstreams: []string{"127.0.0.53:53", "[::1]:53"}},
		{name: "mixed keeps the host's order", resolv: "nameserver 127.0.0.53\nnameserver 172.20.0.2\n",
			wantConf: []string{"nameserver 192.0.2.1", "nameserver 172.20.0.2"}, upstreams: []string{"127.0.0.53:53"}, punched: []string{"172.20.0.2"}},
		{name: "no resolver", resolv: "# nothing\n", wantConf: nil, warn: true},
		{name: "comments and garbage", resolv: "; x\nnameserver not-an-ip\nnameserver 9.9.9.9 # q\n", wantConf: []string{"nameserver 9.9.9.9"}, punched: []string{"9.9.9.9"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Prepare(HostFacts{ResolvConf: c.resolv}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range strings.Split(strings.TrimSpace(s.ResolvConf.Data), "\n") {
				if !strings.HasPrefix(l, "#") && l != "" {
					lines = append(lines, l)
				}
			}
			if !slices.Equal(lines, c.wantConf) {
				t.Errorf("resolv.conf %q, want %q", lines, c.wantConf)
			}
			var ups []string
			for _, u := range s.Upstreams {
				ups = append(ups, u.String())
			}
			if !slices.Equal(ups, c.upstreams) {
				t.Errorf("upstreams %v, want %v", ups, c.upstreams)
			}
			for _, r := range c.punched {
				a := netip.MustParseAddr(r)
				if !s.Policy.Check(netpolicy.ProtoUDP, netip.AddrPortFrom(a, 53)).Allowed {
					t.Errorf("resolver %s not reachable on 53", r)
				}
				if a.IsPrivate() && s.Policy.Check(netpolicy.ProtoTCP, netip.AddrPortFrom(a, 22)).Allowed {
					t.Errorf("resolver %s reachable on a port other than 53", r)
				}
			}
			if (len(s.Warnings) > 0) != c.warn {
				t.Errorf("warnings %q, want some: %v", s.Warnings, c.warn)
			}
		})
	}
}
