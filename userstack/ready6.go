package userstack

import (
	"net/netip"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
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

// ipv6NotReady is the refusal of a flow whose IPv6 gate stayed shut.
var ipv6NotReady = admission.Decision{Action: admission.Refuse, Kind: admission.KindIPv6NotReady, Rule: admission.RuleIPv6NotReady}

// afterIPv6Gate waits for gate (never on the packet loop), then decides
// dst again by the policy then in force (admission's Check): Dial when
// the flow may leave, else the refusal (ipv6NotReady when the gate
// stayed shut or the stack closed). The caller records the refusal
// unless the stack is closing.
func (st *Stack) afterIPv6Gate(proto netpolicy.Proto, dst netip.AddrPort, gate <-chan struct{}) admission.Decision {
	if !st.awaitIPv6(gate) {
		return ipv6NotReady
	}
	return st.adm.Check(proto, dst)
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
			st.record(netpolicy.ProtoUDP, key.dst, ipv6NotReady)
			return
		}
		st.sendUDP(key, [][]byte{buf})
	}) {
		st.heldUDP.Add(-1)
	}
}
