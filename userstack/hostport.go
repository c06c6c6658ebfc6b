package userstack

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
// unconnected).
func loopbackListener(family int, proto netpolicy.Proto, port uint16) (bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	ipProto, states := uint8(unix.IPPROTO_TCP), uint32(1)<<10 // TCP_LISTEN
	if proto == netpolicy.ProtoUDP {
		ipProto, states = unix.IPPROTO_UDP, 1<<7 // TCP_CLOSE: unconnected
	}
	// nlmsghdr (16 bytes) + inet_diag_req_v2 (8 bytes + a 48-byte
	// inet_diag_sockid, left zero: a dump filters by state only).
	req := make([]byte, 16+56)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	req[16], req[17] = uint8(family), ipProto
	binary.NativeEndian.PutUint32(req[20:], states)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, err
	}
	buf := make([]byte, 32<<10)
	found := false
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return false, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return false, err
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return found, nil
			case unix.NLMSG_ERROR:
				return false, errors.New("sock_diag refused the dump")
			}
			// inet_diag_msg: family, state, timer, retrans, then the
			// sockid: sport (big-endian) at 4, the source address at 8.
			d := m.Data
			if len(d) < 24 || binary.BigEndian.Uint16(d[4:]) != port {
				continue
			}
			var a netip.Addr
			if family == unix.AF_INET {
				a = netip.AddrFrom4([4]byte(d[8:12]))
			} else if len(d) >= 24 {
				a = netip.AddrFrom16([16]byte(d[8:24])).Unmap()
			}
			if a.IsLoopback() || a.IsUnspecified() {
				found = true
			}
		}
	}
}

// HostPorts returns the host loopback ports the sandbox reaches now.
func (st *Stack) HostPorts() []netpolicy.HostPort { return st.adm.HostPorts() }

// SetHostPorts replaces the host loopback ports the sandbox reaches
// (claude-sandbox allow/revoke --host-port, an approved request), in
// force for the next new flow; flows open stay open.
func (st *Stack) SetHostPorts(ports []netpolicy.HostPort) { st.adm.SetHostPorts(ports) }
