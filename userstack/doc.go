// Package userstack is the userspace egress proxy of the network jail: it
// serves the jail's TUN device, takes every flow the sandbox starts and
// re-originates the allowed ones as ordinary sockets in the host's network
// namespace.
//
// # What it does
//
// Every new flow is decided once, before anything is dialed, by package
// userstack/admission against the shared [netpolicy.Policy]. A blocked TCP connection
// gets a RST at once and a blocked UDP datagram an ICMP port unreachable,
// and both are reported as a [netpolicy.Block]. Allowed TCP connections are
// dialed (with a timeout; on the stack's own non-blocking sockets, or
// through a [Dialer] the embedder supplies) and the SYN is answered only
// once the dial ends, with what it found: a SYN-ACK, a RST for a refusal,
// an ICMP unreachable for an unreachable destination, nothing for a
// timeout (the sandbox's own SYN retries then time out). Then they are
// relayed segment by segment: the stack keeps only the sandbox-facing TCP
// state (sequence numbers, both windows, unacknowledged data;
// retransmission on a timeout or three duplicate ACKs; challenge ACKs for
// resets and SYNs that are not exact, RFC 5961) and maps segments onto the
// host socket, half-close aware, urgent data included (the sandbox's
// urgent byte is sent with MSG_OOB, after the bytes before it; the host
// socket keeps urgent data in line, SO_OOBINLINE, and the byte at its
// mark goes to the sandbox under an URG pointer; if the host socket is
// full when the sandbox's urgent byte comes, the byte goes in line, in its
// place, since it may not overtake the data before it), with at most 4 MiB buffered each way per
// connection and Config.MaxRelayMemory (16 MiB) across all of them: when
// that runs low, advertised windows shrink and host sockets wait (see
// mem.go; [Stack.RelayMemory] reports use and peak). UDP is NATed as RFC 4787
// asks: one unconnected host socket (one host port) per sandbox socket,
// whatever it sends to (endpoint-independent mapping), each new
// destination decided by the policy; a datagram to that port reaches the
// sandbox from an address the socket sent to, on any port the policy
// allows there (address-dependent filtering; the resolver behind the
// virtual DNS address from its own address and port only). A mapping
// expires when idle for Config.UDPIdleTimeout (5 minutes; RFC 4787's
// recommendation, at least its 2-minute floor); at Config.MaxUDPFlows
// (512) a new mapping evicts the least recently used one, reported to
// Config.OnEvict. (A Dialer that is not a [PacketListener] gets a
// connected conn per destination instead.) No header is trusted: every length (IP, TCP
// data offset, UDP length, ICMP) is checked before use on every path, and
// FuzzTUNInput feeds whole packets through the TUN input into a live
// stack. TestTCPConformance is the relay's conformance suite, in the
// spirit of packetdrill: scripted exchanges (handshake, data, FIN each
// way, RST, zero-window probes, retransmission, out-of-order) over a
// channel endpoint against a fake host socket, each naming the exact
// segments the sandbox sees; tcptest_test.go ports gVisor's TCP tests
// that apply to a relay (scaled windows, retransmission and window probes
// on a fake clock, RST in each state). The stack answers only as the configured
// gateway and virtual DNS addresses: port 53 there (UDP and TCP) is
// relayed to the host's real resolvers, ICMP echo there is answered, the
// gateway's Config.HostPorts are relayed to the same ports of the host's
// loopback (hostport.go), and everything else there is refused; the
// host's loopback is otherwise never reachable (127/8 and ::1 are blocked
// by the policy, and gVisor drops loopback-addressed packets that arrive
// on a non-loopback link). ICMP
// echo to allowed destinations is proxied through a [Pinger] (an
// unprivileged ping socket on the host).
//
// # gVisor's part
//
// gVisor's tcpip stack is the IP layer for everything that is not plain:
// fragments are reassembled, extension headers, odd addresses and
// malformed packets are validated or dropped there, and ICMP (echo,
// unreachables) is built there. Its TCP and UDP endpoints are used only
// for connections into the sandbox (Config.Inbound, [Stack.DialSandbox]:
// published ports, package userstack/inbound); its transport handlers hand everything
// else to the relay.
//
// # The event loop
//
// The relay's I/O runs on one event loop of the stack's own (only proxied
// pings and a configured Dialer's dials run on goroutines): it waits in
// epoll_wait (level-triggered) on the TUN and on every host socket, none
// of which Go's netpoller watches, runs the handler of each that is ready
// and the relay's timers, and goes back to waiting, as pasta and
// slirp4netns do. [TUN], the link endpoint for the jail's device, is read
// there with a virtio-net header, and passes ordinary TCP segments and the
// datagrams of known UDP flows straight to the relay (a fast path that
// skips gVisor's receive path; the relay trusts them no more than the
// others); what the relay sends goes out with one writev, the TCP checksum
// left to the kernel.
//
// # What it does not do
//
// It does not open or configure the TUN device (the
// caller supplies a stack.LinkEndpoint: [TUN] in production,
// channel.Endpoint in tests), does not install kernel routes (package
// routes), and without Config.Names it neither resolves names nor filters
// by host name. With Config.Names (the domain allowlist: a [NameService]
// the embedder builds with package userstack/names, whose first-bytes
// decisions are package userstack/inspect's; peek.go) it answers the
// sandbox's DNS through it with synthetic addresses,
// decides flows by name and port, checks a TCP flow's TLS SNI or HTTP
// Host before relaying a byte of it (the host is dialed at the SYN, as
// for an address), and refuses the open internet. IPv4
// options are ignored; other transport protocols are left to gVisor's
// defaults (unforwarded).
//
// With Config.Ask (ask.go), a new flow the policy refuses is held (its
// SYN or datagram dropped unanswered, a copy of the SYN's header kept to
// re-deliver at the decision) while the ask mode's broker says so, and a
// query for a name off the allowlist is answered with a synthetic
// address, nothing asked upstream.
//
// # When not to use it
//
// Never attach it to a link that carries traffic from
// anything but the sandbox; it terminates flows for every address. It is
// not a general-purpose NAT.
//
// # What lives where
//
// In this package: the stack and its configuration (stack.go), the TUN
// endpoint (tun.go, rawio.go), the event loop and its timers (poll.go,
// workers.go), the TCP relay (tcp.go's theory of operation; tcp_input.go,
// tcp_output.go, tcp_host.go, tcp_timers.go, tcpseg.go), the memory
// budget (mem.go), UDP (udp.go), ICMP and unreachables (icmp.go, ping.go,
// unreach.go), the deferred dial of a flow to a name and its
// watch (peek.go, peekwatch.go), the wait for the IPv6 gate (ready6.go),
// the host-loopback choice of the gateway's host ports (hostport.go), the
// ask mode's hold (ask.go), the allowed-flow
// and flow-end hooks for the audit log (flowhook.go), and the
// thin stack-facing side of the packages below (admit.go, blocklog.go,
// publish.go).
//
// The relay knows nothing of names, DNS or TLS (issue 34): it imports
// admission, relayapi, blocklog and inbound below, and not names,
// inspect or sniff (TestRelayImports holds it to that). The names side
// comes in as Config.Names, a [NameService] built by the embedder (the
// jail: names.New), and is handed what it needs of the stack when the
// stack starts (Attach with a relayapi.Deps); a flow to a name's first
// bytes are decided by the Peek and Watch it hands out, which the relay
// drives by package relayapi's verdicts.
//
// Beside it, importing none of it:
//   - [github.com/claude-sandbox/claude-sandbox/userstack/relayapi]: the
//     types between the relay and what is plugged into it: the names
//     side's dependencies on the stack (Deps), the first-bytes verdicts
//     and the Peek and Watch interfaces. Types only; names and inspect
//     import it, the relay imports it.
//   - [github.com/claude-sandbox/claude-sandbox/userstack/admission]: the
//     one admission point: Admit(proto, src, dst) decides every new flow
//     (refuse with a typed kind, dial, wait on the IPv6 gate, inspect a
//     name's first bytes, resolve, answer DNS or a host port locally, ask)
//     and never blocks or records; it owns the policy wrapper, the host
//     ports, the IPv6 gate's lookup and a name's host-side address, and
//     asks the names through a narrow interface.
//   - [github.com/claude-sandbox/claude-sandbox/userstack/names]: the
//     domain allowlist's names: the synthetic address pool, the host-side
//     resolver's cache (single flight, background lookups) and the DNS
//     server the sandbox's resolv.conf names, with no pointer to the
//     stack (its dependencies come as funcs when the stack attaches it:
//     clock, logger, a bounded worker spawner, the block recorder, the
//     UDP writer); it implements [NameService], the first-bytes part
//     with inspect. The embedder imports it, the relay does not.
//   - [github.com/claude-sandbox/claude-sandbox/userstack/sniff]: what a
//     flow's first bytes claim (a ClientHello's SNI, an HTTP request's
//     Host); pure, fuzzed parsers.
//   - [github.com/claude-sandbox/claude-sandbox/userstack/inspect]: the
//     decision on those bytes for a flow to a name (allow, refuse with a
//     reason, need more), the wait before the host is written anything and
//     the watch after a timeout, as a pure state machine (bytes and time
//     waited in, relayapi's verdicts out) the stack drives through the
//     Peek and Watch the names side hands out.
//   - [github.com/claude-sandbox/claude-sandbox/userstack/blocklog]: the
//     bounded, rate-limited queue block and eviction records take from the
//     event loop to Config.OnBlock and Config.OnEvict.
//   - [github.com/claude-sandbox/claude-sandbox/userstack/inbound]:
//     connections into the sandbox: the published ports' host sockets and
//     relays (served by the jail) and the gVisor dial from a gateway
//     ([Stack.DialSandbox]).
package userstack
