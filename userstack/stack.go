package userstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Dialer opens host-side connections. network is "tcp" or "udp"; address
// is "host:port" with a literal IP. For "udp" it must return promptly (a
// connected UDP socket needs no handshake): it is called from the packet
// path; and the conn must implement syscall.Conn (a *net.UDPConn does):
// datagrams are written to its descriptor without waiting. A *net.Dialer
// with a Timeout is the production Dialer.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Defaults.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultUDPIdleTimeout = 60 * time.Second
	// DefaultMaxInFlight is how many TCP connection attempts may be
	// pending (dialing) at once. High, so a few blackholed or slow
	// destinations cannot stall every other connection.
	DefaultMaxInFlight = 4096
	// relayBufferSize is the splice buffer per direction; at least 128 KiB
	// was needed to keep the path fast in measurements.
	relayBufferSize = 256 << 10
	nicID           = tcpip.NICID(1)
	// timeWait is the stack's TIME_WAIT (see setOptions).
	timeWait = 100 * time.Millisecond
)

// Config configures a Stack.
type Config struct {
	// Policy decides every new flow (required).
	Policy *netpolicy.Policy
	// Dialer opens the host-side sockets (required).
	Dialer Dialer
	// Gateways are addresses the stack answers as (ICMP echo; port 53 is
	// relayed like VirtualDNS). Everything else sent to them is refused.
	Gateways []netip.Addr
	// VirtualDNS are resolver addresses the sandbox's resolv.conf names;
	// the stack answers port 53 there (UDP and TCP) and relays to
	// Upstreams.
	VirtualDNS []netip.Addr
	// Upstreams are the host's real resolvers (often a loopback stub such
	// as 127.0.0.53:53). They are dialed through Dialer, on the host side,
	// without a policy check: they are host configuration, and only port 53
	// of the local addresses leads to them. The first one is used.
	Upstreams []netip.AddrPort
	// OnBlock, if set, is called (synchronously, keep it short) for every
	// refused flow.
	OnBlock func(netpolicy.Block)
	// Logf, if set, receives diagnostics.
	Logf func(format string, args ...any)
	// DialTimeout bounds each dial; default DefaultDialTimeout.
	DialTimeout time.Duration
	// UDPIdleTimeout expires idle UDP NAT entries; default
	// DefaultUDPIdleTimeout.
	UDPIdleTimeout time.Duration
	// MaxInFlight bounds pending TCP dials; default DefaultMaxInFlight.
	MaxInFlight int
	// Now is the clock for UDP idle expiry and block timestamps; default
	// time.Now. Tests inject a fake one.
	Now func() time.Time
	// NoJanitor turns off the goroutine that expires UDP flows; tests call
	// ExpireIdle themselves.
	NoJanitor bool
	// Pinger proxies ICMP echo to allowed destinations; nil leaves them
	// unanswered (ping shows loss while TCP and UDP work).
	Pinger Pinger
}

// Stack is a running userspace egress proxy.
type Stack struct {
	ep     stack.LinkEndpoint
	cfg    Config
	s      *stack.Stack
	local  map[netip.Addr]bool
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // every live conn, closed on Close
	flows  map[flowKey]*udpFlow
	wg     sync.WaitGroup
	pings  chan struct{} // a slot per proxied echo in flight
	work   *workers
}

