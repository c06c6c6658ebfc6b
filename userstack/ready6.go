package userstack

import (
	"net/netip"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// The IPv6 gate (Config.IPv6Ready): a flow to an IPv6 destination that
// the policy allows does not leave for the host until the policy is ready
// to decide IPv6 destinations (the jail's NAT64 prefix, discovered on
// first use, may block more of them). The packet loop never waits for it:
//
//   - TCP: the flow's dial moves to a worker, which waits, checks the
//     destination again and then connects; the sandbox's SYN waits for
//     the answer meanwhile (a refusal is a RST).
//   - A name's TCP flow resolves and dials on a worker already: each
//     IPv6 address waits there before it is checked again.
//   - UDP: the datagram is copied and held on a worker (at most
//     maxHeldUDP of them across the stack; more are dropped, as a
//     congested link would), then goes through the packet path's
//     decision again. One refused then is recorded and dropped (the
//     sandbox gets no ICMP error for it; the next one gets it at once).
//   - A proxied echo waits on its worker.
//
// Flows to IPv4 destinations, to the gateway's own addresses (the
// resolver, allowed host ports) and to destinations the policy refuses
// anyway never wait, and never start what the gate waits for.

// maxHeldUDP bounds the datagrams held for the gate across the stack.
const maxHeldUDP = 64

// ipv6Gate returns the channel a flow to dst waits on before it leaves,
// or nil when it needs none: no gate configured, not an IPv6 destination,
// or the gate open already. Asking may start what the gate waits for.
func (st *Stack) ipv6Gate(dst netip.Addr) <-chan struct{} {
	if st.cfg.IPv6Ready == nil || !dst.Is6() || dst.Is4In6() {
		return nil
	}
	ch := st.cfg.IPv6Ready()
	select {
	case <-ch:
		return nil
	default:
		return ch
	}
}

// awaitIPv6 waits for the gate (never on the packet loop): false when the
// stack closes first, or the gate stays shut past DialTimeout.
func (st *Stack) awaitIPv6(gate <-chan struct{}) bool {
	if gate == nil {
		return true
	}
	t := time.NewTimer(st.cfg.DialTimeout)
	defer t.Stop()
	select {
	case <-gate:
		return true
	case <-st.ctx.Done():
		return false
	case <-t.C:
		st.cfg.Logf("userstack: the IPv6 gate stayed shut for %v: flow refused", st.cfg.DialTimeout)
		return false
	}
}

// ruleIPv6NotReady is the record of a flow whose IPv6 gate stayed shut.
const ruleIPv6NotReady = "IPv6 destination held until the policy was ready, which it was not in time"

// afterIPv6Gate waits for gate (never on the packet loop), then decides
// dst again by the policy then in force: "" when the flow may leave,
// else the rule that refuses it (ruleIPv6NotReady when the gate stayed
// shut or the stack closed). The caller records the refusal unless the
// stack is closing.
func (st *Stack) afterIPv6Gate(proto netpolicy.Proto, dst netip.AddrPort, gate <-chan struct{}) string {
	if !st.awaitIPv6(gate) {
		return ruleIPv6NotReady
	}
	if v := st.check(proto, dst); !v.Allowed {
		return v.Rule
	}
	return ""
}

// holdUDP keeps a copy of a datagram to a new IPv6 destination until the
// gate opens, on a worker, then decides it again as the packet path does
// (handleUDP). Past maxHeldUDP held datagrams, it is dropped.
func (st *Stack) holdUDP(key flowKey, data [][]byte, gate <-chan struct{}) {
	if st.heldUDP.Add(1) > maxHeldUDP {
		st.heldUDP.Add(-1)
		return
	}
	n := 0
	for _, b := range data {
		n += len(b)
	}
	buf := make([]byte, 0, n)
	for _, b := range data {
		buf = append(buf, b...)
	}
	if !st.goFlow(func() {
		defer st.wg.Done()
		defer st.heldUDP.Add(-1)
		if !st.awaitIPv6(gate) {
			if st.ctx.Err() != nil {
				return // closing
			}
			st.block(netpolicy.ProtoUDP, key.dst, ruleIPv6NotReady)
			return
		}
		st.sendUDP(key, [][]byte{buf})
	}) {
		st.heldUDP.Add(-1)
	}
}
