package userstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
	"github.com/claude-sandbox/claude-sandbox/userstack/blocklog"
)

// Dialer opens host-side connections, for an embedder that needs its own
// (a socket option, a different namespace); without one the stack opens
// its sockets itself, which is faster. network is "tcp" or "udp"; address
// is "host:port" with a literal IP. For "udp" it must return promptly (a
// connected UDP socket needs no handshake): it is called from the packet
// path. A Dialer that is also a [PacketListener] opens the UDP mappings'
// sockets with ListenPacket instead (one per sandbox socket, as the
// stack's own); one that is not gets a "udp" dial per sandbox socket and
// destination, and so the narrower NAT of a connected socket (replies
// from that destination's address and port only). Every conn must implement syscall.Conn (*net.TCPConn and
// *net.UDPConn do): the stack takes its descriptor over (a duplicate; the
// conn itself is closed at once) and reads and writes it on its event loop.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Defaults.
const (
	DefaultDialTimeout = 10 * time.Second
	// DefaultUDPIdleTimeout is how long a UDP mapping (its host port) is
	// kept without a datagram from the sandbox or a reply delivered to it:
	// five minutes, the default RFC 4787 recommends (REQ-5: never under
	// two). Shorter, a server that tracks its clients by address and port
	// (or a peer behind a NAT of its own) sees the sandbox come back from
	// a new port after a quiet spell; the cost of keeping mappings longer
	// is bounded by MaxUDPFlows, whose eviction takes the least recently
	// used mapping first.
	DefaultUDPIdleTimeout = 5 * time.Minute
	// MinUDPIdleTimeout is RFC 4787's floor. Shorter timeouts are
	// accepted (tests use them) but break it.
	MinUDPIdleTimeout = 2 * time.Minute
	// DefaultMaxInFlight is how many TCP connections may be opening at
	// once (dialing, a flow to a name's lookup included, or waiting for
	// the sandbox's handshake ACK). High, so
	// a few blackholed or slow destinations cannot stall every other
	// connection; bounded, so a SYN flood cannot take every descriptor.
	DefaultMaxInFlight = 4096
	// maxDefaultFlows and minDefaultFlows bound the default of
	// Config.MaxFlows (defaultMaxFlows).
	maxDefaultFlows = 16384
	minDefaultFlows = 64
	// DefaultMaxUDPFlows caps the UDP NAT entries (each a host socket
	// bound to its own ephemeral port): a flood of new flows from the
	// sandbox evicts its own least recently used ones instead of taking
	// every ephemeral port of the host.
	DefaultMaxUDPFlows = 512
	nicID              = tcpip.NICID(1)
)

