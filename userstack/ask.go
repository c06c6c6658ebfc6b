package userstack

import (
	"net/netip"
	"slices"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// The ask mode (Config.Ask, package internal/ask): a new TCP flow the
// policy refuses is held while a person decides. Held means dropped
// unanswered: the stack keeps no flow for it, only the broker's request
// and, per held flow, a copy of its SYN's TCP header (at most 32 per
// request and 64 requests, each charged heldCost and its length to the
// relay's memory budget until it is used or dropped), which
// the decision re-delivers at once (Retry), so the sandbox meets it
// without waiting for its next retransmission. Approved once, the flow is
// let through as an allowed one is; approved for the session, the jail
// has changed the policy first, so it is allowed as any later one is;
// denied or expired, it is refused the normal way, a RST.
//
// A query for a name off the allowlist is answered at once with the
// name's synthetic address, and nothing is asked upstream (no DNS
// leaves before approval): the request comes with the connection, which
// then names the port too. A resolver library would give up on a query
// held for a person (it retries after about five seconds, and fails
// after two or three tries); a TCP connect waits about two minutes.

// askTCP asks about the new flow in (refused by rule), and reports
// whether it may go on (approved once). Otherwise the flow was held
// (nothing sent) or refused (recorded with rule, and reset).
func (st *Stack) askTCP(in *tcpIn, name string, hostPort bool, rule string) bool {
	f := ask.Flow{
		Proto: netpolicy.ProtoTCP, Name: name, Dst: in.key.dst, HostPort: hostPort,
		Src: in.key.src,
	}
	f.Retry, f.Drop = st.redeliver(in)
	v := st.cfg.Ask(f)
	switch v {
	case ask.Pass:
		return true
	case ask.Hold:
		return false
	}
	st.blockName(netpolicy.ProtoTCP, in.key.dst, name, rule+" (ask: denied, expired or too many pending)")
	st.rejectTCP(in)
	return false
}

// heldCost is what a held SYN's copy is charged to the relay's memory
// budget: its header and the bookkeeping around it.
const heldCost = 256

// redeliver returns a function that hands a copy of in's SYN to the stack
// again, as if the sandbox had retransmitted it (its payload, if any, is
// not kept: the sandbox sends it again once the handshake is done), and
// the function that frees the copy when it will never be called. The
// copy counts in the relay's memory budget; with none left, nothing is
// kept (nil, nil), and the sandbox's own retransmission meets the
// decision.
func (st *Stack) redeliver(in *tcpIn) (retry, drop func()) {
	cost := heldCost + len(in.h)
	if st.memTakeLeast(cost, cost) == 0 {
		return nil, nil
	}
	cp := &tcpIn{v6: in.v6, remoteAddr: in.remoteAddr, sandboxAddr: in.sandboxAddr, key: in.key, h: slices.Clone(in.h)}
	var once sync.Once
	drop = func() { once.Do(func() { st.memGive(cost) }) }
	retry = func() {
		drop()
		st.goFlow(func() {
			defer st.wg.Done()
			st.tcpInput(cp)
		})
	}
	return retry, drop
}

// RedeliverSYN hands the stack a TCP SYN (a whole IP packet) the sandbox
// sent elsewhere: the jail's sink held it in the ask mode, and the
// address is routed to the stack since. It is taken as if read from the
// TUN, the policy deciding it as any other; anything but a bare SYN is
// ignored. It returns once the flow is admitted or refused.
func (st *Stack) RedeliverSYN(pkt []byte) {
	var in tcpIn
	p := slices.Clone(pkt)
	if !fastTCP(&in, p, nil, len(p)) || in.h.Flags()&(header.TCPFlagSyn|header.TCPFlagAck|header.TCPFlagRst|header.TCPFlagFin) != header.TCPFlagSyn {
		return
	}
	in.data, in.n = nil, 0
	st.tcpInput(&in)
}

// askUDP asks about a datagram to a new destination the policy refuses
// (refused by rule). Held, it is dropped (a UDP client sends again, and
// meets the decision); refused, it is recorded here and the caller sends
// ICMP port unreachable. No Retry: nothing is kept of a datagram.
func (st *Stack) askUDP(src, dst netip.AddrPort, name string, hostPort bool, rule string) ask.Verdict {
	v := st.cfg.Ask(ask.Flow{
		Proto: netpolicy.ProtoUDP, Name: name, Dst: dst, HostPort: hostPort,
		Src: src,
	})
	if v == ask.Refuse {
		st.blockName(netpolicy.ProtoUDP, dst, name, rule+" (ask: denied, expired or too many pending)")
	}
	return v
}