// New builds the stack on ep and starts forwarding. The caller keeps
// ownership of the device behind ep but must not use ep otherwise.
func New(ep stack.LinkEndpoint, cfg Config) (*Stack, error) {
	if cfg.Policy == nil {
		return nil, errors.New("userstack: no policy")
	}
	if cfg.Dialer == nil {
		return nil, errors.New("userstack: no dialer")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.UDPIdleTimeout <= 0 {
		cfg.UDPIdleTimeout = DefaultUDPIdleTimeout
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	local := map[netip.Addr]bool{}
	for _, a := range append(append([]netip.Addr(nil), cfg.Gateways...), cfg.VirtualDNS...) {
		a = a.Unmap()
		if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
			return nil, fmt.Errorf("userstack: unusable local address %v", a)
		}
		local[a] = true
	}
	for _, u := range cfg.Upstreams {
		if !u.IsValid() {
			return nil, fmt.Errorf("userstack: invalid upstream resolver %v", u)
		}
	}

	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		// The sandbox never talks to the stack's own sockets except through
		// the forwarders; no local delivery shortcut.
		HandleLocal: false,
	})
	st := &Stack{
		ep:    ep,
		cfg:   cfg,
		s:     s,
		local: local,
		conns: map[net.Conn]struct{}{},
		flows: map[flowKey]*udpFlow{},
		pings: make(chan struct{}, maxPings),
	}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	st.work = newWorkers(st.ctx.Done(), &st.wg)
	if err := st.setOptions(); err != nil {
		s.Close()
		return nil, err
	}
	if err := tcpipErr("create NIC", s.CreateNIC(nicID, ep)); err != nil {
		s.Close()
		return nil, err
	}
	// Promiscuous: accept packets for any destination (the sandbox talks to
	// the whole internet through this one link). Spoofing: send replies
	// from those destinations' addresses. Both are what make the
	// forwarders see every flow; local addresses are restricted in the
	// handlers, not here.
	if err := tcpipErr("promiscuous mode", s.SetPromiscuousMode(nicID, true)); err != nil {
		s.Close()
		return nil, err
	}
	if err := tcpipErr("spoofing", s.SetSpoofing(nicID, true)); err != nil {
		s.Close()
		return nil, err
	}
	// The local addresses are real addresses of the NIC, so that gVisor
	// answers ICMP echo there (and only there: echo to promiscuous,
	// temporary addresses gets no built-in reply).
	for a := range local {
		proto := ipv4.ProtocolNumber
		if a.Is6() {
			proto = ipv6.ProtocolNumber
		}
		pa := tcpip.ProtocolAddress{Protocol: proto, AddressWithPrefix: tcpAddr(a).WithPrefix()}
		if err := tcpipErr("add address "+a.String(), s.AddProtocolAddress(nicID, pa, stack.AddressProperties{})); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	// rcvWnd 0: the stack's default receive buffer (raised above).
	tcpFwd := tcp.NewForwarder(s, 0, cfg.MaxInFlight, st.handleTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tcpFwd.HandlePacket)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, st.handleUDP)
	s.SetTransportProtocolHandler(icmp.ProtocolNumber4, st.handleICMP4)
	s.SetTransportProtocolHandler(icmp.ProtocolNumber6, st.handleICMP6)
	if !cfg.NoJanitor {
		st.wg.Add(1)
		go st.janitor()
	}
	return st, nil
}

// setOptions sets the stack options, each with why.
func (st *Stack) setOptions() error {
	s := st.s
	opts := []struct {
		name  string
		proto tcpip.TransportProtocolNumber
		opt   tcpip.SettableTransportProtocolOption
	}{
		// SACK lets the sandbox side recover from loss without resending
		// whole windows; peers without it saw poor throughput.
		{"SACK", tcp.ProtocolNumber, ptr(tcpip.TCPSACKEnabled(true))},
		// Reno: cubic caused stalls in peers' netstack proxies; the TUN
		// hop is loss-free and short, so reno is the safe choice.
		{"congestion control", tcp.ProtocolNumber, ptr(tcpip.CongestionControlOption("reno"))},
		// RACK loss detection dominated download time in measurements on
		// this path; plain fast retransmit is enough on a TUN.
		{"recovery", tcp.ProtocolNumber, ptr(tcpip.TCPRecovery(0))},
		// Large buffers: at MTU 65520 a few segments fill the defaults.
		{"receive buffer", tcp.ProtocolNumber, &tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}},
		{"send buffer", tcp.ProtocolNumber, &tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: 1 << 20, Max: 8 << 20}},
		// Let the receive window grow with the application's reads.
		{"moderate receive buffer", tcp.ProtocolNumber, ptr(tcpip.TCPModerateReceiveBufferOption(true))},
		// A short TIME_WAIT. When the remote end closes first, the stack's
		// endpoint is the one left in TIME_WAIT, and a new SYN for the
		// same four-tuple is dropped while it lasts (the forwarder is no
		// listener to hand it to), so the sandbox retries after a second:
		// with the default 60 s, a client that reuses its source port
		// stalled after a few thousand connections, and with 1 s about one
		// connection in 5,000 still did. TIME_WAIT guards against stray
		// old segments on a real network; the TUN hop has none. The
		// sandbox's kernel keeps its own TIME_WAIT for its side.
		{"TIME_WAIT timeout", tcp.ProtocolNumber, ptr(tcpip.TCPTimeWaitTimeoutOption(timeWait))},
	}
	for _, o := range opts {
		if err := tcpipErr(o.name, s.SetTransportProtocolOption(o.proto, o.opt)); err != nil {
			return err
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// tcpipErr converts gVisor's tcpip.Error, which is not a Go error, at the
// boundary.
func tcpipErr(what string, err tcpip.Error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("userstack: %s: %s", what, err)
}

// Close stops forwarding, closes every flow and waits for every goroutine
// the stack started.
func (st *Stack) Close() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	conns := st.conns
	st.conns = map[net.Conn]struct{}{}
	flows := st.flows
	st.flows = map[flowKey]*udpFlow{}
	st.mu.Unlock()
	st.cancel()
	for c := range conns {
		c.Close()
	}
	for _, f := range flows {
		f.close()
	}
	// Closing the gVisor stack first aborts handshakes still in progress
	// in CreateEndpoint; waiting first would wait for their timeouts
	// (about two minutes of SYN-ACK retries).
	st.s.Close()
	// Stop the link before waiting: a reader blocked in the device would
	// otherwise be waited for under the stack's lock (Stack.Wait).
	st.ep.Close()
	done := make(chan struct{})
	go func() {
		st.wg.Wait()
		close(done)
	}()
	// A forwarder goroutine that passed its closing check just before
	// Close may register its handshake endpoint after the abort above;
	// abort again until every goroutine is gone.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			st.s.Wait()
			return
		case <-tick.C:
			for _, e := range st.s.RegisteredEndpoints() {
				e.Abort()
			}
		}
	}
}

