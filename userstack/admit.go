package userstack

import (
	"net/netip"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
	"github.com/claude-sandbox/claude-sandbox/userstack/names"
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
		cfg.Names = st.names
		cfg.Pool4 = st.names.Pool4()
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

// The domain allowlist's names side (package userstack/names), as the
// stack's configuration names it.
type (
	// NameConfig turns the domain allowlist on (Config.Names).
	NameConfig = names.Config
	// NameRules is the domain allowlist the stack enforces; a
	// *netpolicy.Domains is one.
	NameRules = names.Rules
)

// The synthetic address pools (see package names) and the first bytes'
// wait.
var (
	DefaultPool4 = names.DefaultPool4
	DefaultPool6 = names.DefaultPool6
)

// DefaultPeekTimeout: see names.DefaultPeekTimeout.
const DefaultPeekTimeout = names.DefaultPeekTimeout

// nameDeps is the stack's side of the names' dependencies.
func (st *Stack) nameDeps() names.Deps {
	d := names.Deps{
		Ctx:  st.ctx,
		Now:  st.cfg.Now,
		Logf: st.cfg.Logf,
		Spawn: func(fn func()) bool {
			return st.goFlow(func() {
				defer st.wg.Done()
				fn()
			})
		},
		Block:    st.blockName,
		NoteDNS:  st.noteDNS,
		WriteUDP: st.writeUDP,
		Headroom: udpHeadroom,
		Ask:      st.cfg.Ask != nil,
	}
	if up, ok := st.upstream(); ok {
		d.Upstream = up
	}
	if st.cfg.Dialer != nil {
		d.Dialer = st.cfg.Dialer
	}
	return d
}

// SyntheticAddr returns the synthetic address handed out for name (IPv6
// when v6), if there is one. For tests and diagnostics.
func (st *Stack) SyntheticAddr(name string, v6 bool) (netip.Addr, bool) {
	if st.names == nil {
		return netip.Addr{}, false
	}
	return st.names.Addr(name, v6)
}

// NameOf returns the name a synthetic address stands for, for tests and
// diagnostics.
func (st *Stack) NameOf(a netip.Addr) (string, bool) {
	if st.names == nil {
		return "", false
	}
	return st.names.NameOf(a)
}
