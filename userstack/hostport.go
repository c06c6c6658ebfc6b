package userstack

import (
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/flowowner"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Host loopback ports (Config.HostPorts, --allow-host-port): a flow from
// the sandbox to one of the Gateways on an allowed port and protocol is
// relayed to the same port of the host's loopback, 127.0.0.1 for an IPv4
// gateway (or [::1] when only that address has the port open: see
// hostLoopback), [::1] for an IPv6 one. The stack dials on the host side, so the
// loopback it reaches is the launcher's network namespace's. The flow
// skips the policy (loopback is always blocked there): the port list is
// the whole decision, and every other port of the gateway stays refused
// and recorded, as before.

// hostLoChoice is a cached hostLoopback answer.
type hostLoChoice struct {
	addr netip.Addr
	at   time.Time
}

// hostLoTTL is how long hostLoopback's answer for a port is kept: the
// UDP path asks at every datagram, and a server that moves between
// 127.0.0.1 and ::1 is found again this soon.
const hostLoTTL = 2 * time.Second

// hostLoopbackCached is hostLoopback, asked at most once per hostLoTTL
// for each port.
func (st *Stack) hostLoopbackCached(h netpolicy.HostPort) netip.Addr {
	now := st.cfg.Now()
	if v, ok := st.hostLo.Load(h); ok {
		if c := v.(hostLoChoice); now.Sub(c.at) < hostLoTTL && now.Sub(c.at) >= 0 {
			return c.addr
		}
	}
	a := hostLoopback(h.Proto, h.Port)
	st.hostLo.Store(h, hostLoChoice{a, now})
	return a
}

// hostLoopback picks the loopback address an IPv4 gateway's host port
// leads to: 127.0.0.1, unless nothing listens there on port (nor on
// 0.0.0.0) while something listens on [::1] (or [::]), as a server bound
// to "localhost" on a host that resolves it to ::1 first does. The
// kernel's socket table says (sock_diag: a dump of the listening TCP, or
// unconnected UDP, sockets of a family; no packet is sent and nothing is
// bound). Any error keeps 127.0.0.1.
func hostLoopback(proto netpolicy.Proto, port uint16) netip.Addr {
	lo4 := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if on4, err := loopbackListener(unix.AF_INET, proto, port); err != nil || on4 {
		return lo4
	}
	if on6, err := loopbackListener(unix.AF_INET6, proto, port); err == nil && on6 {
		return netip.IPv6Loopback()
	}
	return lo4
}

// loopbackListener reports whether a socket of family listens on port
// of the loopback or the wildcard address (TCP: LISTEN; UDP: bound and
// unconnected), from a dump of the kernel's socket diagnostics in the
// launcher's network namespace (flowowner's request and decoder).
func loopbackListener(family int, proto netpolicy.Proto, port uint16) (bool, error) {
	fd, err := flowowner.OpenDiag()
	if err != nil {
		return false, err
	}
	d := flowowner.NewDiag(fd)
	defer d.Close()
	ipProto, states := uint8(unix.IPPROTO_TCP), uint32(1)<<10 // TCP_LISTEN
	if proto == netpolicy.ProtoUDP {
		ipProto, states = unix.IPPROTO_UDP, 1<<7 // TCP_CLOSE: unconnected
	}
	socks, err := d.Dump(uint8(family), ipProto, states)
	if err != nil {
		return false, err
	}
	for _, s := range socks {
		if a := s.Local.Addr(); s.Local.Port() == port && (a.IsLoopback() || a.IsUnspecified()) {
			return true, nil
		}
	}
	return false, nil
}

// HostPorts returns the host loopback ports the sandbox reaches now.
func (st *Stack) HostPorts() []netpolicy.HostPort { return st.adm.HostPorts() }

// SetHostPorts replaces the host loopback ports the sandbox reaches
// (claude-sandbox allow/revoke --host-port, an approved request), in
// force for the next new flow; flows open stay open.
func (st *Stack) SetHostPorts(ports []netpolicy.HostPort) { st.adm.SetHostPorts(ports) }
