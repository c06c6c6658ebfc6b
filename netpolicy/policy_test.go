package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestCheckDefault(t *testing.T) {
	p := MustNew(Config{})
	tests := []struct {
		proto   Proto
		dst     string
		allowed bool
		rule    string
	}{
		{ProtoTCP, "10.1.2.3:22", false, "private range 10.0.0.0/8"},
		{ProtoTCP, "172.16.0.1:443", false, "private range 172.16.0.0/12"},
		{ProtoTCP, "172.31.255.255:443", false, "private range 172.16.0.0/12"},
		{ProtoTCP, "172.32.0.1:443", true, "internet"},
		{ProtoUDP, "192.168.1.1:5064", false, "private range 192.168.0.0/16"},
		{ProtoTCP, "100.64.0.1:80", false, "shared/CGNAT range 100.64.0.0/10"},
		{ProtoTCP, "100.127.255.255:80", false, "shared/CGNAT range 100.64.0.0/10"},
		{ProtoTCP, "100.128.0.1:80", true, "internet"},
		{ProtoTCP, "169.254.169.254:80", false, "link-local/metadata 169.254.0.0/16"},
		{ProtoTCP, "127.0.0.1:8080", false, "loopback 127.0.0.0/8"},
		{ProtoTCP, "127.0.0.53:53", false, "loopback 127.0.0.0/8"},
		{ProtoUDP, "0.0.0.0:53", false, "this-network 0.0.0.0/8"},
		{ProtoUDP, "239.255.255.250:1900", false, "multicast 224.0.0.0/4"},
		{ProtoUDP, "255.255.255.255:67", false, "reserved 240.0.0.0/4"},
		{ProtoTCP, "203.0.113.7:443", true, "internet"},
		{ProtoICMP, "198.51.100.1:0", true, "internet"},
		{ProtoICMP, "10.0.0.1:0", false, "private range 10.0.0.0/8"},
		{ProtoTCP, "[::1]:22", false, "loopback ::1/128"},
		{ProtoTCP, "[::]:22", false, "unspecified ::/128"},
		{ProtoTCP, "[fd00::1]:22", false, "unique-local fc00::/7"},
		{ProtoTCP, "[fc00::1]:22", false, "unique-local fc00::/7"},
		{ProtoTCP, "[fe80::1]:22", false, "link-local fe80::/10"},
		{ProtoTCP, "[fe80::1%eth0]:22", false, "link-local fe80::/10"},
		{ProtoTCP, "[fec0::1]:22", false, "site-local fec0::/10"},
		{ProtoUDP, "[ff02::1]:5353", false, "multicast ff00::/8"},
		{ProtoTCP, "[2001:db8::1]:443", true, "internet"},
		// IPv4-mapped: unmapped before the check.
		{ProtoTCP, "[::ffff:10.1.2.3]:22", false, "private range 10.0.0.0/8"},
		{ProtoTCP, "[::ffff:127.0.0.1]:22", false, "loopback 127.0.0.0/8"},
		{ProtoTCP, "[::ffff:203.0.113.7]:22", true, "internet"},
		// NAT64 well-known prefix.
		{ProtoTCP, "[64:ff9b::10.1.2.3]:22", false, "nat64 private range 10.0.0.0/8"},
		{ProtoTCP, "[64:ff9b::169.254.169.254]:80", false, "nat64 link-local/metadata 169.254.0.0/16"},
		{ProtoTCP, "[64:ff9b::127.0.0.1]:80", false, "nat64 loopback 127.0.0.0/8"},
		{ProtoTCP, "[64:ff9b::203.0.113.7]:443", true, "internet"},
		{ProtoTCP, "[64:ff9b:1::1]:443", false, "nat64 local-use 64:ff9b:1::/48"},
		{ProtoTCP, "[64:ff9b:1:ffff::203.0.113.7]:443", false, "nat64 local-use 64:ff9b:1::/48"},
		// Invalid destination.
		{ProtoTCP, "", false, "invalid destination"},
	}
	for _, tt := range tests {
		t.Run(tt.proto.String()+" "+tt.dst, func(t *testing.T) {
			var dst netip.AddrPort
			if tt.dst != "" {
				dst = ap(tt.dst)
			}
			got := p.Check(tt.proto, dst)
			if got.Allowed != tt.allowed || got.Rule != tt.rule {
				t.Errorf("Check(%v, %v) = %+v, want {Allowed:%v Rule:%q}", tt.proto, tt.dst, got, tt.allowed, tt.rule)
			}
		})
	}
}

