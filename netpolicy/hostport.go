package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// HostPort is one port of the host's loopback the sandbox may reach
// (--allow-host-port): the jail's gateway address relays it to
// 127.0.0.1 (or [::1]) on the host. Every other port of the gateway stays
// refused and recorded.
type HostPort struct {
	Proto Proto  `json:"proto"`
	Port  uint16 `json:"port"`
}

// String is "PORT/tcp" or "PORT/udp".
func (h HostPort) String() string { return fmt.Sprintf("%d/%s", h.Port, h.Proto) }

// ParseHostPort parses "PORT", "PORT/tcp" or "PORT/udp" (TCP when no
// protocol is written). Port 0 is refused.
func ParseHostPort(s string) (HostPort, error) {
	in := strings.TrimSpace(s)
	num, proto, hasProto := strings.Cut(in, "/")
	h := HostPort{Proto: ProtoTCP}
	if hasProto {
		switch strings.ToLower(proto) {
		case "tcp":
		case "udp":
			h.Proto = ProtoUDP
		default:
			return HostPort{}, fmt.Errorf("%q: the protocol is tcp or udp, e.g. 11434 or 5353/udp", s)
		}
	}
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 {
		return HostPort{}, fmt.Errorf("%q is not a port from 1 to 65535 (e.g. 11434 or 5353/udp)", s)
	}
	h.Port = uint16(n)
	return h, nil
}

// loopback4 and loopback6 are the host's loopback ranges; unspecified4
// and unspecified6 the unspecified addresses, which a connection made on
// the host takes to the host's loopback.
var (
	loopback4    = netip.MustParsePrefix("127.0.0.0/8")
	loopback6    = netip.MustParsePrefix("::1/128")
	unspecified4 = netip.MustParsePrefix("0.0.0.0/32")
	unspecified6 = netip.MustParsePrefix("::/128")
)

// RefuseLoopback refuses an allow entry that names the host's loopback, or
// the unspecified address 0.0.0.0 or ::, or a range holding any of them
// (0.0.0.0/8, 64.0.0.0/2, ::/127), in any of their forms: IPv4-mapped
// (::ffff:127.0.0.1) and NAT64 under the well-known prefix 64:ff9b::/96
// (RFC 6052: 64:ff9b::7f00:1, 64:ff9b::, 64:ff9b::7f00:0/104, and any
// range holding all of 64:ff9b::/96). Inside the jail, 127.0.0.1 and ::1
// are the sandbox's own loopback, so such an entry could never reach the
// host and would silently do nothing; 0.0.0.0 and :: dialed on the host
// side would reach the host's loopback (the relay refuses that at connect
// time whatever the policy says, so the entry could only ever be
// refused); a NAT64 form of either leads, if anywhere, to a translator's
// loopback (RFC 6052 forbids translating them), never to a loopback
// service the sandbox may use. The host's loopback services are reached
// through --allow-host-port. ParseAllow applies it (the command line, the
// shadow's config), as does package sandbox to Spec.Allow; New does not
// (a policy built in code may allow what it likes, and routes keep
// loopback local and the relay refuses it anyway). A /0 never gets here
// from ParseAllow, which refuses it first as "allow everything". Network-
// specific NAT64 prefixes (Config.NAT64) are found on the host while the
// sandbox runs, after the entries are parsed: their forms are not refused
// here.
func RefuseLoopback(pfx netip.Prefix) error {
	pfx = unmapPrefix(pfx)
	name := prefixName(pfx)
	const use = "to reach a service on the host's loopback, use --allow-host-port PORT (config allow-host-port) and connect to host.internal:PORT"
	switch {
	case pfx.Overlaps(loopback4) || pfx.Overlaps(loopback6):
		return fmt.Errorf("%s is loopback, which inside the jail is the sandbox's own: %s", name, use)
	case pfx.Overlaps(unspecified4) || pfx.Overlaps(unspecified6):
		what := "is the unspecified address"
		if !pfx.IsSingleIP() {
			what = "holds the unspecified address " + pfx.Masked().Addr().String()
		}
		return fmt.Errorf("%s %s, which a connection made on the host takes to the host's loopback, so it is never dialed: %s", name, what, use)
	case pfx.Bits() <= nat64Prefix.Bits() && pfx.Overlaps(nat64Prefix):
		return fmt.Errorf("%s holds every IPv4 address in its NAT64 form (%s), loopback %s and the unspecified address %s among them: %s", name, nat64Prefix, loopback4, unspecified4.Addr(), use)
	case nat64Prefix.Contains(pfx.Addr()):
		// A NAT64 form (longer than the prefix): refused as the IPv4
		// range it embeds (its last 32 bits) would be, saying so.
		v4 := netip.PrefixFrom(HostSideAddr(pfx.Addr()), pfx.Bits()-nat64Prefix.Bits())
		if err := RefuseLoopback(v4); err != nil {
			return fmt.Errorf("%s is %s in its NAT64 form (%s): %w", name, prefixName(v4), nat64Prefix, err)
		}
	}
	return nil
}

// prefixName is p as written in messages: a single address without its
// length.
func prefixName(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// HostSideAddr is the IPv4 address an IPv4-mapped (::ffff:a.b.c.d) or
// well-known NAT64 (64:ff9b::a.b.c.d, RFC 6052) form stands for, else a
// itself: a translator on the host's path takes the NAT64 form to that
// address. RefuseLoopback refuses an allow entry by it; the relay
// (package userstack) refuses a destination by it at connect time.
func HostSideAddr(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if nat64Prefix.Contains(a) {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}