// Config configures a Stack.
type Config struct {
	// Policy decides every new flow (required). Its rules may be replaced
	// while the stack runs ([Stack.SetPolicy]); each new flow is checked
	// against one complete rule set, and flows already open are kept.
	Policy *netpolicy.Policy
	// Dialer opens the host-side sockets; nil: the stack's own
	// non-blocking sockets (connected from the event loop).
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
	// HostPorts are the ports of the host's loopback the sandbox reaches
	// through the Gateways (hostport.go): a flow to a gateway on one of
	// them is relayed to 127.0.0.1 (an IPv6 gateway: [::1]) on the host
	// side, without a policy check. Every other gateway port is refused.
	HostPorts []netpolicy.HostPort
	// Ask, when set, is the ask mode (issue 31, ask.go): a new TCP flow
	// the policy refuses (a name off the allowlist, an address, a
	// gateway port that is not a host port) is given to it first, and
	// held (dropped unanswered: the sandbox retransmits its SYN) while
	// it says so; a query for a name off the allowlist is answered with
	// a synthetic address, nothing asked upstream. Called on the packet
	// path: it must not block.
	Ask func(ask.Flow) ask.Verdict
	// Inbound lets DialSandbox open connections from a gateway into the
	// sandbox (publish.go): every packet to a gateway then takes gVisor's
	// path, where those connections' endpoints are.
	Inbound bool
	// OnBlock, if set, is called for refused flows (the stack's own, and
	// those given to [Stack.RecordBlock]), in order, from a goroutine of
	// its own: records leave the event loop through a bounded,
	// rate-limited queue (blocklog.go), and those beyond it are only
	// counted ([Stack.BlocksDropped]). It may take its time (write to
	// a file), at the cost of records dropped meanwhile.
	OnBlock func(netpolicy.Block)
	// Logf, if set, receives diagnostics (the jail routes them to its
	// debug log). It is called on the event loop: it must not block.
	Logf func(format string, args ...any)
	// DialTimeout bounds each dial; default DefaultDialTimeout.
	DialTimeout time.Duration
	// UDPIdleTimeout expires idle UDP mappings (a mapping is refreshed by
	// every datagram the sandbox sends through it and every reply it
	// delivers; filtered datagrams do not refresh it); default
	// DefaultUDPIdleTimeout. Below MinUDPIdleTimeout it breaks RFC 4787's
	// floor: for tests.
	UDPIdleTimeout time.Duration
	// MaxInFlight bounds TCP connections still opening (see
	// DefaultMaxInFlight); a SYN over it is dropped, unanswered and
	// unrecorded, and the sandbox retries it. Default DefaultMaxInFlight.
	MaxInFlight int
	// MaxFlows bounds the TCP flows relayed at once, opening or
	// established: each holds a host socket (a descriptor of the
	// launcher's). A SYN over it is refused with a RST and recorded
	// (its rule names the cap); flows already open are kept. Default:
	// half of what the launcher's RLIMIT_NOFILE (its soft limit, read
	// when the stack starts) leaves beside MaxUDPFlows, at least 64 and
	// at most 16,384 (defaultMaxFlows): a sandbox holding connections
	// open cannot take every descriptor of the launcher, whose own
	// work (the live policy's re-reads, new UDP mappings) needs some.
	MaxFlows int
	// MaxUDPFlows caps the live UDP flows; default DefaultMaxUDPFlows.
	// A new flow beyond it evicts the least recently used one (its host
	// socket closes), reported to OnEvict.
	MaxUDPFlows int
	// OnEvict, if set, is called for UDP flows evicted to stay under
	// MaxUDPFlows (Dst is the evicted flow's destination, Rule the
	// reason), as OnBlock is: from the block records' goroutine, through
	// their queue, bounded and rate-limited (a burst of 4096 eviction
	// records, then BlockRecordRate a second), those beyond it only
	// counted ([Stack.EvictRecordsDropped]); every eviction is counted in
	// [Stack.UDPEvictions].
	OnEvict func(netpolicy.Block)
	// OnFlow, when set, is told of every new TCP flow let through and
	// every new destination a UDP mapping admits, from the event loop (it
	// must return quickly): the audit log's allowed flows (flowhook.go).
	OnFlow func(Flow)
	// OnFlowEnd, when set, is told of the end of each flow OnFlow was
	// told of (a UDP mapping's: once, whatever its destinations), with
	// its bytes each way and duration, from the event loop, a worker, the
	// janitor or Close (it must return quickly). Nil: nothing is done at
	// a flow's end beyond what the relay does anyway.
	OnFlowEnd func(FlowEnd)
	// MaxRelayMemory bounds the bytes the TCP relay buffers across all
	// flows (see mem.go), the connections into the sandbox's buffers
	// included (publish.go); default DefaultMaxRelayMemory.
	MaxRelayMemory int
	// Now is the clock for UDP idle expiry and block timestamps; default
	// time.Now. Tests inject a fake one.
	Now func() time.Time
	// NoJanitor turns off the goroutine that expires UDP flows; tests call
	// ExpireIdle themselves.
	NoJanitor bool
	// Pinger proxies ICMP echo to allowed destinations; nil leaves them
	// unanswered (ping shows loss while TCP and UDP work).
	Pinger Pinger
	// Names, when set, turns the domain allowlist on: the stack answers
	// DNS at VirtualDNS through it, it hands out synthetic addresses for
	// allowed names, and the open internet is refused. Build it with
	// package userstack/names (names.New); it serves one stack.
	Names NameService
	// IPv6Ready, when set, is asked before a flow to an IPv6 destination
	// that the policy allows leaves for the host (a TCP dial, a UDP
	// mapping's first datagram to a destination, a proxied echo; a name's
	// IPv6 addresses too): it returns a channel that is closed once the
	// policy is ready to decide IPv6 destinations (the jail: once its
	// NAT64 prefix discovery has ended, which the call starts when it has
	// not run yet). Until then the flow waits off the packet loop (see
	// ready6.go), then is checked against the policy again. The channel
	// must close within a few seconds; a flow still waiting after
	// DialTimeout is refused. nil: IPv6 flows leave at once.
	IPv6Ready func() <-chan struct{}

	// Test seams of the TCP relay (tcptest_test.go): the initial sequence
	// number of each flow (default: random), and the clock its
	// retransmission timer measures time by (default: time.Now; the
	// timer itself still runs on the event loop, and with a clock that
	// does not move, runs out without effect).
	tcpISS   func() uint32
	tcpClock func() time.Time
}

