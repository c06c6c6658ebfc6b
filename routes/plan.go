package routes

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Defaults for the TUN link.
const (
	// DefaultMTU is the largest MTU a TUN takes with gVisor's stack; large
	// segments are what make the userspace path fast.
	DefaultMTU = 65520
	// DefaultTxQueueLen is long enough that bursts from the sandbox queue
	// in the kernel instead of being dropped while the userstack catches up.
	DefaultTxQueueLen = 10000
)

// OpKind is the kind of one setup operation.
type OpKind uint8

// Operation kinds, in plan order.
const (
	// OpLinkUp sets a link up (lo).
	OpLinkUp OpKind = iota + 1
	// OpLinkConfig sets the TUN's MTU and transmit queue length, and turns
	// off IPv6 link-local address generation (no fe80::/64 route).
	OpLinkConfig
	// OpAddrAdd adds a host address to the TUN, without a prefix route.
	OpAddrAdd
	// OpSink routes a blocked range to the sink device: nothing read from
	// it is ever forwarded; its reader only records the attempt and
	// answers with a refusal. Fail-closed.
	OpSink
	// OpDefault adds a default route via the TUN.
	OpDefault
	// OpPunch adds a route via the TUN that is more specific than a block.
	OpPunch
)

// String names the kind.
func (k OpKind) String() string {
	switch k {
	case OpLinkUp:
		return "link-up"
	case OpLinkConfig:
		return "link-config"
	case OpAddrAdd:
		return "addr-add"
	case OpDefault:
		return "default"
	case OpPunch:
		return "punch"
	case OpSink:
		return "sink"
	}
	return fmt.Sprintf("opkind(%d)", uint8(k))
}

// Op is one setup operation.
type Op struct {
	Kind OpKind
	// Link is the link name.
	Link string
	// Prefix is the address (OpAddrAdd) or route destination.
	Prefix netip.Prefix
	// MTU and TxQueueLen are set for OpLinkConfig.
	MTU        int
	TxQueueLen int
	// Reason is the policy rule behind a route, for logs.
	Reason string
}

// FailSoft reports whether a failure of the op is a warning rather than an
// error: true only for punches.
func (o Op) FailSoft() bool { return o.Kind == OpPunch }

// isRoute reports whether the op adds a route.
func (o Op) isRoute() bool { return o.Kind == OpDefault || o.Kind == OpPunch || o.Kind == OpSink }

// String renders the op in the style of ip(8), e.g.
// "route add 10.0.0.0/8 dev blk0" or "link set tun0 up".
func (o Op) String() string {
	switch o.Kind {
	case OpLinkUp:
		return fmt.Sprintf("link set %s up", o.Link)
	case OpLinkConfig:
		return fmt.Sprintf("link set %s mtu %d txqueuelen %d addrgenmode none", o.Link, o.MTU, o.TxQueueLen)
	case OpAddrAdd:
		return fmt.Sprintf("addr add %s dev %s nodad noprefixroute", o.Prefix, o.Link)
	case OpDefault, OpPunch, OpSink:
		return fmt.Sprintf("route add %s dev %s", o.Prefix, o.Link)
	}
	return fmt.Sprintf("%v %s %s", o.Kind, o.Link, o.Prefix)
}

// Plan is an ordered list of setup operations, and the filter installed
// after them.
type Plan struct {
	Ops []Op
	// Filter, when set, is installed after the operations (see
	// [Filter]); its failure is fail-closed.
	Filter *Filter `json:",omitempty"`
}

// String renders the plan one op per line, with the rule behind each route
// as a comment and fail-soft ops marked, e.g.
//
//	route add 10.0.0.0/8 dev blk0  # private range 10.0.0.0/8
//	route add 10.1.2.3/32 dev tun0  # allow-ip 10.1.2.3 [fail-soft]
func (p Plan) String() string {
	var sb strings.Builder
	for _, op := range p.Ops {
		sb.WriteString(op.String())
		var notes []string
		if op.Reason != "" {
			notes = append(notes, op.Reason)
		}
		if op.FailSoft() {
			notes = append(notes, "[fail-soft]")
		}
		if len(notes) > 0 {
			sb.WriteString("  # ")
			sb.WriteString(strings.Join(notes, " "))
		}
		sb.WriteByte('\n')
	}
	if p.Filter != nil {
		sb.WriteString(p.Filter.String())
	}
	return sb.String()
}

