package jail

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/routes"
	usnames "github.com/claude-sandbox/claude-sandbox/userstack/names"
)

// TUN is the jail's TUN link name inside its namespace.
const TUN = "tun0"

// HostFacts is what the jail needs to know about the host.
type HostFacts struct {
	// Connected are the connected subnets of every host interface.
	Connected []netip.Prefix
	// ResolvConf is the content of the host's /etc/resolv.conf.
	ResolvConf string
	// IPv6Egress is true when the host has an IPv6 default route.
	IPv6Egress bool
	// Routed are the destinations the host reaches through anything but
	// its default routes (see [HostRoutes]): internal, blocked.
	Routed []netip.Prefix
	// ViaDefault are the Routed destinations whose route goes through a
	// default route's gateway: internal all the same, and named so in the
	// blocks' reason and the exit summary.
	ViaDefault []netip.Prefix
	// Internet are the ranges the user says are internet
	// (--internet-cidr): a Routed destination within one is not
	// internal. Set by the caller, not read from the host.
	Internet []netip.Prefix
	// NAT64 are the network-specific NAT64 prefixes of the host's
	// resolver (RFC 7050), when known.
	NAT64 []netip.Prefix

	// deps is what the NAT64 answer may depend on, as read with the rest
	// (the live policy's baseline; unknown for facts made by hand).
	deps nat64Deps
}

// Setup is every decision the jail makes before it runs.
type Setup struct {
	Policy *netpolicy.Policy
	Routes routes.Plan
	// Gateway is the one address the userstack answers as: ICMP echo, and
	// the DNS relay when the host's resolvers are loopback stubs.
	Gateway netip.Addr
	Addr4   netip.Prefix
	Addr6   netip.Prefix // invalid when the host has no IPv6 egress
	// Upstreams are the host's loopback stub resolvers the relay forwards
	// to (empty when the sandbox uses routable resolvers directly).
	Upstreams []netip.AddrPort
	// ResolvConf replaces the sandbox's /etc/resolv.conf.
	ResolvConf mounts.Op
	Warnings   []string
	// Names is the domain allowlist the userstack enforces (nil: none,
	// the internet is open); AllowDomains and DenyDomains are the
	// entries it was built from, as given (presets unexpanded).
	Names        *usnames.Config
	AllowDomains []string
	DenyDomains  []string

	// What the policy and routes were built from, so that the live policy
	// can rebuild them from new host facts.
	policyCfg netpolicy.Config
	routesCfg routes.Config
	// deps is what the NAT64 answer may depend on, as the host was when
	// the setup was decided.
	deps nat64Deps
}

// addrCandidates are the /24s the jail's own addresses come from, tried in
// order: the documentation ranges, which no internet host uses. One that
// overlaps anything the host is connected to, resolves through, or that the
// allow list names is skipped, so the jail's addresses never shadow a real
// destination the host knows (a host on 192.0.2.0/24 gets 198.51.100.x).
var addrCandidates = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
}

// jailAddr6 is the sandbox's own IPv6 address: a fixed unique-local
// address, local to the jail's namespace (fc00::/7 stays blocked as a
// destination).
var jailAddr6 = netip.MustParsePrefix("fdc5:a9d1:6a11::2/128")

// Prepare decides the jail's addresses, policy, routes and resolv.conf.
func Prepare(facts HostFacts, allow []netip.Prefix) (*Setup, error) {
	return PrepareNames(facts, allow, nil, nil)
}

