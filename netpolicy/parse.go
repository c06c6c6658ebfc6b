package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseAllow parses one allow entry: a bare address ("10.1.2.3",
// "2001:db8::7"), which stays a single-host /32 or /128 allow-ip, or a CIDR
// ("10.1.0.0/16"), which is honoured as written (allow-cidr). Surrounding
// space is ignored and IPv4-mapped forms are unmapped. It refuses, with an
// error saying why: garbage, zones ("fe80::1%eth0"), a CIDR with host bits
// set ("10.1.2.3/8", ambiguous: the error names both readings), and /0
// (allowing everything is the jail's off switch, not an allow entry).
func ParseAllow(s string) (netip.Prefix, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return netip.Prefix{}, fmt.Errorf("empty allow entry")
	}
	if strings.Contains(in, "%") {
		return netip.Prefix{}, fmt.Errorf("allow entry %q: zones are not supported", s)
	}
	var pfx netip.Prefix
	if strings.Contains(in, "/") {
		p, err := netip.ParsePrefix(in)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("allow entry %q is not an IP address or CIDR (want e.g. 10.1.2.3 or 10.1.0.0/16)", s)
		}
		pfx = p
	} else {
		a, err := netip.ParseAddr(in)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("allow entry %q is not an IP address or CIDR (want e.g. 10.1.2.3 or 10.1.0.0/16)", s)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	pfx, err := checkAllow(pfx)
	if err != nil {
		return netip.Prefix{}, err
	}
	return pfx, RefuseLoopback(pfx)
}

// checkAllow validates and canonicalises an allow prefix.
func checkAllow(pfx netip.Prefix) (netip.Prefix, error) {
	if !pfx.IsValid() {
		return netip.Prefix{}, fmt.Errorf("invalid allow entry %v", pfx)
	}
	if pfx.Addr().Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("allow entry %v: zones are not supported", pfx)
	}
	if pfx.Addr().Is4In6() && pfx.Bits() < 96 {
		return netip.Prefix{}, fmt.Errorf("allow entry %v: an IPv4-mapped CIDR must be /96 or longer", pfx)
	}
	pfx = unmapPrefix(pfx)
	if pfx.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("allow entry %v would allow everything; to turn the jail off use the egress-jail = 0 setting instead", pfx)
	}
	if m := pfx.Masked(); m != pfx {
		return netip.Prefix{}, fmt.Errorf("allow entry %v has host bits set: write %v for the network or %v for the single host",
			pfx, m, netip.PrefixFrom(pfx.Addr(), pfx.Addr().BitLen()))
	}
	return pfx, nil
}

// ParseInternetCIDR reads an --internet-cidr / internet-cidr value: a
// prefix whose host routes are not internal (Config.Internet), masked.
func ParseInternetCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR (e.g. 198.18.0.0/15)", s)
	}
	return p.Masked(), nil
}