// Config says how the jail's links are named and addressed.
type Config struct {
	// TUN is the name of the TUN link (required).
	TUN string
	// MTU defaults to DefaultMTU, TxQueueLen to DefaultTxQueueLen.
	MTU        int
	TxQueueLen int
	// Addr4 is the jail's IPv4 address, a /32 (required).
	Addr4 netip.Prefix
	// Addr6 is the jail's IPv6 address, a /128. Without it the jail has
	// no IPv6 egress (no default route or punches), but IPv6 blocks are
	// still installed.
	Addr6 netip.Prefix
	// Sink names the second TUN link every blocked range is routed to
	// (required). Its reader never forwards: it records each attempt and
	// refuses it at once (a RST, an ICMP unreachable), so the blocks the
	// kernel layer stops are recorded too.
	Sink string
}

// BuildPlan computes the setup of the jail's namespace from the policy. It
// fails on a config that would be unsafe or unusable: no TUN or sink
// name, an address that is not a host address (its prefix route could
// shadow a block), or an address of the wrong family.
func BuildPlan(pol *netpolicy.Policy, cfg Config) (Plan, error) {
	if pol == nil {
		return Plan{}, fmt.Errorf("no policy")
	}
	if cfg.TUN == "" || strings.ContainsAny(cfg.TUN, "/ \t\n") || len(cfg.TUN) > 15 {
		return Plan{}, fmt.Errorf("invalid TUN link name %q", cfg.TUN)
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.TxQueueLen == 0 {
		cfg.TxQueueLen = DefaultTxQueueLen
	}
	if cfg.MTU < 1280 || cfg.MTU > DefaultMTU {
		return Plan{}, fmt.Errorf("MTU %d out of range 1280..%d", cfg.MTU, DefaultMTU)
	}
	if cfg.TxQueueLen < 0 {
		return Plan{}, fmt.Errorf("negative txqueuelen %d", cfg.TxQueueLen)
	}
	if !cfg.Addr4.IsValid() || !cfg.Addr4.Addr().Is4() || !cfg.Addr4.IsSingleIP() {
		return Plan{}, fmt.Errorf("the TUN's IPv4 address must be a /32, got %v", cfg.Addr4)
	}
	if cfg.Sink == "" || cfg.Sink == cfg.TUN || strings.ContainsAny(cfg.Sink, "/ \t\n") || len(cfg.Sink) > 15 {
		return Plan{}, fmt.Errorf("invalid sink link name %q", cfg.Sink)
	}
	v6 := cfg.Addr6.IsValid()
	if cfg.Addr6.IsValid() && (!cfg.Addr6.Addr().Is6() || cfg.Addr6.Addr().Is4In6() || !cfg.Addr6.IsSingleIP() || cfg.Addr6.Addr().Zone() != "") {
		return Plan{}, fmt.Errorf("the TUN's IPv6 address must be a /128, got %v", cfg.Addr6)
	}
	ops := []Op{
		{Kind: OpLinkUp, Link: "lo"},
		{Kind: OpLinkConfig, Link: cfg.TUN, MTU: cfg.MTU, TxQueueLen: cfg.TxQueueLen},
		{Kind: OpAddrAdd, Link: cfg.TUN, Prefix: cfg.Addr4},
	}
	if v6 {
		ops = append(ops, Op{Kind: OpAddrAdd, Link: cfg.TUN, Prefix: cfg.Addr6})
	}
	ops = append(ops, Op{Kind: OpLinkUp, Link: cfg.TUN},
		Op{Kind: OpLinkConfig, Link: cfg.Sink, MTU: cfg.MTU, TxQueueLen: cfg.TxQueueLen}, Op{Kind: OpLinkUp, Link: cfg.Sink})
	entries := pol.RoutePlan()
	// Blocks route to the sink whether or not the jail has IPv6 egress:
	// without an IPv6 address there is no IPv6 default route, and the
	// blocks still record and refuse what a socket bound to the sink or a
	// later address could send.
	for _, e := range entries {
		if e.Kind == netpolicy.RouteBlock {
			ops = append(ops, Op{Kind: OpSink, Link: cfg.Sink, Prefix: e.Prefix, Reason: e.Reason})
		}
	}
	ops = append(ops, Op{Kind: OpDefault, Link: cfg.TUN, Prefix: netip.PrefixFrom(netip.IPv4Unspecified(), 0)})
	if v6 {
		ops = append(ops, Op{Kind: OpDefault, Link: cfg.TUN, Prefix: netip.PrefixFrom(netip.IPv6Unspecified(), 0)})
	}
	for _, e := range entries {
		if e.Kind != netpolicy.RoutePunch || (e.Prefix.Addr().Is6() && !v6) {
			continue
		}
		ops = append(ops, Op{Kind: OpPunch, Link: cfg.TUN, Prefix: e.Prefix, Reason: e.Reason})
	}
	return Plan{Ops: ops, Filter: BuildFilter(pol, cfg.TUN, cfg.Sink, true)}, nil
}