// Stack is a running userspace egress proxy.
type Stack struct {
	ep     stack.LinkEndpoint
	cfg    Config
	s      *stack.Stack
	ctx    context.Context
	cancel context.CancelFunc

	// The DNS query records' rate bound (flowhook.go): the second the
	// count is of, the count, and the records left out.
	dnsWindow, dnsCount atomic.Int64
	dnsDropped          atomic.Uint64

	mu      sync.Mutex
	closed  bool
	tcp     map[flowKey]*tcpFlow
	opening int // TCP flows not yet established (dialing or SYN-RCVD)
	flows   map[flowKey]*udpFlow
	wg      sync.WaitGroup
	pings   chan struct{} // a slot per proxied echo in flight
	work    *workers
	poll    *poller // the event loop: the TUN and every host socket
	// The loop's reply source address (recvfrom's, on the heap: no
	// allocation per reply).
	udpFrom    unix.RawSockaddrAny
	udpFromLen uint32
	// eimUDP: UDP mappings are one unconnected host socket per sandbox
	// socket (the stack's own, or a PacketListener's), not a Dialer's
	// connected conn per destination.
	eimUDP bool
	// hostLo caches which loopback each host port leads to (hostport.go).
	hostLo sync.Map

	// The relay's memory budget (mem.go).
	memBudget    int64
	memUsed      atomic.Int64
	memPeak      atomic.Int64
	memWaiting   atomic.Bool // memWaiters is not empty
	memWakeArmed atomic.Bool
	memWake      loopTimer
	memWaiters   []*tcpFlow   // under mu
	memSpare     []*tcpFlow   // under mu: memWaiters' other buffer
	tcpLive      atomic.Int32 // len(tcp), for the flows' shares

	heldUDP   atomic.Int32        // datagrams held for the IPv6 gate (ready6.go)
	names     NameService         // the domain allowlist, nil when off (Config.Names)
	peekMax   int                 // names.FirstBytesMax(): the first bytes a flow to a name holds
	adm       *admission.Admitter // the one admission point of new flows (package admission)
	blocks    *blocklog.Log       // records on their way to OnBlock and OnEvict (blocklog.go)
	evictions atomic.Uint64
	udpPeers  atomic.Int64 // the peers all UDP mappings remember (udp.go)
}

