// Package netpolicy is the single egress policy value shared by both
// enforcement layers of the network jail: the kernel routes installed inside
// the jail's network namespace (package routes) and the userspace network
// stack that dials the host network on the jail's behalf (package userstack).
//
// What it does: it holds the blocked address ranges (private, CGNAT,
// link-local/metadata, loopback, multicast, reserved, the host's connected
// subnets, and the IPv6 equivalents including the IPv4-mapped and NAT64
// forms of every blocked IPv4 range), the caller's allow entries and the DNS
// resolver punches; it answers "may this flow leave?" with a human-readable
// reason ([Policy.Check]); it lists the prefixes the kernel layer must
// block (route to the sink) or punch ([Policy.RoutePlan]) and the merged
// address ranges its filter refuses ([Policy.BlockedRanges]); and it records
// and summarises blocked flows ([Block], [JSONLWriter], [Tally]). Besides
// connected subnets it takes the destinations the host routes elsewhere
// than its default routes ([Config.HostRoutes]) and the network's own NAT64
// prefixes ([Config.NAT64]). A Policy's rules are replaced as a whole,
// atomically ([Policy.Set]), when the host's network changes; [Diff] says
// by address what a replacement blocks and unblocks ([Change], logged by
// [JSONLWriter.RecordChange]).
//
// Matching rule: the longest matching prefix wins, exactly as in the
// kernel's routing table, so both layers agree; when an allow entry and a
// block have the same prefix the allow wins. An allow-cidr that contains a
// more specific blocked range (for example a connected subnet inside an
// allowed 10.0.0.0/8) does not open that range: allow the subnet itself, or
// a more specific prefix inside it. DNS punches are narrower still: a
// resolver address is allowed on port 53 (TCP and UDP) only.
//
// What it does not do: no syscalls, no I/O other than writing block records
// to a caller's io.Writer, no name resolution, no reading of host interfaces
// or /etc/resolv.conf (the caller supplies connected subnets and resolvers).
// The kernel's routes cannot filter by port, so a resolver inside a blocked
// range is punched for every port in the route plan; the kernel layer's
// filter and the userstack still enforce port 53.
//
// Host names: [DomainRule], [ParseDomain] and [ExpandDomains] (with the
// [Presets]) parse the --allow-domain and --deny-domain entries, and
// [Domains] answers "may this name be resolved" and "may a flow to
// name:port leave"; the address checks above know nothing about names.
//
// When not to use it: it is not a firewall for arbitrary hosts. Build the policy only from trusted configuration (root
// owned files under /etc), never from anything the sandbox can write.
package netpolicy
