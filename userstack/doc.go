// Package userstack is the userspace egress proxy of the network jail: a
// gVisor tcpip stack on the jail's TUN device that terminates the
// sandbox's TCP and UDP flows and re-originates the allowed ones as
// ordinary sockets in the host's network namespace.
//
// What it does: every new flow is checked against the shared
// [netpolicy.Policy] before anything is dialed. A blocked TCP connection
// gets a RST at once and a blocked UDP datagram an ICMP port unreachable,
// and both are reported as a [netpolicy.Block]. Allowed TCP connections are
// dialed through the injected [Dialer] (with a timeout) and spliced both
// ways, half-close aware, on reused worker goroutines. Allowed UDP flows
// get a NAT entry (one dialed socket per flow) that expires when idle;
// their datagrams bypass gVisor's UDP endpoints (written to the host socket
// from the packet path, replies framed here). The stack answers only as
// the configured gateway and virtual DNS addresses: port 53 there (UDP and
// TCP) is relayed to the host's real resolvers, ICMP echo there is
// answered, and everything else there is refused; the host's loopback is
// never reachable (127/8 and ::1 are blocked by the policy, and gVisor
// drops loopback-addressed packets that arrive on a non-loopback link).
// ICMP echo to allowed destinations is proxied through a [Pinger] (an
// unprivileged ping socket on the host).
//
// [TUN] is the link endpoint for the jail's device: reads through Go's
// netpoller, a virtio-net header with host GSO (TCP checksums and
// segmentation left to the kernel), received packets split so that gVisor
// copies only their headers, writes straight from the packets' views, and
// bare ACKs held back like a kernel's delayed ACK.
//
// What it does not: it does not open or configure the TUN device (the
// caller supplies a stack.LinkEndpoint: [TUN] in production,
// channel.Endpoint in tests), does not install kernel routes (package
// routes), does not resolve names, and does not filter by host name. IPv4
// fragments are reassembled by gVisor; IP options and other transport
// protocols are left to its defaults (unforwarded).
//
// When not to use it: never attach it to a link that carries traffic from
// anything but the sandbox; with promiscuous mode and spoofing on it
// terminates flows for every address. It is not a general-purpose NAT.
package userstack