// track registers conns for Close; it reports false (and closes them) when
// the stack is closing.
func (st *Stack) track(cs ...net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		st.conns[c] = struct{}{}
	}
	return true
}

func (st *Stack) untrack(cs ...net.Conn) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, c := range cs {
		delete(st.conns, c)
	}
}

// isLocal reports whether a is one of the addresses the stack answers as.
func (st *Stack) isLocal(a netip.Addr) bool { return st.local[a.Unmap()] }

// upstream returns the resolver to relay DNS to.
func (st *Stack) upstream() (netip.AddrPort, bool) {
	if len(st.cfg.Upstreams) == 0 {
		return netip.AddrPort{}, false
	}
	return st.cfg.Upstreams[0], true
}

func (st *Stack) block(proto netpolicy.Proto, dst netip.AddrPort, rule string) {
	st.cfg.Logf("userstack: blocked %s %s (%s)", proto, dst, rule)
	if st.cfg.OnBlock != nil {
		st.cfg.OnBlock(netpolicy.Block{Time: st.cfg.Now(), Proto: proto, Dst: dst, Rule: rule})
	}
}

func toAddr(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}

// tcpAddr is toAddr's inverse.
func tcpAddr(a netip.Addr) tcpip.Address { return tcpip.AddrFromSlice(a.AsSlice()) }

// ipHeaderLen is the length of the IP header writeIP frames.
func ipHeaderLen(v6 bool) int {
	if v6 {
		return header.IPv6MinimumSize
	}
	return header.IPv4MinimumSize
}

// writeIP fills in the IP header at the front of pkt (its first
// ipHeaderLen bytes) for the transport bytes after it, and writes the
// packet to the sandbox: replies the stack frames itself (UDP, ICMP echo).
func (st *Stack) writeIP(pkt []byte, v6 bool, proto tcpip.TransportProtocolNumber, src, dst tcpip.Address) tcpip.Error {
	if !v6 {
		if len(pkt) > 0xffff {
			return &tcpip.ErrMessageTooLong{}
		}
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(proto), SrcAddr: src, DstAddr: dst})
		ip.SetChecksum(^ip.CalculateChecksum())
		return st.s.WriteRawPacket(nicID, header.IPv4ProtocolNumber, buffer.MakeWithData(pkt))
	}
	header.IPv6(pkt).Encode(&header.IPv6Fields{PayloadLength: uint16(len(pkt) - header.IPv6MinimumSize), TransportProtocol: proto, HopLimit: 64, SrcAddr: src, DstAddr: dst})
	return st.s.WriteRawPacket(nicID, header.IPv6ProtocolNumber, buffer.MakeWithData(pkt))
}

// Stats returns gVisor's counters, for diagnostics.
func (st *Stack) Stats() tcpip.Stats { return st.s.Stats() }