// New builds the stack on ep and starts forwarding. The caller keeps
// ownership of the device behind ep but must not use ep otherwise.
func New(ep stack.LinkEndpoint, cfg Config) (*Stack, error) {
	if cfg.Policy == nil {
		return nil, errors.New("the egress stack was given no policy")
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
	if cfg.MaxUDPFlows <= 0 {
		cfg.MaxUDPFlows = DefaultMaxUDPFlows
	}
	if cfg.MaxRelayMemory <= 0 {
		cfg.MaxRelayMemory = DefaultMaxRelayMemory
	}
	if cfg.MaxFlows <= 0 {
		cfg.MaxFlows = defaultMaxFlows(cfg.MaxUDPFlows)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.tcpISS == nil {
		cfg.tcpISS = tcpISS
	}
	if cfg.tcpClock == nil {
		cfg.tcpClock = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	local := map[netip.Addr]bool{}
	for _, a := range append(append([]netip.Addr(nil), cfg.Gateways...), cfg.VirtualDNS...) {
		a = a.Unmap()
		if !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() {
			return nil, fmt.Errorf("the egress stack was given an unusable local address %v", a)
		}
		local[a] = true
	}
	for _, u := range cfg.Upstreams {
		if !u.IsValid() {
			return nil, fmt.Errorf("the egress stack was given an invalid upstream resolver %v", u)
		}
	}

	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		// The stack has no sockets of its own: everything goes to the
		// transport handlers; no local delivery shortcut.
		HandleLocal: false,
	})
	if cfg.Inbound {
		if err := boundInboundBuffers(s); err != nil {
			s.Close()
			return nil, err
		}
	}
	st := &Stack{
		ep:    ep,
		cfg:   cfg,
		s:     s,
		tcp:   map[flowKey]*tcpFlow{},
		flows: map[flowKey]*udpFlow{},
		pings: make(chan struct{}, maxPings),

		memBudget: int64(cfg.MaxRelayMemory),
		blocks:    blocklog.New(),
	}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	if cfg.Names != nil {
		if err := cfg.Names.Attach(st.nameDeps()); err != nil {
			st.cancel()
			s.Close()
			return nil, err
		}
		st.names = cfg.Names
		st.peekMax = cfg.Names.FirstBytesMax()
	}
	st.adm = st.newAdmitter()
	_, listens := cfg.Dialer.(PacketListener)
	st.eimUDP = cfg.Dialer == nil || listens
	st.memWake = newLoopTimer(st)
	st.work = newWorkers(st.ctx.Done(), &st.wg)
	poll, err := newPoller()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("the egress stack's event loop: %w", err)
	}
	st.poll = poll
	// Before CreateNIC, which attaches the link and starts its reader.
	// No transport endpoints at all: these handlers see every segment,
	// datagram and echo request (gVisor's TCP and UDP protocols only parse
	// and validate their headers).
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, st.handleTCP)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, st.handleUDP)
	s.SetTransportProtocolHandler(icmp.ProtocolNumber4, st.handleICMP4)
	s.SetTransportProtocolHandler(icmp.ProtocolNumber6, st.handleICMP6)
	if t, ok := ep.(*TUN); ok {
		t.tcp, t.udp, t.poll = st.tcpInput, st.udpInput, poll
		if cfg.Inbound {
			t.toStack = st.isGateway
		}
	}
	fail := func(err error) (*Stack, error) {
		s.Close()
		poll.close()
		return nil, err
	}
	if err := tcpipErr("create NIC", s.CreateNIC(nicID, ep)); err != nil {
		return fail(err)
	}
	// Promiscuous: accept packets for any destination (the sandbox talks to
	// the whole internet through this one link). Spoofing: send replies
	// from those destinations' addresses. Both are what make the
	// handlers see every flow; local addresses are restricted in the
	// handlers, not here.
	if err := tcpipErr("promiscuous mode", s.SetPromiscuousMode(nicID, true)); err != nil {
		return fail(err)
	}
	if err := tcpipErr("spoofing", s.SetSpoofing(nicID, true)); err != nil {
		return fail(err)
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
			return fail(err)
		}
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	if !cfg.NoJanitor {
		st.wg.Add(1)
		go st.janitor()
	}
	st.wg.Add(1)
	go st.deliverBlocks()
	return st, nil
}

// tcpipErr converts gVisor's tcpip.Error, which is not a Go error, at the
// boundary.
func tcpipErr(what string, err tcpip.Error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("the egress stack: %s: %s", what, err)
}

// Close stops forwarding, closes every flow and waits for every goroutine
// the stack started. It must not be called from the stack's own callbacks
// (Logf, OnBlock, the TUN's onError, a Dialer), which may run on the event
// loop it waits for.
func (st *Stack) Close() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	tcpFlows := st.tcp
	st.tcp = map[flowKey]*tcpFlow{}
	flows := st.flows
	st.flows = map[flowKey]*udpFlow{}
	st.mu.Unlock()
	st.cancel()
	st.closeTCP(tcpFlows)
	for _, f := range flows {
		f.close("stack closed")
	}
	st.s.Close()
	st.ep.Close()
	st.poll.close()
	st.wg.Wait()
	st.s.Wait()
}

// upstream returns the resolver to relay DNS to.
func (st *Stack) upstream() (netip.AddrPort, bool) {
	if len(st.cfg.Upstreams) == 0 {
		return netip.AddrPort{}, false
	}
	return st.cfg.Upstreams[0], true
}

// blockName records a refused flow or query; name is the host name when
// the domain allowlist decided it (package names), "" for a flow decided by
// address. Every block record of the stack is made here.
func (st *Stack) blockName(proto netpolicy.Proto, dst netip.AddrPort, name, rule string) {
	// No Logf here: a flood of refused flows (or of queries for names
	// not allowed) would be a flood of lines formatted on the loop. The
	// record, through the bounded, rate-limited queue, carries it.
	st.RecordBlock(netpolicy.Block{Proto: proto, Dst: dst, Name: name, Rule: rule})
}

func toAddr(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}

// tcpAddr is toAddr's inverse.
func tcpAddr(a netip.Addr) tcpip.Address {
	if a.Is4() {
		return tcpip.AddrFrom4(a.As4())
	}
	return tcpip.AddrFrom16(a.As16())
}

