package userstack

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// FuzzTUNInput feeds whole packets, as the sandbox's kernel would write
// them to the jail's TUN device, through the endpoint's input (the fast
// path, and gVisor's IP layer for everything else) into a live stack
// whose host side is socket pairs (no network). An input is a sequence of
// packets, each preceded by its length (two bytes, big-endian). After each
// packet the relay's state must be sane (see checkRelayState), and every
// packet the stack writes back must be a well-formed IP packet; a panic
// anywhere (the packet path or the event loop) fails the target. When the
// stack closes, every host socket it opened is closed.
//
// The initial sequence number is fixed (fuzzISS), so an input can carry a
// whole handshake and what follows it. CI runs it for a bounded time
// (scripts/test.sh); the seed corpus is in testdata/fuzz/FuzzTUNInput.
//
//	go test -run '^$' -fuzz FuzzTUNInput -fuzztime 60s ./userstack/
func FuzzTUNInput(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		z := newTUNFuzz(t)
		for _, pkt := range splitPackets(data) {
			z.input(pkt)
			z.quiesce()
			z.drain(t)
			checkRelayState(t, z.st)
		}
		z.st.Close()
		z.dialer.checkClosed(t)
		if now, peak := z.st.RelayMemory(); now != 0 || peak > int64(z.st.memBudget) {
			t.Fatalf("relay memory %d after Close (peak %d, budget %d): not all given back", now, peak, z.st.memBudget)
		}
	})
}

// fuzzISS is the stack's initial sequence number under the fuzz target.
const fuzzISS = 0x10000000

// maxFuzzPackets bounds the packets of one input.
const maxFuzzPackets = 48

func splitPackets(data []byte) [][]byte {
	var pkts [][]byte
	for len(data) >= 2 && len(pkts) < maxFuzzPackets {
		n := min(int(binary.BigEndian.Uint16(data)), len(data)-2)
		pkts = append(pkts, data[2:2+n])
		data = data[2+n:]
	}
	return pkts
}

func joinPackets(pkts ...[]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
		b = append(b, p...)
	}
	return b
}

// fuzzDialer hands out socket pairs, as fakeDialer does, without waiting
// for a reader: each host end starts with a greeting (a TCP banner, a UDP
// reply) so the host-to-sandbox path runs too. Destinations on a port
// that is a multiple of 7 fail to dial (the refused path).
type fuzzDialer struct {
	mu    sync.Mutex
	peers []net.Conn
}

func (d *fuzzDialer) DialContext(_ context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, err
	}
	if ap.Port()%7 == 0 {
		return nil, errors.New("connection refused")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.peers) >= 64 {
		return nil, errors.New("fuzz: too many dials")
	}
	typ := unix.SOCK_STREAM
	if network == "udp" {
		typ = unix.SOCK_SEQPACKET
	}
	a, b, err := socketPair(typ)
	if err != nil {
		return nil, err
	}
	_ = b.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = b.Write([]byte("hello from " + address))
	d.peers = append(d.peers, b)
	return a, nil
}

// checkClosed fails t unless every host socket the stack opened is closed
// (its peer reads to the end).
func (d *fuzzDialer) checkClosed(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	buf := make([]byte, 1<<16)
	for _, p := range d.peers {
		_ = p.SetReadDeadline(time.Now().Add(10 * time.Second)) // failsafe
		for {
			_, err := p.Read(buf)
			if err == nil {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("a host socket outlived the stack")
			}
			break
		}
		p.Close()
	}
}

type tunFuzz struct {
	tun    *TUN
	peer   *tunPeer
	st     *Stack
	dialer *fuzzDialer
	rx     tunRx
	buf    []byte
}

