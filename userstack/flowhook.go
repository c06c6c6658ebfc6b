package userstack

import (
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
)

// Flow is a new flow the stack let through (Config.OnFlow), for the
// audit log: a TCP connection, or a UDP mapping's new destination.
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
	// QType, when set, makes it a DNS query the domain allowlist's
	// resolver answered or relayed (not a flow): the question's Name, of
	// type QType ("A", "AAAA", "TXT", ...), sent to Dst over Proto; Src
	// unknown. Rate-bounded (maxDNSRecords).
	QType string
}

// maxDNSRecords bounds the DNS query records a second (the queries
// beyond are answered as ever, counted in Stack.DNSRecordsDropped, not
// told of): a sandbox looking names up in a loop does not fill the audit
// log with them, and the records it does get cost the resolver's worker a
// call of OnFlow.
const maxDNSRecords = 200

// noteDNS tells Config.OnFlow of a query for name, of type t, the
// allowlist allowed (rule), within maxDNSRecords a second. Refused
// queries are recorded as blocks (OnBlock) already.
func (st *Stack) noteDNS(proto netpolicy.Proto, to netip.AddrPort, name string, t dnsmessage.Type, rule string) {
	fn := st.cfg.OnFlow
	if fn == nil {
		return
	}
	now := st.cfg.Now().Unix()
	if w := st.dnsWindow.Load(); w != now && st.dnsWindow.CompareAndSwap(w, now) {
		st.dnsCount.Store(0)
	}
	if st.dnsCount.Add(1) > maxDNSRecords {
		st.dnsDropped.Add(1)
		return
	}
	fn(Flow{Proto: proto, Dst: to, Name: name, Rule: rule, QType: strings.TrimPrefix(t.String(), "Type")})
}

// DNSRecordsDropped is how many DNS queries were not told of to
// Config.OnFlow, beyond maxDNSRecords a second.
func (st *Stack) DNSRecordsDropped() uint64 { return st.dnsDropped.Load() }

// FlowEnd is the end of a flow Config.OnFlow was told of
// (Config.OnFlowEnd): a TCP connection torn down, or a UDP mapping
// closed. Src and Dst pair it with its Flow (for a UDP mapping, Dst is
// the last destination the sandbox sent to; a mapping of several
// destinations had a Flow for each).
type FlowEnd struct {
	Proto    netpolicy.Proto
	Src, Dst netip.AddrPort
	Name     string // a TCP flow to a name
	// Up is the payload bytes relayed from the sandbox to the world
	// (TCP: written to the host socket; UDP: datagrams sent), Down from
	// the world to the sandbox (TCP: acknowledged by the sandbox; UDP:
	// replies delivered). UpPackets and DownPackets count UDP's
	// datagrams (0 for TCP).
	Up, Down               uint64
	UpPackets, DownPackets uint64
	Start                  time.Time
	Duration               time.Duration
	// How is how it ended: TCP "closed" (both FINs), "reset by the
	// sandbox", "reset by the host side", "timeout" (the sandbox stopped
	// acknowledging), "timeout (dial)", "dial failed", "refused" (after
	// the IPv6 gate, or its first bytes: a name's check), "aborted";
	// UDP "idle" (the idle timeout), "evicted" (the flow cap), "error"
	// (its host socket); either "stack closed" (the sandbox's end).
	How string
}

// The flow counters: a TCP flow counts in processData and readSome, a UDP
// mapping in send and pollReady, always, under the flow's lock they hold
// anyway (one add each: no allocation, no lock of their own). Start is
// taken, and the end reported, only with Config.OnFlowEnd set: without
// the audit log nothing more is done at a flow's end.

// noteTCP tells Config.OnFlow of a TCP flow admitted (newTCP, on the
// event loop: OnFlow must be quick), with the decision its admission
// made (d.Rule: the policy's for an address, the allowlist's for a
// name): nothing is decided again here.
func (st *Stack) noteTCP(key flowKey, d admission.Decision) {
	fn := st.cfg.OnFlow
	if fn == nil {
		return
	}
	f := Flow{Proto: netpolicy.ProtoTCP, Src: key.src, Dst: key.dst}
	switch {
	case d.Action == admission.LocalDNS && !d.Target.IsValid():
		f.Rule = "dns (the domain allowlist's resolver)"
	case d.Action == admission.Inspect:
		f.Name, f.Rule = d.Name, d.Rule
	case d.Action == admission.LocalDNS || d.Action == admission.HostPort:
		f.Target = d.Target
		f.Rule = "gateway " + d.Target.String()
	default:
		f.Target, f.Rule = d.Target, d.Rule
	}
	fn(f)
}

// noteUDP tells Config.OnFlow of a destination a UDP mapping of the
// sandbox's socket src now admits (newUDPFlow: once per new destination,
// and again after a policy change made it decided afresh). rule is the
// policy's rule for an address destination.
func (st *Stack) noteUDP(src, dst, target netip.AddrPort, local bool, rule string) {
	fn := st.cfg.OnFlow
	if fn == nil {
		return
	}
	f := Flow{Proto: netpolicy.ProtoUDP, Src: src, Dst: dst, Target: target, Rule: rule}
	switch {
	case st.names != nil && st.names.InPool(dst.Addr()):
		f.Name, _ = st.names.NameOf(dst.Addr())
		f.Rule = "name " + f.Name
	case local && dst.Port() == netpolicy.DNSPort:
		f.Rule = "dns (the host's resolver)"
	case local:
		f.Rule = "gateway " + target.String()
	}
	fn(f)
}

// tcpEnd is f's end for Config.OnFlowEnd (f.mu held, at its teardown,
// with what was left unsent still counted in pendLen and sent).
func (f *tcpFlow) tcpEnd() FlowEnd {
	up := f.up - uint64(f.pendLen)
	down := f.down
	for i := range f.sent {
		down -= uint64(len(f.sent[i].data))
	}
	how := f.endHow
	if how == "" {
		switch {
		case f.has(finFromSandbox | finToHost | eofFromHost | finToSandbox):
			how = "closed"
		case f.has(resetHost):
			how = "reset"
		default:
			how = "aborted"
		}
	}
	return FlowEnd{Proto: netpolicy.ProtoTCP, Src: f.key.src, Dst: f.key.dst, Name: f.name,
		Up: up, Down: down, Start: f.start, Duration: f.st.cfg.Now().Sub(f.start), How: how}
}
