// Package jail assembles the egress jail from the host's facts and the
// caller's allow list: one netpolicy.Policy, the kernel route plan applied
// inside the jail's namespace (package routes), the sandbox's resolv.conf,
// and, at run time, the gVisor userstack that serves the TUN device
// (package userstack). [Prepare] is pure: given [HostFacts] it decides
// every address and rule, so the whole jail can be printed and tested
// without privileges. The jail is the engine's network driver
// (driver_linux.go): its child half, package netchild, builds the jail's
// namespace inside the engine's holder stage (TUN links, routes, filter)
// and passes back the
// links and three netlink sockets opened there (routes, netfilter, socket
// diagnostics: the process behind a flow, owner.go); [Jail], the launcher's half,
// serves them. Once attached it follows the host's network: each change of
// the host's links, addresses, routes or rules rebuilds the policy,
// swapped into the userstack and applied to the kernel layer through those
// sockets, and a failure to follow fails closed.
//
// In the ask mode (Options.Ask, ask.go) a flow the policy refuses is held
// by whichever layer refuses it (the userstack, or the sink for what the
// kernel routes there) while a request for it is pending, and an
// approval is put in force as claude-sandbox allow puts a change.
//
// What it does not do: create namespaces or devices (package nsexec), or
// enforce anything itself: the routes and the stack do, each on its own.
package jail
