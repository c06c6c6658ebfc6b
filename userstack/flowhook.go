package userstack

import (
	"net/netip"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Flow is a new flow the stack let through (Config.OnFlow), for the
// audit log.
type Flow struct {
	Proto netpolicy.Proto
	// Src is the sandbox's end of the flow (its socket's address and
	// port), by which the process behind it is found.
	Src netip.AddrPort
	// Dst is the destination the sandbox addressed (a synthetic address
	// for a flow to a name, whose host-side address is decided later).
	Dst netip.AddrPort
	// Target is where the host side goes, when known at admission (an
	// address flow; the host's loopback for a host port or the DNS relay).
	Target netip.AddrPort
	// Name is the name of a flow to a name.
	Name string
	// Rule is the rule that let it through.
	Rule string
}

// noteTCP tells Config.OnFlow of a TCP flow admitted (newTCP, on the
// event loop: OnFlow must be quick), with the rule its admission found
// (rule: the policy's for an address; a name's is nf.rule): nothing is
// decided again here. Only TCP so far: UDP flows and names' DNS queries
// are not reported.
func (st *Stack) noteTCP(key flowKey, target netip.AddrPort, nf *nameFlow, rule string) {
	dst := key.dst
	fn := st.cfg.OnFlow
	if fn == nil {
		return
	}
	f := Flow{Proto: netpolicy.ProtoTCP, Src: key.src, Dst: dst}
	switch {
	case nf != nil && nf.dns:
		f.Rule = "dns (the domain allowlist's resolver)"
	case nf != nil:
		f.Name, f.Rule = nf.name, nf.rule
	case st.isLocal(dst.Addr()):
		f.Target = target
		f.Rule = "gateway " + target.String()
	default:
		f.Target, f.Rule = target, rule
	}
	fn(f)
}