func newTUNFuzz(t *testing.T) *tunFuzz {
	tun, peer := newTUNPair(t, 0)
	z := &tunFuzz{tun: tun, peer: peer, dialer: &fuzzDialer{}, buf: make([]byte, 1<<17)}
	st, err := New(tun, Config{
		Policy:     netpolicy.MustNew(netpolicy.Config{}),
		Dialer:     z.dialer,
		Gateways:   []netip.Addr{gateway4},
		VirtualDNS: []netip.Addr{dns4},
		Upstreams:  []netip.AddrPort{upstream},
		NoJanitor:  true,
		// Small, so that inputs reach the budget's paths (partial
		// grants, flows held back and woken).
		MaxRelayMemory: 8 << 10,
		MaxUDPFlows:    4,
		tcpISS:         func() uint32 { return fuzzISS },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	z.st = st
	return z
}

// input hands pkt to the endpoint as its reader would after a read.
func (z *tunFuzz) input(pkt []byte) {
	n := len(pkt)
	if n == 0 || n >= rxHeadLen+rxBodyCap {
		return
	}
	if z.rx.body == nil {
		z.rx.body = buffer.NewViewSize(rxBodyCap)
	}
	k := copy(z.rx.head[:], pkt)
	copy(z.rx.body.AsSlice(), pkt[k:])
	z.tun.deliver(&z.rx, n)
}

// quiesce waits (boundedly) for dials in progress to end, so that what an
// input does next meets the flow in a settled state.
func (z *tunFuzz) quiesce() {
	for range 2000 {
		dialing := false
		z.st.mu.Lock()
		flows := make([]*tcpFlow, 0, len(z.st.tcp))
		for _, f := range z.st.tcp {
			flows = append(flows, f)
		}
		z.st.mu.Unlock()
		for _, f := range flows { // not under the stack's lock (see checkRelayState)
			f.mu.Lock()
			dialing = dialing || f.state == tcpDialing
			f.mu.Unlock()
		}
		if !dialing {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// drain reads what the stack wrote to the sandbox and checks that each is
// a well-formed IP packet.
func (z *tunFuzz) drain(t *testing.T) {
	t.Helper()
	for {
		n, _, err := unix.Recvfrom(z.peer.fd, z.buf, unix.MSG_DONTWAIT)
		if err != nil {
			return
		}
		checkOutbound(t, z.buf[:n])
	}
}

// checkOutbound fails t unless b is a packet the stack may send: IPv4 with
// a valid header and checksum or IPv6, carrying TCP (checksum valid), UDP
// or ICMP, its lengths consistent.
func checkOutbound(t *testing.T, b []byte) {
	t.Helper()
	var src, dst tcpip.Address
	var proto tcpip.TransportProtocolNumber
	var l4 []byte
	switch header.IPVersion(b) {
	case header.IPv4Version:
		ip := header.IPv4(b)
		if !ip.IsValid(len(b)) || !ip.IsChecksumValid() {
			t.Fatalf("the stack sent a malformed IPv4 packet: %x", b)
		}
		src, dst, proto, l4 = ip.SourceAddress(), ip.DestinationAddress(), ip.TransportProtocol(), ip.Payload()
	case header.IPv6Version:
		ip := header.IPv6(b)
		if !ip.IsValid(len(b)) {
			t.Fatalf("the stack sent a malformed IPv6 packet: %x", b)
		}
		src, dst, proto, l4 = ip.SourceAddress(), ip.DestinationAddress(), tcpip.TransportProtocolNumber(ip.NextHeader()), ip.Payload()
	default:
		t.Fatalf("the stack sent a non-IP packet: %x", b)
	}
	switch proto {
	case header.TCPProtocolNumber:
		h := header.TCP(l4)
		if !tcpHeaderOK(h[:min(len(h), int(h.DataOffset()))]) {
			t.Fatalf("the stack sent a malformed TCP header: %x", b)
		}
		p := h.Payload()
		if !h.IsChecksumValid(src, dst, checksum.Checksum(p, 0), uint16(len(p))) {
			t.Fatalf("the stack sent a TCP segment with a bad checksum: %x", b)
		}
	case header.UDPProtocolNumber:
		if len(l4) < header.UDPMinimumSize || int(header.UDP(l4).Length()) != len(l4) {
			t.Fatalf("the stack sent a malformed UDP datagram: %x", b)
		}
	case header.ICMPv4ProtocolNumber, header.ICMPv6ProtocolNumber:
	default:
		t.Fatalf("the stack sent protocol %d: %x", proto, b)
	}
}

// checkRelayState fails t unless the relay's tables agree with
// themselves: each flow under its own key, the count of opening TCP flows
// right, and each live TCP flow's buffers and sequence space consistent
// and within their bounds.
func checkRelayState(t *testing.T, st *Stack) {
	t.Helper()
	// The stack's lock is never held while a flow's is taken (flows take
	// the stack's under their own): snapshot the table first.
	type entry struct {
		k flowKey
		f *tcpFlow
	}
	var flows []entry
	st.mu.Lock()
	opening := 0
	for k, f := range st.tcp {
		flows = append(flows, entry{k, f})
		if f.opening { // set under both locks
			opening++
		}
	}
	counted := st.opening
	for k, f := range st.flows {
		if f.key != k {
			st.mu.Unlock()
			t.Fatalf("udp flow %v under key %v", f.key, k)
		}
	}
	if len(st.flows) > st.cfg.MaxUDPFlows {
		st.mu.Unlock()
		t.Fatalf("%d UDP flows, cap %d", len(st.flows), st.cfg.MaxUDPFlows)
	}
	st.mu.Unlock()
	if opening != counted || counted < 0 || counted > st.cfg.MaxInFlight {
		t.Fatalf("%d TCP flows opening, the stack counts %d", opening, counted)
	}
	for _, e := range flows {
		e.f.mu.Lock()
		err, desc := e.f.checkState(e.k), e.f.String()
		e.f.mu.Unlock()
		if err != "" {
			t.Fatalf("tcp flow %s: %s", desc, err)
		}
	}
	if now, peak := st.RelayMemory(); now < 0 || now > st.memBudget || peak > st.memBudget {
		t.Fatalf("relay memory %d (peak %d), budget %d", now, peak, st.memBudget)
	}
}

// checkState describes what is inconsistent in f (under f.mu), or "".
func (f *tcpFlow) checkState(k flowKey) string {
	switch {
	case f.key != k:
		return "filed under another key"
	case f.state > tcpClosed:
		return "unknown state"
	case f.state == tcpClosed:
		return ""
	case f.state != tcpDialing && f.fd < 0:
		return "connected without a host socket"
	}
	pend := 0
	for _, p := range f.pend {
		pend += len(p)
	}
	if pend != f.pendLen || f.pendLen > tcpRcvBuf || (f.pendLen > 0) != f.has(pendWaiting) && f.state == tcpEstablished {
		return "host-bound buffer inconsistent"
	}
	sent := seqnum.Size(0)
	for _, c := range f.sent {
		sent += seqnum.Size(len(c.data))
	}
	out := f.sndUna.Size(f.sndNxt)
	switch f.state {
	case tcpSynRcvd:
		if out != 1 || sent != 0 {
			return "SYN-RCVD with data outstanding"
		}
	case tcpEstablished:
		if out != sent && !(f.has(finToSandbox) && out == sent+1) {
			return "outstanding sequence space does not match the data kept"
		}
		if out > tcpSndBuf+1 {
			return "more in flight than the send buffer"
		}
	}
	return ""
}

// Seeds: the ordinary (handshakes, data, close, datagrams, echo both
// families), the unusual (fragments, IPv4 options, IPv6 extension
// headers, SYN options) and the malformed (issue 15's data offsets,
// truncations).
func fuzzSeeds() [][]byte {
	src4, dst4 := netip.AddrPortFrom(jail4, 40000), netip.MustParseAddrPort("203.0.113.7:80")
	src6, dst6 := netip.AddrPortFrom(jail6, 40000), netip.MustParseAddrPort("[2001:db8::7]:80")
	b := func(_ tcpip.NetworkProtocolNumber, p []byte) []byte { return p }
	flow := func(src, dst netip.AddrPort) [][]byte {
		return [][]byte{
			synWithOptions(src, dst, 1000),
			b(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: fuzzISS + 1}.bytes()),
			b(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: fuzzISS + 1, payload: []byte("GET / HTTP/1.0\r\n\r\n")}.bytes()),
			b(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1019, ack: fuzzISS + 20}.bytes()),
			b(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagFin, seq: 1019, ack: fuzzISS + 20}.bytes()),
			b(tcpSeg{src: src, dst: dst, flags: header.TCPFlagRst, seq: 1020}.bytes()),
		}
	}
	var seeds [][]byte
	seeds = append(seeds, joinPackets(flow(src4, dst4)...), joinPackets(flow(src6, dst6)...))
	// Issue 15: data offsets below 5 words and past the segment.
	for _, off := range []uint8{0, 16, 60} {
		_, p := withDataOffset(tcpSeg{src: src4, dst: dst4, flags: header.TCPFlagSyn, seq: 1}, off)
		_, q := withDataOffset(tcpSeg{src: src6, dst: dst6, flags: header.TCPFlagSyn, seq: 1, payload: []byte("0123456789")}, off)
		seeds = append(seeds, joinPackets(p, q))
	}
	udp4, udp6 := netip.MustParseAddrPort("203.0.113.7:5000"), netip.MustParseAddrPort("[2001:db8::7]:5000")
	seeds = append(seeds,
		joinPackets(b(udpBytes(src4, udp4, []byte("one"))), b(udpBytes(src4, udp4, []byte("two"))), b(udpBytes(src4, netip.AddrPortFrom(dns4, 53), []byte("query")))),
		joinPackets(b(udpBytes(src6, udp6, []byte("one"))), b(udpBytes(src6, netip.MustParseAddrPort("[fd00::1]:53"), []byte("blocked")))),
		joinPackets(b(echoBytes(jail4, gateway4)), b(echoBytes(jail4, netip.MustParseAddrPort("203.0.113.7:0").Addr())), b(echoBytes(jail6, netip.MustParseAddr("2001:db8::7")))),
		joinPackets(ipv4Fragments(src4, udp4, pattern(64))...),
		joinPackets(ipv6Fragment(src6, udp6, []byte("atomic"))),
		joinPackets(ipv4WithOptions(synWithOptions(src4, dst4, 5))),
		joinPackets(b(tcpSeg{src: src4, dst: netip.MustParseAddrPort("203.0.113.7:77"), flags: header.TCPFlagSyn, seq: 9}.bytes())), // refused dial
	)
	whole := synWithOptions(src4, dst4, 1)
	var cuts [][]byte
	for _, n := range []int{1, 19, 20, 39, 40, 43} {
		cuts = append(cuts, whole[:n])
	}
	return append(seeds, joinPackets(cuts...))
}

// synWithOptions is a SYN from src to dst with MSS, window scale, SACK
// permitted and timestamp options.
func synWithOptions(src, dst netip.AddrPort, seq uint32) []byte {
	opts := []byte{2, 4, 0x05, 0xb4, 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1}
	b := make([]byte, header.TCPMinimumSize+len(opts))
	t := header.TCP(b)
	t.Encode(&header.TCPFields{SrcPort: src.Port(), DstPort: dst.Port(), SeqNum: seq, DataOffset: uint8(len(b)), Flags: header.TCPFlagSyn, WindowSize: 64240})
	copy(b[header.TCPMinimumSize:], opts)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, tcpAddr(src.Addr()), tcpAddr(dst.Addr()), uint16(len(b)))
	t.SetChecksum(^t.CalculateChecksum(xsum))
	_, p := ipPacket(src.Addr(), dst.Addr(), header.TCPProtocolNumber, b)
	return p
}

