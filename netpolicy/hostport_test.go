package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHostPort(t *testing.T) {
	for in, want := range map[string]HostPort{
		"11434": {ProtoTCP, 11434}, "8080/tcp": {ProtoTCP, 8080}, "5353/udp": {ProtoUDP, 5353}, " 1/UDP ": {ProtoUDP, 1}, "65535": {ProtoTCP, 65535},
	} {
		got, err := ParseHostPort(in)
		if err != nil || got != want {
			t.Errorf("ParseHostPort(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "65536", "http", "80/sctp", "-1", "80/", "/udp", "127.0.0.1:80"} {
		if got, err := ParseHostPort(in); err == nil {
			t.Errorf("ParseHostPort(%q) = %v, want an error", in, got)
		}
	}
}

// Loopback in an allow entry would be the sandbox's own loopback and do
// nothing: refused, naming --allow-host-port.
func TestAllowLoopbackRefused(t *testing.T) {
	for _, in := range []string{"127.0.0.1", "127.0.0.53", "::1", "::ffff:127.0.0.1", "127.0.0.0/8", "127.5.0.0/16", "64.0.0.0/2", "::/127"} {
		_, err := ParseAllow(in)
		if err == nil || !strings.Contains(err.Error(), "--allow-host-port") {
			t.Errorf("ParseAllow(%q): %v, want a refusal naming --allow-host-port", in, err)
		}
	}
	for _, in := range []string{"10.1.2.3", "128.0.0.0/8", "::2", "fd00::/8"} {
		if _, err := ParseAllow(in); err != nil {
			t.Errorf("ParseAllow(%q): %v", in, err)
		}
	}
}

// The unspecified addresses (0.0.0.0, ::), which a connection made on the
// host takes to the host's loopback, and any range holding them are
// refused the same way, naming the value and --allow-host-port. Ranges
// next to them, and 0.0.0.0/8's other neighbours, are not; /0 stays
// refused as "allow everything" (checked before).
func TestAllowUnspecifiedRefused(t *testing.T) {
	for in, name := range map[string]string{
		"0.0.0.0": "0.0.0.0 is the unspecified address", " 0.0.0.0 ": "0.0.0.0 is the unspecified address",
		"0.0.0.0/32": "0.0.0.0 is the unspecified address", "::": ":: is the unspecified address",
		"::/128": ":: is the unspecified address", "0::0": ":: is the unspecified address",
		"::ffff:0.0.0.0": "0.0.0.0 is the unspecified address", "::ffff:0.0.0.0/128": "0.0.0.0 is the unspecified address",
		"::ffff:0.0.0.0/104": "0.0.0.0/8 holds the unspecified address 0.0.0.0",
		"0.0.0.0/8":          "0.0.0.0/8 holds the unspecified address 0.0.0.0",
		"0.0.0.0/31":         "0.0.0.0/31 holds the unspecified address 0.0.0.0",
		"0.0.0.0/2":          "0.0.0.0/2 holds the unspecified address 0.0.0.0",
		"0.0.0.0/1":          "0.0.0.0/1 is loopback", // holds 127/8 too
		"::/127":             "::/127 is loopback",    // holds ::1 too
		"::/1":               "::/1 is loopback",
	} {
		_, err := ParseAllow(in)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "--allow-host-port") {
			t.Errorf("ParseAllow(%q): %v, want a refusal %q naming --allow-host-port", in, err, name)
		}
	}
	for _, in := range []string{"0.0.0.0/0", "::/0"} {
		if _, err := ParseAllow(in); err == nil || !strings.Contains(err.Error(), "allow everything") {
			t.Errorf("ParseAllow(%q): %v, want the allow-everything refusal", in, err)
		}
	}
	for _, in := range []string{"0.0.0.1", "0.1.0.0/16", "1.0.0.0/8", "::2", "::2/127", "::4/126", "8000::/1", "128.0.0.0/1"} {
		if _, err := ParseAllow(in); err != nil {
			t.Errorf("ParseAllow(%q): %v", in, err)
		}
	}
	for _, p := range []string{"0.0.0.0/32", "::/128", "::ffff:0.0.0.0/128", "0.0.0.0/8"} {
		if RefuseLoopback(netip.MustParsePrefix(p)) == nil {
			t.Errorf("RefuseLoopback(%s) = nil", p)
		}
	}
}

// The NAT64 forms (well-known prefix 64:ff9b::/96, RFC 6052: the IPv4
// address in the last 32 bits) of loopback and of the unspecified address,
// and ranges holding them, are refused as the IPv4 forms are, the message
// naming the value, the IPv4 address it embeds and --allow-host-port; the
// NAT64 forms of other addresses are not. They were accepted before.
func TestAllowNAT64LoopbackRefused(t *testing.T) {
	for in, want := range map[string][]string{
		"64:ff9b::7f00:1":      {"64:ff9b::7f00:1 is 127.0.0.1 in its NAT64 form (64:ff9b::/96)", "127.0.0.1 is loopback"},
		"64:ff9b::127.0.0.1":   {"64:ff9b::7f00:1 is 127.0.0.1 in its NAT64 form", "127.0.0.1 is loopback"},
		"64:ff9b::7f01:203":    {"64:ff9b::7f01:203 is 127.1.2.3 in its NAT64 form", "127.1.2.3 is loopback"},
		"64:ff9b::7f00:1/128":  {"64:ff9b::7f00:1 is 127.0.0.1 in its NAT64 form", "127.0.0.1 is loopback"},
		"64:ff9b::7f00:0/104":  {"64:ff9b::7f00:0/104 is 127.0.0.0/8 in its NAT64 form", "127.0.0.0/8 is loopback"},
		"64:ff9b::7f05:0/112":  {"64:ff9b::7f05:0/112 is 127.5.0.0/16 in its NAT64 form", "127.5.0.0/16 is loopback"},
		"64:ff9b::/97":         {"64:ff9b::/97 is 0.0.0.0/1 in its NAT64 form", "0.0.0.0/1 is loopback"},
		"64:ff9b::":            {"64:ff9b:: is 0.0.0.0 in its NAT64 form (64:ff9b::/96)", "0.0.0.0 is the unspecified address"},
		"64:ff9b::0.0.0.0/128": {"64:ff9b:: is 0.0.0.0 in its NAT64 form", "0.0.0.0 is the unspecified address"},
		"64:ff9b::/104":        {"64:ff9b::/104 is 0.0.0.0/8 in its NAT64 form", "0.0.0.0/8 holds the unspecified address 0.0.0.0"},
		"64:ff9b::/127":        {"64:ff9b::/127 is 0.0.0.0/31 in its NAT64 form", "0.0.0.0/31 holds the unspecified address 0.0.0.0"},
		"64:ff9b::/96":         {"64:ff9b::/96 holds every IPv4 address in its NAT64 form (64:ff9b::/96), loopback 127.0.0.0/8 and the unspecified address 0.0.0.0 among them"},
		"64:ff9b::/64":         {"64:ff9b::/64 holds every IPv4 address in its NAT64 form"},
		"64::/16":              {"64::/16 holds every IPv4 address in its NAT64 form"},
	} {
		_, err := ParseAllow(in)
		for _, w := range append(want, "--allow-host-port") {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("ParseAllow(%q): %v, want a refusal saying %q", in, err, w)
			}
		}
		pfx, err := netip.ParsePrefix(in)
		if a, aerr := netip.ParseAddr(in); aerr == nil {
			pfx, err = netip.PrefixFrom(a, a.BitLen()), nil
		}
		if err != nil || RefuseLoopback(pfx) == nil { // as Spec.Allow is checked
			t.Errorf("RefuseLoopback(%s) = nil (%v)", in, err)
		}
	}
	for _, in := range []string{"64:ff9b::1.1.1.1", "64:ff9b::8000:0/97", "64:ff9b::8000:0/98", "64:ff9b::1:0/112", "64:ff9b::a01:203", "64:ff9b::ffff:ffff", "64:ff9b:0:0:0:1::/96", "64:ff9a::/32", "64:ff9c::7f00:1"} {
		if _, err := ParseAllow(in); err != nil {
			t.Errorf("ParseAllow(%q): %v", in, err)
		}
	}
}