func TestCheckConfigured(t *testing.T) {
	p := MustNew(Config{
		ConnectedSubnets: []netip.Prefix{
			netip.MustParsePrefix("198.51.100.7/24"), // host bits ignored
			netip.MustParsePrefix("2001:db8:1::5/64"),
			netip.MustParsePrefix("10.20.0.0/16"), // inside allowed 10/8 below
			netip.MustParsePrefix("10.30.0.0/16"), // tied with allow 10.30/16
		},
		Allow: []netip.Prefix{
			netip.MustParsePrefix("192.168.1.50/32"),
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("10.30.0.0/16"),
			netip.MustParsePrefix("198.51.100.9/32"),
			netip.MustParsePrefix("fd00:1::/64"),
			netip.MustParsePrefix("::ffff:172.16.5.5/128"), // unmapped
		},
		DNSResolvers: []netip.Addr{
			netip.MustParseAddr("172.23.0.2"),
			netip.MustParseAddr("fd00:53::1"),
		},
	})
	tests := []struct {
		proto   Proto
		dst     string
		allowed bool
		rule    string
	}{
		{ProtoTCP, "192.168.1.50:22", true, "allow-ip 192.168.1.50"},
		{ProtoUDP, "192.168.1.50:5064", true, "allow-ip 192.168.1.50"},
		{ProtoTCP, "192.168.1.51:22", false, "private range 192.168.0.0/16"},
		{ProtoTCP, "[::ffff:192.168.1.50]:22", true, "allow-ip 192.168.1.50"},
		{ProtoTCP, "[64:ff9b::192.168.1.50]:22", true, "nat64 allow-ip 192.168.1.50"},
		{ProtoTCP, "10.1.2.3:22", true, "allow-cidr 10.0.0.0/8"},
		// Longest prefix wins: the connected subnet is more specific.
		{ProtoTCP, "10.20.1.1:22", false, "connected subnet 10.20.0.0/16"},
		// Tie: allow wins.
		{ProtoTCP, "10.30.1.1:22", true, "allow-cidr 10.30.0.0/16"},
		{ProtoTCP, "198.51.100.1:443", false, "connected subnet 198.51.100.0/24"},
		{ProtoTCP, "198.51.100.9:443", true, "allow-ip 198.51.100.9"},
		{ProtoTCP, "[::ffff:198.51.100.1]:443", false, "connected subnet 198.51.100.0/24"},
		{ProtoTCP, "[64:ff9b::198.51.100.1]:443", false, "nat64 connected subnet 198.51.100.0/24"},
		{ProtoTCP, "[2001:db8:1::99]:443", false, "connected subnet 2001:db8:1::/64"},
		{ProtoTCP, "[2001:db8:2::99]:443", true, "internet"},
		{ProtoTCP, "[fd00:1::7]:443", true, "allow-cidr fd00:1::/64"},
		{ProtoTCP, "[fd00:2::7]:443", false, "unique-local fc00::/7"},
		{ProtoTCP, "172.16.5.5:443", true, "allow-ip 172.16.5.5"},
		// DNS punches: port 53, TCP and UDP only.
		{ProtoUDP, "172.23.0.2:53", true, "dns resolver 172.23.0.2:53"},
		{ProtoTCP, "172.23.0.2:53", true, "dns resolver 172.23.0.2:53"},
		{ProtoTCP, "[::ffff:172.23.0.2]:53", true, "dns resolver 172.23.0.2:53"},
		{ProtoTCP, "172.23.0.2:22", false, "private range 172.16.0.0/12"},
		{ProtoUDP, "172.23.0.2:5353", false, "private range 172.16.0.0/12"},
		{ProtoICMP, "172.23.0.2:0", false, "private range 172.16.0.0/12"},
		{ProtoICMP, "172.23.0.2:53", false, "private range 172.16.0.0/12"},
		{ProtoUDP, "172.23.0.3:53", false, "private range 172.16.0.0/12"},
		{ProtoUDP, "[fd00:53::1]:53", true, "dns resolver [fd00:53::1]:53"},
		{ProtoUDP, "[fd00:53::1]:54", false, "unique-local fc00::/7"},
	}
	for _, tt := range tests {
		t.Run(tt.proto.String()+" "+tt.dst, func(t *testing.T) {
			got := p.Check(tt.proto, ap(tt.dst))
			if got.Allowed != tt.allowed || got.Rule != tt.rule {
				t.Errorf("Check(%v, %v) = %+v, want {Allowed:%v Rule:%q}", tt.proto, tt.dst, got, tt.allowed, tt.rule)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"invalid subnet", Config{ConnectedSubnets: []netip.Prefix{{}}}, "invalid connected subnet"},
		{"invalid allow", Config{Allow: []netip.Prefix{{}}}, "invalid allow entry"},
		{"allow host bits", Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}}, "host bits set"},
		{"allow everything", Config{Allow: []netip.Prefix{netip.MustParsePrefix("::/0")}}, "allow everything"},
		{"invalid resolver", Config{DNSResolvers: []netip.Addr{{}}}, "invalid DNS resolver"},
		{"unspecified resolver", Config{DNSResolvers: []netip.Addr{netip.IPv4Unspecified()}}, "invalid DNS resolver"},
		{"all errors reported", Config{Allow: []netip.Prefix{{}}, DNSResolvers: []netip.Addr{{}}}, "invalid DNS resolver"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New() = %v, %v; want error containing %q", p, err, tt.want)
			}
		})
	}
}

func TestMustNewPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustNew did not panic on a bad config")
		}
	}()
	MustNew(Config{Allow: []netip.Prefix{{}}})
}

func TestBlocked(t *testing.T) {
	p := MustNew(Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")}})
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"10.1.2.3", true}, // allow entries are ignored
		{"::ffff:10.1.2.3", true},
		{"8.8.8.8", false},
		{"fe80::1%lo", true},
		{"2001:db8::1", false},
	} {
		if got := p.Blocked(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Blocked(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestDNSResolversDedup(t *testing.T) {
	p := MustNew(Config{DNSResolvers: []netip.Addr{
		netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("::ffff:10.0.0.2"),
		netip.MustParseAddr("2001:db8::53"),
	}})
	got := p.DNSResolvers()
	if len(got) != 2 || got[0] != netip.MustParseAddr("10.0.0.2") || got[1] != netip.MustParseAddr("2001:db8::53") {
		t.Errorf("DNSResolvers() = %v", got)
	}
	got[0] = netip.Addr{} // a copy: the policy is immutable
	if p.DNSResolvers()[0] != netip.MustParseAddr("10.0.0.2") {
		t.Error("DNSResolvers returned internal storage")
	}
}

func TestRoutePlan(t *testing.T) {
	p := MustNew(Config{
		ConnectedSubnets: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("10.30.0.0/16")},
		Allow: []netip.Prefix{
			netip.MustParsePrefix("192.168.1.50/32"),
			netip.MustParsePrefix("10.30.0.0/16"),
		},
		DNSResolvers: []netip.Addr{netip.MustParseAddr("172.23.0.2"), netip.MustParseAddr("192.168.1.50")},
	})
	plan := p.RoutePlan()
	var lines []string
	for _, e := range plan {
		lines = append(lines, e.Kind.String()+" "+e.Prefix.String()+" # "+e.Reason)
	}
	text := strings.Join(lines, "\n")
	mustHave := []string{
		"block 10.0.0.0/8 # private range 10.0.0.0/8",
		"block 169.254.0.0/16 # link-local/metadata 169.254.0.0/16",
		"block 198.51.100.0/24 # connected subnet 198.51.100.0/24",
		"block 64:ff9b::a00:0/104 # nat64 private range 10.0.0.0/8",
		"block 64:ff9b::a9fe:0/112 # nat64 link-local/metadata 169.254.0.0/16",
		"punch 64:ff9b::c0a8:132/128 # nat64 allow-ip 192.168.1.50",
		"block 64:ff9b:1::/48 # nat64 local-use 64:ff9b:1::/48",
		"block fc00::/7 # unique-local fc00::/7",
		"punch 192.168.1.50/32 # allow-ip 192.168.1.50",
		"punch 10.30.0.0/16 # allow-cidr 10.30.0.0/16",
		"punch 172.23.0.2/32 # dns resolver 172.23.0.2",
	}
	for _, want := range mustHave {
		if !strings.Contains(text, want+"\n") && !strings.HasSuffix(text, want) {
			t.Errorf("route plan lacks %q:\n%s", want, text)
		}
	}
	// Each prefix once; the tied connected subnet only as a punch; blocks
	// before punches; IPv4 before IPv6 within a kind.
	seen := map[netip.Prefix]bool{}
	lastKindPunch := false
	lastV6 := false
	for _, e := range plan {
		if seen[e.Prefix] {
			t.Errorf("prefix %v listed twice", e.Prefix)
		}
		seen[e.Prefix] = true
		if e.Prefix == netip.MustParsePrefix("10.30.0.0/16") && e.Kind != RoutePunch {
			t.Errorf("tied prefix 10.30.0.0/16 is %v, want punch", e.Kind)
		}
		isPunch := e.Kind == RoutePunch
		if lastKindPunch && !isPunch {
			t.Errorf("block %v after a punch", e.Prefix)
		}
		if isPunch != lastKindPunch {
			lastV6 = false
		}
		if lastV6 && e.Prefix.Addr().Is4() {
			t.Errorf("IPv4 %v after IPv6 within %v", e.Prefix, e.Kind)
		}
		lastKindPunch, lastV6 = isPunch, e.Prefix.Addr().Is6()
	}
	if strings.Contains(text, "::ffff:") {
		t.Errorf("route plan has IPv4-mapped prefixes:\n%s", text)
	}
	if strings.Count(text, "192.168.1.50/32") != 1 {
		t.Errorf("allow-ip that is also a resolver must be punched once:\n%s", text)
	}
	// Stable output.
	again := p.RoutePlan()
	for i := range plan {
		if plan[i] != again[i] {
			t.Fatalf("RoutePlan not stable at %d: %v vs %v", i, plan[i], again[i])
		}
	}
}

func TestStrings(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{ProtoTCP.String(), "tcp"},
		{ProtoUDP.String(), "udp"},
		{ProtoICMP.String(), "icmp"},
		{Proto(9).String(), "proto(9)"},
		{RouteBlock.String(), "block"},
		{RoutePunch.String(), "punch"},
		{RouteKind(9).String(), "routekind(9)"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	var p Proto
	for _, s := range []string{"tcp", "udp", "icmp"} {
		if err := p.UnmarshalText([]byte(s)); err != nil || p.String() != s {
			t.Errorf("UnmarshalText(%q) = %v, %v", s, p, err)
		}
	}
	if err := p.UnmarshalText([]byte("sctp")); err == nil {
		t.Error("UnmarshalText(sctp) succeeded")
	}
}

// A verdict says in types what decided it: code decides on Kind and Entry,
// never on Rule's text. The IPv4-mapped and NAT64 forms of an IPv4 entry
// name the entry itself.
func TestVerdictKind(t *testing.T) {
	pool := netip.MustParsePrefix("198.18.0.0/15")
	p := MustNew(Config{
		Allow:        []netip.Prefix{pool, netip.MustParsePrefix("203.0.113.9/32")},
		HostRoutes:   []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		DNSResolvers: []netip.Addr{netip.MustParseAddr("10.0.0.2")},
		NAT64:        []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96")},
	})
	for _, tt := range []struct {
		dst   string
		kind  VerdictKind
		entry string
	}{
		{"198.18.0.1:443", KindAllow, "198.18.0.0/15"},
		{"[64:ff9b::198.18.0.1]:443", KindAllow, "198.18.0.0/15"},
		{"[2001:db8:64::198.18.0.1]:443", KindAllow, "198.18.0.0/15"},
		{"[::ffff:198.18.0.1]:443", KindAllow, "198.18.0.0/15"},
		{"203.0.113.9:22", KindAllow, "203.0.113.9/32"},
		{"198.51.100.7:80", KindBlock, "198.51.100.0/24"},
		{"[64:ff9b::10.1.2.3]:80", KindBlock, "10.0.0.0/8"},
		{"[fd00::1]:80", KindBlock, "fc00::/7"},
		{"10.0.0.2:53", KindDNS, ""},
		{"10.0.0.2:54", KindBlock, "10.0.0.0/8"},
		{"192.0.2.200:443", KindInternet, ""},
	} {
		v := p.Check(ProtoTCP, ap(tt.dst))
		var entry netip.Prefix
		if tt.entry != "" {
			entry = netip.MustParsePrefix(tt.entry)
		}
		if v.Kind != tt.kind || v.Entry != entry || v.Allowed != (tt.kind != KindBlock) {
			t.Errorf("%s: %+v, want kind %d, entry %v", tt.dst, v, tt.kind, entry)
		}
	}
	fc := FailClosed("fail-closed: test").Check(ProtoTCP, ap("192.0.2.200:443"))
	if fc.Allowed || fc.Kind != KindBlock {
		t.Errorf("fail-closed: %+v", fc)
	}
	if v := p.Check(ProtoTCP, netip.AddrPort{}); v.Allowed || v.Kind != KindRefused {
		t.Errorf("invalid destination: %+v", v)
	}
}
