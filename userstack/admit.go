package userstack

import (
	"context"
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
)

// The stack's side of package admission: the admitter is built from the
// stack's configuration, and the relay acts on its decisions (tcp_input.go,
// udp.go, icmp.go, peek.go, ready6.go); the refusals it decides are
// recorded here.

// newAdmitter builds the stack's admitter (st.names set already).
func (st *Stack) newAdmitter() *admission.Admitter {
	cfg := admission.Config{
		Policy:       st.cfg.Policy,
		Local:        append(append([]netip.Addr(nil), st.cfg.Gateways...), st.cfg.VirtualDNS...),
		Gateways:     st.cfg.Gateways,
		HostPorts:    st.cfg.HostPorts,
		HostLoopback: st.hostLoopbackCached,
		IPv6Ready:    st.cfg.IPv6Ready,
		AwaitIPv6:    st.awaitIPv6,
		Ask:          st.cfg.Ask != nil,
		Now:          st.cfg.Now,
		Logf:         st.cfg.Logf,
	}
	if up, ok := st.upstream(); ok {
		cfg.Upstream = up
	}
	if st.names != nil {
		cfg.Names = nameSide{st.names}
		cfg.Pool4 = st.names.cfg.Pool4
	}
	return admission.New(cfg)
}

// record records the refusal d decided for a flow of proto to dst, unless
// it is one that is not recorded (admission.Decision.Recorded).
func (st *Stack) record(proto netpolicy.Proto, dst netip.AddrPort, d admission.Decision) {
	if d.Recorded() {
		st.RecordBlock(d.Block(proto, dst))
	}
}

// nameSide is the names the admitter asks (admission.Names).
type nameSide struct{ n *names }

func (s nameSide) InPool(a netip.Addr) bool           { return s.n.inPool(a) }
func (s nameSide) NameOf(a netip.Addr) (string, bool) { return s.n.nameOf(a) }
func (s nameSide) Allow(name string, port uint16) (bool, string) {
	return s.n.rules.Allow(name, port)
}

func (s nameSide) Cached(name string, v6 bool) ([]netip.Addr, uint32) {
	return s.n.cachedTTL(name, qtype(v6))
}

func (s nameSide) Background(name string, v6 bool) bool { return s.n.background(name, qtype(v6)) }

func (s nameSide) Lookup(ctx context.Context, name string, v6 bool) ([]netip.Addr, error) {
	addrs, _, err := s.n.lookup(ctx, name, qtype(v6))
	return addrs, err
}

func qtype(v6 bool) dnsmessage.Type {
	if v6 {
		return dnsmessage.TypeAAAA
	}
	return dnsmessage.TypeA
}
