package userstack

import (
	"net/netip"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Flow is a new flow the stack let through (Config.OnFlow), for the
// audit log.
type Flow struct {
	Proto netpolicy.Proto
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
// event loop: OnFlow must be quick). Only TCP so far: UDP flows and
// names' DNS queries are not reported.
func (st *Stack) noteTCP(dst, target netip.AddrPort, nf *nameFlow) {
	fn := st.cfg.OnFlow
	if fn == nil {
		return
	}
	f := Flow{Proto: netpolicy.ProtoTCP, Dst: dst}
	switch {
	case nf != nil:
		f.Name = nf.name
		if st.names != nil {
			_, f.Rule = st.names.rules.Allow(nf.name, dst.Port())
		}
	case st.isLocal(dst.Addr()):
		f.Target = target
		f.Rule = "gateway " + target.String()
	default:
		f.Target = target
		f.Rule = st.cfg.Policy.Check(netpolicy.ProtoTCP, target).Rule
	}
	fn(f)
}
