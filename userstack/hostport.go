package userstack

import (
	"net/netip"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Host loopback ports (Config.HostPorts, --allow-host-port): a flow from
// the sandbox to one of the Gateways on an allowed port and protocol is
// relayed to the same port of the host's loopback, 127.0.0.1 for an IPv4
// gateway, [::1] for an IPv6 one. The stack dials on the host side, so the
// loopback it reaches is the launcher's network namespace's. The flow
// skips the policy (loopback is always blocked there): the port list is
// the whole decision, and every other port of the gateway stays refused
// and recorded, as before.

// hostPortTarget returns where a flow of proto to dst goes when dst is a
// gateway's allowed host port; false otherwise (the caller refuses it).
func (st *Stack) hostPortTarget(proto netpolicy.Proto, dst netip.AddrPort) (netip.AddrPort, bool) {
	if len(st.cfg.HostPorts) == 0 {
		return netip.AddrPort{}, false
	}
	a := dst.Addr().Unmap()
	if !st.isGateway(a) {
		return netip.AddrPort{}, false
	}
	for _, h := range st.cfg.HostPorts {
		if h.Proto == proto && h.Port == dst.Port() {
			lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
			if a.Is6() {
				lo = netip.IPv6Loopback()
			}
			return netip.AddrPortFrom(lo, dst.Port()), true
		}
	}
	return netip.AddrPort{}, false
}
