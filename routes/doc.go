// Package routes turns the egress policy into the network setup of the
// jail's network namespace, and applies it with netlink.
//
// What it does: [BuildPlan] is a pure function from a [netpolicy.Policy]
// and a [Config] to an ordered [Plan]: bring lo up; configure the TUN link
// (MTU 65520, a long transmit queue, no IPv6 link-local address); give it
// host addresses (/32, /128, no prefix route, so no connected route can
// shadow a block); bring it and the sink link up; route every blocked
// range to the sink, whose reader records and refuses what arrives;
// default routes via the TUN; and last, the punches (allow entries and
// DNS resolvers) via the TUN. [Apply]
// runs a plan through an [Executor]: every operation except a punch is
// fail-closed (the first failure stops and is returned as an error); a
// failed punch is fail-soft (lost reachability, reported as a warning, never
// an open hole). [Netlink] is the production Executor; it speaks
// rtnetlink with the package's own messages (no netlink library: the
// launch's page faults, issue 33). A plan also carries a
// [Filter], a netfilter table [InstallFilter] writes in one transaction: it
// refuses every blocked destination leaving through the TUN, which is what
// a socket bound to the TUN (SO_BINDTODEVICE, IP_UNICAST_IF, a scoped IPv6
// address) reaches past the routes. [Update] moves a running namespace from
// one plan to the next without opening anything in between.
//
// What it does not: it does not create the namespace or the TUN device,
// and does not read host configuration (the policy carries connected
// subnets, host routes and resolvers) beyond [DumpRoutes], the route
// dump the jail's discovery classifies. Its routes do not filter by port (a
// punched resolver is routed for every port); the filter and the userstack
// allow port 53 only.
//
// When not to use it: Netlink must run inside the jail's network namespace
// by a process that owns it (the jail's child driver, in the engine's holder
// stage), before anything untrusted runs there; never call it in the host
// namespace. A [Conn] reaches the jail's namespace from the launcher through
// sockets opened inside it ([OpenSockets]). Tests of the applier that
// touch real netlink must create their own network namespace; unit tests use
// a recording Executor.
package routes
