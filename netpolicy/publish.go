package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Publish is one published port (--publish): the launcher listens on the
// host at HostAddr:HostPort and relays each connection (TCP) or each
// client's datagrams (UDP) to the sandbox's Port.
type Publish struct {
	HostAddr netip.Addr `json:"hostAddr"`
	HostPort uint16     `json:"hostPort"`
	Port     uint16     `json:"port"`
	Proto    Proto      `json:"proto"`
}

// String is "HOSTADDR:HOSTPORT:PORT/proto" ("[::1]:8080:80/tcp").
func (p Publish) String() string {
	return fmt.Sprintf("%s:%d/%s", netip.AddrPortFrom(p.HostAddr, p.HostPort), p.Port, p.Proto)
}

// ParsePublish parses "[HOSTADDR:]HOSTPORT:PORT[/udp]": HOSTADDR is an
// IPv4 address or a bracketed IPv6 one ("[::1]"), 127.0.0.1 when left out
// (0.0.0.0 only when written); TCP unless /udp.
func ParsePublish(s string) (Publish, error) {
	bad := func(why string) (Publish, error) {
		return Publish{}, fmt.Errorf("%q: %s (want [HOSTADDR:]HOSTPORT:PORT[/udp], e.g. 8080:80 or 0.0.0.0:5353:53/udp)", s, why)
	}
	in := strings.TrimSpace(s)
	p := Publish{Proto: ProtoTCP, HostAddr: netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	if rest, proto, ok := strings.Cut(in, "/"); ok {
		switch strings.ToLower(proto) {
		case "tcp":
		case "udp":
			p.Proto = ProtoUDP
		default:
			return bad("the protocol is tcp or udp")
		}
		in = rest
	}
	i := strings.LastIndex(in, ":")
	if i < 0 {
		return bad("no HOSTPORT:PORT")
	}
	front, port := in[:i], in[i+1:]
	hostPort := front
	if j := strings.LastIndex(front, ":"); j >= 0 {
		addr := front[:j]
		hostPort = front[j+1:]
		if strings.HasPrefix(addr, "[") && strings.HasSuffix(addr, "]") {
			addr = addr[1 : len(addr)-1]
		} else if strings.Contains(addr, ":") {
			return bad("put an IPv6 host address in brackets, [::1]")
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" {
			return bad(fmt.Sprintf("%q is not an IP address of this host", addr))
		}
		p.HostAddr = a.Unmap()
	}
	hp, err1 := strconv.ParseUint(hostPort, 10, 16)
	cp, err2 := strconv.ParseUint(port, 10, 16)
	if err1 != nil || err2 != nil || hp == 0 || cp == 0 {
		return bad("ports are numbers from 1 to 65535")
	}
	p.HostPort, p.Port = uint16(hp), uint16(cp)
	if p.HostAddr.IsMulticast() {
		return bad("a multicast address cannot be listened on")
	}
	return p, nil
}
