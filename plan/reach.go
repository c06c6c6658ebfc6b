package plan

import (
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// hostPorts puts the host loopback ports (--allow-host-port) in p's
// egress: they exist only with the jail, whose gateway relays them
// (--net=host reaches the host's loopback already, --net=none nothing).
func hostPorts(p *Plan, ports []netpolicy.HostPort) error {
	if len(ports) == 0 {
		return nil
	}
	if p.Net != NetJail {
		return errf("--allow-host-port applies to the egress jail (--net=jail), not --net=%s (with --net=host the host's loopback is reachable already)", p.Net)
	}
	seen := map[netpolicy.HostPort]bool{}
	for _, h := range ports {
		if h.Port == 0 || (h.Proto != netpolicy.ProtoTCP && h.Proto != netpolicy.ProtoUDP) {
			return errf("--allow-host-port %s: want a port from 1 to 65535, tcp or udp", h)
		}
		if !seen[h] {
			seen[h] = true
			p.Egress.HostPorts = append(p.Egress.HostPorts, h)
		}
	}
	return nil
}
