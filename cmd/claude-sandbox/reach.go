package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/jail"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// openings is the exit summary's line of what the sandbox was let reach
// on purpose: host loopback ports, published ports, devices ("" when
// none).
func openings(p *plan.Plan) string {
	var parts []string
	if p.Egress != nil && len(p.Egress.HostPorts) > 0 {
		var ports []string
		for _, h := range p.Egress.HostPorts {
			ports = append(ports, h.String())
		}
		via := jail.HostInternal
		if p.Egress.HostAddress != nil {
			via = fmt.Sprintf("%s (%s)", jail.HostInternal, p.Egress.HostAddress)
		}
		parts = append(parts, fmt.Sprintf("host loopback port %s reachable at %s", strings.Join(ports, ", "), via))
	}
	if p.Egress != nil {
		for _, pb := range p.Egress.Publish {
			parts = append(parts, fmt.Sprintf("published %s to the sandbox's port %d/%s", netip.AddrPortFrom(pb.HostAddr, pb.HostPort), pb.Port, pb.Proto))
		}
	}
	for _, op := range p.Mounts {
		if op.Kind == mounts.DevBind {
			parts = append(parts, fmt.Sprintf("device %s at %s", op.Src, op.Dst))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "openings: " + strings.Join(parts, "; ")
}

// publishedEnv is the value of verify.PublishedEnv: the published ports,
// space-separated, as --publish spells them in full.
func publishedEnv(pubs []netpolicy.Publish) string {
	var out []string
	for _, p := range pubs {
		out = append(out, p.String())
	}
	return strings.Join(out, " ")
}