// ipv4Fragments splits a UDP datagram into two IPv4 fragments.
func ipv4Fragments(src, dst netip.AddrPort, payload []byte) [][]byte {
	_, whole := udpBytes(src, dst, payload)
	l4 := whole[header.IPv4MinimumSize:]
	cut := 24 // a multiple of 8
	frag := func(part []byte, off int, more bool) []byte {
		p := make([]byte, header.IPv4MinimumSize+len(part))
		ip := header.IPv4(p)
		var flags uint8
		if more {
			flags = header.IPv4FlagMoreFragments
		}
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(p)), ID: 77, Flags: flags, FragmentOffset: uint16(off), TTL: 64, Protocol: uint8(header.UDPProtocolNumber), SrcAddr: tcpAddr(src.Addr()), DstAddr: tcpAddr(dst.Addr())})
		ip.SetChecksum(^ip.CalculateChecksum())
		copy(p[header.IPv4MinimumSize:], part)
		return p
	}
	return [][]byte{frag(l4[:cut], 0, true), frag(l4[cut:], cut, false)}
}

// ipv6Fragment is a UDP datagram in one IPv6 fragment (an extension
// header the fast path leaves to gVisor).
func ipv6Fragment(src, dst netip.AddrPort, payload []byte) []byte {
	_, whole := udpBytes(src, dst, payload)
	l4 := whole[header.IPv6MinimumSize:]
	p := make([]byte, header.IPv6MinimumSize+8+len(l4))
	header.IPv6(p).Encode(&header.IPv6Fields{PayloadLength: uint16(8 + len(l4)), TransportProtocol: header.IPv6FragmentHeader, HopLimit: 64, SrcAddr: tcpAddr(src.Addr()), DstAddr: tcpAddr(dst.Addr())})
	fh := p[header.IPv6MinimumSize:]
	fh[0] = uint8(header.UDPProtocolNumber)
	binary.BigEndian.PutUint32(fh[4:], 99)
	copy(p[header.IPv6MinimumSize+8:], l4)
	return p
}

// ipv4WithOptions rewrites an IPv4 packet to carry four bytes of options
// (a NOP list) in a six-word header.
func ipv4WithOptions(p []byte) []byte {
	ip := header.IPv4(p)
	q := make([]byte, len(p)+4)
	copy(q, p[:header.IPv4MinimumSize])
	copy(q[header.IPv4MinimumSize:], []byte{1, 1, 1, 0})
	copy(q[header.IPv4MinimumSize+4:], p[header.IPv4MinimumSize:])
	nip := header.IPv4(q)
	nip.SetHeaderLength(header.IPv4MinimumSize + 4)
	nip.SetTotalLength(ip.TotalLength() + 4)
	nip.SetChecksum(0)
	nip.SetChecksum(^nip.CalculateChecksum())
	return q
}
