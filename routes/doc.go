// Package routes turns the egress policy into the network setup of the
// jail's network namespace, and applies it with netlink.
//
// What it does: [BuildPlan] is a pure function from a [netpolicy.Policy]
// and a [Config] to an ordered [Plan]: bring lo up; configure the TUN link
// (MTU 65520, a long transmit queue, no IPv6 link-local address); give it
// host addresses (/32, /128, no prefix route, so no connected route can
// shadow a blackhole); bring it up; blackhole every blocked range
// (unreachable for link-local/metadata); default routes via the TUN; and
// last, the punches (allow entries and DNS resolvers) via the TUN. [Apply]
// runs a plan through an [Executor]: every operation except a punch is
// fail-closed (the first failure stops and is returned as an error); a
// failed punch is fail-soft (lost reachability, reported as a warning, never
// an open hole). [Netlink] is the production Executor.
//
// What it does not: it does not create the namespace or the TUN device,
// does not read host configuration (the policy carries connected subnets
// and resolvers), and does not filter by port: a punched resolver is
// reachable on every port at the kernel layer, and the userstack enforces
// port 53. The kernel layer alone cannot stop traffic the local table
// routes (the TUN's own addresses, and IPv6 multicast, which the kernel
// sends out of any multicast-capable link); the userstack refuses those.
//
// When not to use it: Netlink must run inside the jail's network namespace
// by a process that owns it (the holder stage), before anything untrusted
// runs there; never call it in the host namespace. Tests of the applier that
// touch real netlink must create their own network namespace; unit tests use
// a recording Executor.
package routes