// ipHeaderLen is the length of the IP header writeIP frames.
func ipHeaderLen(v6 bool) int {
	if v6 {
		return header.IPv6MinimumSize
	}
	return header.IPv4MinimumSize
}

// encodeIP fills in the IP header at the front of hdr (its first
// ipHeaderLen bytes) for l4Len transport bytes.
func encodeIP(hdr []byte, v6 bool, proto tcpip.TransportProtocolNumber, l4Len int, src, dst tcpip.Address) error {
	ipLen := ipHeaderLen(v6)
	if ipLen+l4Len > 0xffff {
		return tcpipErr("frame", &tcpip.ErrMessageTooLong{})
	}
	if v6 {
		header.IPv6(hdr).Encode(&header.IPv6Fields{PayloadLength: uint16(l4Len), TransportProtocol: proto, HopLimit: 64, SrcAddr: src, DstAddr: dst})
		return nil
	}
	ip := header.IPv4(hdr)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(ipLen + l4Len), TTL: 64, Protocol: uint8(proto), SrcAddr: src, DstAddr: dst})
	ip.SetChecksum(^ip.CalculateChecksum())
	return nil
}

// NewIPPacket returns a packet from src to dst (IPv6 when v6) with room
// for l4Len bytes of protocol proto after its IP header, the header
// written, and that transport part of it; l4Len must fit the IP length
// field. The jail's sink frames its answers with it.
func NewIPPacket(v6 bool, proto tcpip.TransportProtocolNumber, l4Len int, src, dst tcpip.Address) (pkt, transport []byte) {
	ipLen := ipHeaderLen(v6)
	pkt = make([]byte, ipLen+l4Len)
	if err := encodeIP(pkt, v6, proto, l4Len, src, dst); err != nil {
		panic(err) // a caller's bug: nothing it frames comes near 64 KiB
	}
	return pkt, pkt[ipLen:]
}

// writeIP frames the transport bytes after pkt's first ipHeaderLen bytes
// in an IP header there and writes the packet to the sandbox: replies the
// stack frames itself (UDP, ICMP echo).
func (st *Stack) writeIP(pkt []byte, v6 bool, proto tcpip.TransportProtocolNumber, src, dst tcpip.Address) error {
	ipLen := ipHeaderLen(v6)
	if err := encodeIP(pkt, v6, proto, len(pkt)-ipLen, src, dst); err != nil {
		return err
	}
	return st.emit(nil, pkt, v6, ipLen, nil, false)
}

// emit writes a packet the stack framed: hdr (the IP header, and the
// transport header at l4At), then payload. On the TUN that is one writev
// with no copy and no trip through gVisor; partial asks the kernel to
// complete a TCP checksum (see TUN.writeFramed). Other links (tests) get
// a copy through gVisor, and never a partial checksum.
//
// w, if not nil, is the pooled write state hdr may live in.
func (st *Stack) emit(w *tunWrite, hdr []byte, v6 bool, l4At int, payload []byte, partial bool) error {
	if tun, ok := st.ep.(*TUN); ok {
		return tun.writeFramed(w, hdr, l4At, payload, partial)
	}
	proto := header.IPv4ProtocolNumber
	if v6 {
		proto = header.IPv6ProtocolNumber
	}
	pkt := make([]byte, 0, len(hdr)+len(payload))
	pkt = append(append(pkt, hdr...), payload...)
	return tcpipErr("write", st.s.WriteRawPacket(nicID, proto, buffer.MakeWithData(pkt)))
}

// SetPolicy puts next's rules in force for every new flow, atomically (the
// Config's Policy takes them over, see [netpolicy.Policy.Set]); flows
// already open are kept. Safe to call from any goroutine.
func (st *Stack) SetPolicy(next *netpolicy.Policy) { st.cfg.Policy.Set(next) }

// defaultMaxFlows is Config.MaxFlows' default: half of the descriptors the
// launcher's RLIMIT_NOFILE soft limit leaves beside udpFlows UDP mappings,
// within [minDefaultFlows, maxDefaultFlows]. (Go raises the soft limit to
// the hard one when a program starts.)
func defaultMaxFlows(udpFlows int) int {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		return minDefaultFlows
	}
	return flowsForNOFILE(r.Cur, udpFlows)
}

func flowsForNOFILE(nofile uint64, udpFlows int) int {
	n := min(nofile, 1<<30)
	left := int(n) - udpFlows
	return min(max(left/2, minDefaultFlows), maxDefaultFlows)
}