// PrepareNames is Prepare with a domain allowlist: allowDomains and
// denyDomains are --allow-domain and --deny-domain entries (names,
// wildcards, presets; netpolicy.ExpandDomains). With any allow entry the
// internet is default-deny: only the names, the allow entries and DNS
// through the jail's own resolver are reachable. Every host resolver
// becomes an upstream of the stack's resolver (none is reachable from the
// sandbox directly: DNS to it would bypass the allowlist), and the
// synthetic address pools are routed to tun0.
func PrepareNames(facts HostFacts, allow []netip.Prefix, allowDomains, denyDomains []string) (*Setup, error) {
	s := &Setup{deps: facts.deps}
	var names *netpolicy.Domains
	if len(allowDomains) > 0 || len(denyDomains) > 0 {
		if len(allowDomains) == 0 {
			return nil, errors.New("egress jail: --deny-domain narrows an allowlist: give the names to allow with --allow-domain")
		}
		al, err := netpolicy.ExpandDomains(allowDomains)
		if err != nil {
			return nil, fmt.Errorf("egress jail: --allow-domain: %w", err)
		}
		dn, err := netpolicy.ExpandDomains(denyDomains)
		if err != nil {
			return nil, fmt.Errorf("egress jail: --deny-domain: %w", err)
		}
		names = netpolicy.NewDomains(al, dn)
		s.AllowDomains, s.DenyDomains = slices.Clone(allowDomains), slices.Clone(denyDomains)
	}
	nameservers, extra := parseResolvConf(facts.ResolvConf)
	var routable []netip.Addr
	for _, ns := range nameservers {
		if ns.IsLoopback() || names != nil {
			s.Upstreams = append(s.Upstreams, netip.AddrPortFrom(ns, 53))
		} else {
			routable = append(routable, ns)
		}
	}
	taken := append([]netip.Prefix{}, facts.Connected...)
	taken = append(taken, facts.Routed...)
	taken = append(taken, allow...)
	for _, r := range nameservers {
		taken = append(taken, netip.PrefixFrom(r, r.BitLen()))
	}
	var base netip.Prefix
	for _, c := range addrCandidates {
		if !overlapsAny(c, taken) {
			base = c
			break
		}
	}
	if !base.IsValid() {
		return nil, errors.New("egress jail: every candidate address range for the jail (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) is in use on this host")
	}
	b := base.Addr().As4()
	b[3] = 1
	s.Gateway = netip.AddrFrom4(b)
	b[3] = 2
	s.Addr4 = netip.PrefixFrom(netip.AddrFrom4(b), 32)
	if facts.IPv6Egress {
		s.Addr6 = jailAddr6
	}

	policyAllow := allow
	if names != nil {
		// The synthetic pools as allow-cidr entries: punched to tun0 in
		// the kernel routes (a host route into the benchmarking range
		// would otherwise send them to the sink); the stack decides
		// every flow to them by name before the policy sees it.
		policyAllow = append(slices.Clone(allow), usnames.DefaultPool4)
		if s.Addr6.IsValid() {
			policyAllow = append(policyAllow, usnames.DefaultPool6)
		}
		s.Names = &usnames.Config{Rules: names, NoIPv6: !s.Addr6.IsValid()}
	}
	s.policyCfg = netpolicy.Config{ConnectedSubnets: facts.Connected, HostRoutes: facts.Routed, ViaDefault: facts.ViaDefault, Internet: slices.Clone(facts.Internet), NAT64: facts.NAT64, Allow: policyAllow, DNSResolvers: routable}
	s.routesCfg = routes.Config{TUN: TUN, Sink: SinkDevice, Addr4: s.Addr4, Addr6: s.Addr6}
	pol, rp, err := s.build(facts, reachState{})
	if err != nil {
		return nil, err
	}
	s.Policy = pol
	s.Routes = rp

	// The sandbox's resolv.conf: the routable resolvers as they are, and
	// the gateway in place of the loopback stubs (which are unreachable
	// from the jail's own loopback), in the host's order.
	var conf strings.Builder
	conf.WriteString("# written by claude-sandbox for the egress jail\n")
	stubWritten := false
	for _, ns := range nameservers {
		if ns.IsLoopback() || names != nil {
			if stubWritten {
				continue
			}
			stubWritten = true
			ns = s.Gateway
		}
		fmt.Fprintf(&conf, "nameserver %s\n", ns)
	}
	for _, l := range extra {
		conf.WriteString(l + "\n")
	}
	if len(nameservers) == 0 {
		s.Warnings = append(s.Warnings, "egress jail: the host has no DNS resolver (no nameserver in /etc/resolv.conf): names will not resolve inside the sandbox")
	}
	s.ResolvConf = mounts.Op{Kind: mounts.File, Dst: "/etc/resolv.conf", Data: conf.String(), Mode: 0o644}
	return s, nil
}

// build makes the policy and route plan for the host facts, with the
// allow list, resolvers and jail addresses decided at launch, and the
// addresses reach allowed (ips) or revoked while running (reach_live.go).
func (s *Setup) build(facts HostFacts, reach reachState) (*netpolicy.Policy, routes.Plan, error) {
	cfg := s.policyCfg
	// The user's internet ranges stay as given at launch.
	cfg.ConnectedSubnets, cfg.HostRoutes, cfg.ViaDefault, cfg.NAT64 = facts.Connected, facts.Routed, facts.ViaDefault, facts.NAT64
	if len(reach.ips) > 0 || len(reach.revoked) > 0 {
		cfg.Allow = slices.DeleteFunc(slices.Clone(cfg.Allow), func(p netip.Prefix) bool { return slices.Contains(reach.revoked, p) })
		cfg.Allow = append(cfg.Allow, reach.ips...)
	}
	pol, err := netpolicy.New(cfg)
	if err != nil {
		return nil, routes.Plan{}, fmt.Errorf("egress policy: %w", err)
	}
	rp, err := routes.BuildPlan(pol, s.routesCfg)
	if err != nil {
		return nil, routes.Plan{}, err
	}
	return pol, rp, nil
}

func overlapsAny(p netip.Prefix, list []netip.Prefix) bool {
	for _, q := range list {
		if q.IsValid() && p.Overlaps(q) {
			return true
		}
	}
	return false
}

// parseResolvConf returns the nameserver addresses and the search, domain
// and options lines, which the sandbox keeps.
func parseResolvConf(s string) (ns []netip.Addr, extra []string) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) < 2 {
				continue
			}
			// A scoped address (fe80::1%eth0) keeps its zone out.
			host, _, _ := strings.Cut(f[1], "%")
			if a, err := netip.ParseAddr(host); err == nil {
				ns = append(ns, a.Unmap())
			}
		case "search", "domain", "options":
			extra = append(extra, strings.Join(f, " "))
		}
	}
	return ns, extra
}

// ReadResolvConf reads at most 64 KiB of r (a resolv.conf).
func ReadResolvConf(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	return string(b), err
}
