package userstack

import (
	"net/netip"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
	"github.com/claude-sandbox/claude-sandbox/userstack/relayapi"
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

// NameService is the domain allowlist's names side the stack is given
// (Config.Names): the synthetic address pool, the rules, the host-side
// resolver's cache and the DNS server the sandbox's resolv.conf names,
// and the first-bytes inspection of a TCP flow to a name. Package
// userstack/names implements it (names.New); the stack knows it only
// through this interface and package relayapi's types, and imports
// neither names nor inspect.
type NameService interface {
	// The admitter's view (InPool, NameOf, Allow, Cached, Background,
	// Lookup).
	admission.Names
	// Attach gives the service what it needs of the stack; New calls it
	// once, before any flow. It fails for a service attached already.
	Attach(relayapi.Deps) error
	// ServeUDP answers a DNS query the sandbox sent to a virtual
	// resolver address (from the sandbox's from to to), on the event
	// loop: it must not block.
	ServeUDP(from, to netip.AddrPort, payload [][]byte)
	// StartTCP serves a TCP connection to a virtual resolver address:
	// the descriptor the relay reads and writes as the flow's host
	// socket.
	StartTCP(to netip.AddrPort) (fd int, err error)
	// Addr returns the synthetic address handed out for name (IPv6 when
	// v6), if there is one.
	Addr(name string, v6 bool) (netip.Addr, bool)
	// Pool4 is the IPv4 synthetic pool.
	Pool4() netip.Prefix
	// PeekTimeout is how long a TCP flow to a name waits for its first
	// bytes before it is let through (and watched).
	PeekTimeout() time.Duration
	// FirstBytesMax bounds the first bytes a flow to a name holds
	// before they are decided.
	FirstBytesMax() int
	// NewPeek and NewWatch start the first-bytes decision of a flow to
	// name (peek.go) and the watch of one let through before its first
	// message was seen (peekwatch.go, first: what it sent so far).
	NewPeek(name string, waitMax time.Duration) relayapi.Peek
	NewWatch(name string, first []byte) relayapi.Watch
}

// nameDeps is the stack's side of the names' dependencies.
func (st *Stack) nameDeps() relayapi.Deps {
	d := relayapi.Deps{
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