func TestParsePublish(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	for in, want := range map[string]Publish{
		"8080:80":              {lo, 8080, 80, ProtoTCP},
		"8080:80/tcp":          {lo, 8080, 80, ProtoTCP},
		"5353:53/udp":          {lo, 5353, 53, ProtoUDP},
		"0.0.0.0:8080:80":      {netip.IPv4Unspecified(), 8080, 80, ProtoTCP},
		"[::1]:8080:80":        {netip.IPv6Loopback(), 8080, 80, ProtoTCP},
		"192.0.2.2:9000:9/UDP": {netip.MustParseAddr("192.0.2.2"), 9000, 9, ProtoUDP},
	} {
		got, err := ParsePublish(in)
		if err != nil || got != want {
			t.Errorf("ParsePublish(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "80", "0:80", "80:0", "x:80", "::1:80:80", "1.2.3:80:80", "80:80/sctp", "224.0.0.1:80:80", "70000:80"} {
		if got, err := ParsePublish(in); err == nil {
			t.Errorf("ParsePublish(%q) = %v, want an error", in, got)
		}
	}
}

// New takes loopback (a policy built in code may allow what it likes);
// RefuseLoopback, which ParseAllow and package sandbox apply, does not.
func TestRefuseLoopbackNotInNew(t *testing.T) {
	if _, err := New(Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}); err != nil {
		t.Errorf("New with a loopback allow entry: %v", err)
	}
	for _, p := range []string{"127.0.0.1/32", "::ffff:127.0.0.1/128", "::1/128"} {
		if RefuseLoopback(netip.MustParsePrefix(p)) == nil {
			t.Errorf("RefuseLoopback(%s) = nil", p)
		}
	}
}

func TestHostSideAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1":         "127.0.0.1",
		"::ffff:127.0.0.1":  "127.0.0.1",
		"64:ff9b::7f00:1":   "127.0.0.1",
		"64:ff9b::":         "0.0.0.0",
		"64:ff9b::1.2.3.4":  "1.2.3.4",
		"64:ff9b:1::7f00:1": "64:ff9b:1::7f00:1", // local-use prefix: not unwrapped
		"::1":               "::1",
		"2001:db8::7f00:1":  "2001:db8::7f00:1",
	} {
		if got := HostSideAddr(netip.MustParseAddr(in)); got != netip.MustParseAddr(want) {
			t.Errorf("HostSideAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
