package userstack

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/inspect"
	"github.com/claude-sandbox/claude-sandbox/userstack/names"
	"github.com/claude-sandbox/claude-sandbox/userstack/sniff"
)

// Floods from the sandbox that make the stack's own resolver (package
// names) ask upstream: each query upstream is a goroutine, a host socket
// and a 64 KiB read buffer in the launcher for as long as the upstream
// takes (up to 6 s over UDP, two tries), so the number of them at once
// must not follow the sandbox's packet rate.

// stallDialer is the allowlist's host side (a zoneDialer) whose upstream
// resolver answers every query but those for a type in stall, which it
// reads and never answers (a resolver whose authority does not answer);
// it counts the upstream conns open at once and their peak.
type stallDialer struct {
	*zoneDialer
	stall map[string]bool // "A", "AAAA", ...: never answered
	wild  bool            // every name has A 203.0.113.10 and AAAA 2001:db8::10 (a wildcard zone)
	many  int             // with wild: every name has this many A records (over UDP: truncated)

	mu               sync.Mutex
	open, peak, dial int
}

type countedConn struct {
	net.Conn
	d    *stallDialer
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.d.mu.Lock()
		c.d.open--
		c.d.mu.Unlock()
	})
	return c.Conn.Close()
}

func (d *stallDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if address != upstream.String() {
		return d.zoneDialer.DialContext(ctx, network, address)
	}
	typ := unix.SOCK_SEQPACKET
	if network == "tcp" {
		typ = unix.SOCK_STREAM
	}
	a, b, err := socketPair(typ)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.open++
	d.dial++
	d.peak = max(d.peak, d.open)
	d.mu.Unlock()
	go func() {
		defer b.Close()
		buf := make([]byte, 65535)
		for {
			var q []byte
			if network == "tcp" {
				var hdr [2]byte
				if _, err := io.ReadFull(b, hdr[:]); err != nil {
					return
				}
				q = make([]byte, binary.BigEndian.Uint16(hdr[:]))
				if _, err := io.ReadFull(b, q); err != nil {
					return
				}
			} else {
				n, err := b.Read(buf)
				if err != nil {
					return
				}
				q = buf[:n]
			}
			var m dnsmessage.Message
			if m.Unpack(q) != nil || len(m.Questions) != 1 {
				return
			}
			if d.stall[m.Questions[0].Type.String()[len("Type"):]] {
				_, _ = io.Copy(io.Discard, b) // until the stack gives up
				return
			}
			r := d.answer(q)
			if d.wild {
				r = wildAnswer(m, d.many, network == "tcp")
			}
			if network == "tcp" {
				r = append(binary.BigEndian.AppendUint16(nil, uint16(len(r))), r...)
			}
			_, _ = b.Write(r)
		}
	}()
	return &countedConn{Conn: a, d: d}, nil
}

func (d *stallDialer) counts() (open, peak, dials int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.open, d.peak, d.dial
}

func newStallHarness(t *testing.T, rules map[string][]uint16, stall ...string) (*namesHarness, *stallDialer) {
	t.Helper()
	h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	d := &stallDialer{zoneDialer: newZoneDialer(), stall: map[string]bool{}}
	for _, s := range stall {
		d.stall[s] = true
	}
	h.start(t, Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{Allow: []netip.Prefix{netip.MustParsePrefix("192.168.1.50/32")}}),
		Dialer:         d,
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
		Names:          newNames(t, NameConfig{Rules: fakeRules{allow: rules}}),
	})
	return &namesHarness{harness: h, zone: d.zoneDialer}, d
}

// TestNamesUDPFloodToStalledNameIsBounded: a name whose A record resolves
// but whose AAAA query upstream never answers; the sandbox floods UDP to
// the name's synthetic address. Every datagram found the cache not fresh
// for both families and started a lookup of its own upstream (seen: one
// upstream socket, goroutine and 64 KiB buffer per datagram, 400 at once
// for 400 datagrams). One lookup per name and type is under way at a time,
// and background lookups at once are bounded (and since only the family
// dialed waits to be fresh, the datagrams are relayed meanwhile).
func TestNamesUDPFloodToStalledNameIsBounded(t *testing.T) {
	h, d := newStallHarness(t, map[string][]uint16{"api.test": nil}, "AAAA")
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	// The A answer is enough for an IPv4 synthetic address: the flood's
	// sockets are relayed (their dials taken here, so that the dialer
	// never waits on its channel).
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case dl := <-h.zone.dials:
				dl.peer.Close()
			case <-stop:
				return
			}
		}
	}()
	const flood = 400
	for i := range flood {
		src := netip.AddrPortFrom(jail4, uint16(20000+i%50))
		h.send(udpBytes(src, netip.AddrPortFrom(api, 9000), []byte("x")))
	}
	time.Sleep(300 * time.Millisecond) // the lookups the flood started are under way
	_, peak, dials := d.counts()
	if peak > names.MaxBackgroundLookups+1 {
		t.Fatalf("upstream queries at once: %d (%d dials) for %d datagrams to one name, want at most %d",
			peak, dials, flood, names.MaxBackgroundLookups+1)
	}
	t.Logf("upstream queries at once: %d, dials %d", peak, dials)
}

// TestNamesQueryFloodPrefetchIsBounded: the same stalled AAAA, and a flood
// of A queries for the name (each answered from the cache at once): every
// answer started a prefetch of the other family upstream, none waiting
// for the one before.
func TestNamesQueryFloodPrefetchIsBounded(t *testing.T) {
	h, d := newStallHarness(t, map[string][]uint16{"api.test": nil}, "AAAA")
	h.zone.addA("api.test", "203.0.113.10")
	const flood = 300
	for range flood {
		h.query(t, "api.test.", dnsmessage.TypeA)
	}
	time.Sleep(100 * time.Millisecond)
	_, peak, dials := d.counts()
	if peak > 2 {
		t.Fatalf("upstream queries at once: %d (%d dials) for %d queries of one cached name, want at most 2", peak, dials, flood)
	}
	t.Logf("upstream queries at once: %d, dials %d", peak, dials)
}

// TestNamesDNSOverTCPFloodIsBounded: many TCP connections to the stack's
// resolver, each asking for another name under an allowed wildcard whose
// A queries upstream never answer. Each connection was a goroutine of its
// own answering outside the query slots UDP queries take: one query
// upstream each, all at once (seen: 200 for 200 connections), and
// connections without end. Now queries over TCP share those slots, and
// connections beyond names.MaxDNSTCPConns are reset and recorded.
func TestNamesDNSOverTCPFloodIsBounded(t *testing.T) {
	h, d := newStallHarness(t, map[string][]uint16{"*.wild.test": nil}, "A")
	const conns = names.MaxDNSTCPConns + 72
	dst := netip.AddrPortFrom(dns4, 53)
	accepted, refused := 0, 0
	for i := range conns {
		src := netip.AddrPortFrom(jail4, uint16(30000+i))
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
		o := readOut(t, h.ep)
		for o.proto != header.TCPProtocolNumber || o.tcp().DestinationPort() != src.Port() {
			o = readOut(t, h.ep) // another flow's ACK
		}
		if o.tcp().Flags().Contains(header.TCPFlagRst) {
			refused++
			continue
		}
		accepted++
		iss := o.tcp().SequenceNumber()
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: iss + 1}.bytes())
		q := dnsmessage.Message{Header: dnsmessage.Header{ID: uint16(i), RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("x" + itoa(i) + ".wild.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
		b, _ := q.Pack()
		b = append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: b}.bytes())
	}
	time.Sleep(300 * time.Millisecond) // the queries are under way upstream
	_, peak, dials := d.counts()
	t.Logf("connections accepted %d, refused %d; upstream queries at once %d, dials %d", accepted, refused, peak, dials)
	if peak > names.MaxDNSInFlight {
		t.Fatalf("upstream queries at once: %d for %d connections, want at most %d", peak, accepted, names.MaxDNSInFlight)
	}
	if accepted > names.MaxDNSTCPConns || refused != conns-names.MaxDNSTCPConns {
		t.Fatalf("connections accepted %d, refused %d, want %d accepted", accepted, refused, names.MaxDNSTCPConns)
	}
	capped := 0
	for _, b := range h.blocks.list() {
		if b.Rule == "dns over tcp: "+itoa(names.MaxDNSTCPConns)+" connections at once" {
			capped++
		}
	}
	if capped != refused {
		t.Fatalf("%d refused connections recorded, want %d: %+v", capped, refused, h.blocks.list())
	}
}

// wildAnswer answers q as a zone with a wildcard record would: one A
// record, or many (over UDP, a truncated answer without them).
func wildAnswer(q dnsmessage.Message, many int, tcp bool) []byte {
	qq := q.Questions[0]
	rh := dnsmessage.ResourceHeader{Name: qq.Name, Class: dnsmessage.ClassINET, TTL: 60}
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: q.Header.ID, Response: true, RecursionAvailable: true}, Questions: q.Questions}
	switch {
	case qq.Type == dnsmessage.TypeA && many > 0 && !tcp:
		resp.Header.Truncated = true
	case qq.Type == dnsmessage.TypeA && many > 0:
		for i := range many {
			resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: [4]byte{198, 51, byte(i >> 8), byte(i)}}})
		}
	case qq.Type == dnsmessage.TypeA:
		resp.Answers = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.AResource{A: [4]byte{203, 0, 113, 10}}}}
	case qq.Type == dnsmessage.TypeAAAA:
		resp.Answers = []dnsmessage.Resource{{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr("2001:db8::10").As16()}}}
	}
	b, _ := resp.Pack()
	return b
}

// TestNamesSyntheticTableIsBounded: an allowed wildcard whose zone answers
// every name (a wildcard DNS record), and the sandbox asks for name after name.
// Each one took a synthetic address and an entry kept for the stack's
// life, without end: the IPv6 pool never runs out, and once the IPv4 one
// did, each name still left an entry. The table now holds at most
// maxNames names; a new one beyond gets SERVFAIL, recorded, and the names
// already handed out keep their addresses.
func TestNamesSyntheticTableIsBounded(t *testing.T) {
	defer func(old int) { names.MaxNames = old }(names.MaxNames)
	names.MaxNames = 64
	h, d := newStallHarness(t, map[string][]uint16{"*.wild.test": nil})
	d.wild = true
	first := answerAddrs(t, h.query(t, "n0.wild.test.", dnsmessage.TypeAAAA), "n0.wild.test.")
	const asked = 100
	for i := 1; i < asked; i++ {
		typ := dnsmessage.TypeA
		if i%2 == 1 {
			typ = dnsmessage.TypeAAAA
		}
		h.query(t, "n"+itoa(i)+".wild.test.", typ)
	}
	held, addrs := h.st.names.(*names.Names).Held()
	t.Logf("names held %d, addresses %d, after %d names asked", held, addrs, asked)
	if held > names.MaxNames || addrs > 2*names.MaxNames {
		t.Fatalf("%d names, %d synthetic addresses held after %d names asked, want at most %d names", held, addrs, asked, names.MaxNames)
	}
	m := h.query(t, "n"+itoa(asked)+".wild.test.", dnsmessage.TypeA)
	if m.Header.RCode != dnsmessage.RCodeServerFailure || len(m.Answers) != 0 {
		t.Fatalf("a name past the cap: %v %v, want SERVFAIL", m.Header.RCode, m.Answers)
	}
	if again := answerAddrs(t, h.query(t, "n0.wild.test.", dnsmessage.TypeAAAA), "n0.wild.test."); len(again) != 1 || again[0] != first[0] {
		t.Fatalf("a name handed out before the cap: %v, want %v", again, first)
	}
	capped := 0
	for _, b := range h.blocks.list() {
		if strings.HasPrefix(b.Rule, "synthetic names: ") {
			capped++
		}
	}
	if capped == 0 {
		t.Fatalf("names past the cap not recorded: %+v", h.blocks.list())
	}
}

// An allowed wildcard whose upstream answers each name with thousands of
// A records (an answer over TCP holds up to ~4,000): the cache kept all
// of them, for each of its 4,096 entries (about 400 MB at most, ~98 KB an
// entry; seen: 4,000 addresses kept for one name). Only the first
// names.MaxCachedAddrs of an answer are kept.
func TestNamesCacheKeepsFewAddressesPerName(t *testing.T) {
	h, d := newStallHarness(t, map[string][]uint16{"*.wild.test": nil})
	d.wild, d.many = true, 4000
	for i := range 4 {
		name := "m" + itoa(i) + ".wild.test."
		if m := h.query(t, name, dnsmessage.TypeA); m.Header.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 {
			t.Fatalf("%s: %v %v", name, m.Header.RCode, m.Answers)
		}
	}
	most := h.st.names.(*names.Names).MostCached()
	t.Logf("at most %d addresses cached for a name", most)
	if most == 0 || most > names.MaxCachedAddrs {
		t.Fatalf("%d addresses cached for a name, want 1 to %d", most, names.MaxCachedAddrs)
	}
}

// A TLS record that announces a ClientHello of 16 KiB, then its bytes one
// segment each (a real client can: TCP_NODELAY and one-byte writes). Every
// segment re-read everything held so far (a copy of it, and the record
// reassembled again): quadratic, ~260 MB allocated and copied by the
// launcher for 16 KB sent (seen). Until the bytes held could hold the
// message the record announced, nothing is re-read.
func TestNamesPeekOneByteSegmentsIsLinear(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{PeekTimeout: time.Minute})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	send := h.attackFlow(t, netip.AddrPortFrom(jail4, 49900), netip.AddrPortFrom(api, 443))
	const body = 16000
	send([]byte{0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc}) // a record of 16384 bytes: a ClientHello of 16380
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range body {
		send([]byte{0})
		h.ep.Drain() // the relay's ACKs
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d one-byte segments: %d MB allocated", body, alloc>>20)
	if alloc > 64<<20 {
		t.Fatalf("%d one-byte segments of a ClientHello allocated %d MB", body, alloc>>20)
	}
	hostGotNothing(t, h, h.zone.next(t))
}

// inspect.ClientHelloLeast never passes the point where a ClientHello completes,
// however it is cut into records: a look it saves could never have
// decided.
func TestClientHelloLeastIsALowerBound(t *testing.T) {
	hello := clientHello(t, "api.test")
	msg := hello[5:]
	for _, size := range []int{1, 2, 3, 4, 5, 7, 100, 1 << 14} {
		var b []byte
		for m := msg; len(m) > 0; {
			k := min(size, len(m))
			b = append(b, 0x16, 0x03, 0x01, byte(k>>8), byte(k))
			b = append(b, m[:k]...)
			m = m[k:]
		}
		done := -1
		for k := 0; k <= len(b); k++ {
			if _, res := sniff.ClientHello(b[:k]); res == sniff.Found {
				done = k
				break
			} else if res != sniff.NeedMore {
				t.Fatalf("records of %d: %v at %d", size, res, k)
			}
		}
		if done < 0 {
			t.Fatalf("records of %d: never complete", size)
		}
		for j := 0; j < done; j++ {
			if least := inspect.ClientHelloLeast(b[:j]); least > done {
				t.Fatalf("records of %d: at %d bytes, no look before %d; the ClientHello completes at %d", size, j, least, done)
			}
		}
	}
}

// The same in records of one byte each (a record header for every byte
// of the message): the ClientHello's announced length alone would leave
// five sixths of it looked at segment by segment.
func TestNamesPeekOneByteRecordsIsNotQuadratic(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{PeekTimeout: time.Minute})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	send := h.attackFlow(t, netip.AddrPortFrom(jail4, 49901), netip.AddrPortFrom(api, 443))
	const length = 10000 // 6 bytes a record: the whole stream stays under peekMax
	msg := append([]byte{0x01, 0x00, byte(length >> 8), byte(length & 0xff)}, make([]byte, length-100)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, c := range msg {
		for _, x := range []byte{0x16, 0x03, 0x01, 0x00, 0x01, c} {
			send([]byte{x})
		}
		h.ep.Drain()
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d one-byte segments: %d MB allocated", 6*len(msg), alloc>>20)
	if alloc > 128<<20 {
		t.Fatalf("%d one-byte segments of a ClientHello in one-byte records allocated %d MB", 6*len(msg), alloc>>20)
	}
	hostGotNothing(t, h, h.zone.next(t))
}

// The same after the peek timeout (the client said nothing, the flow was
// dialed and is watched, peekwatch.go): each segment was checked with
// all the first bytes before it (seen: 2.9 GB allocated for 59 KB sent).
// The segment that completes a ClientHello is still checked: one for
// another name is still reset before it is relayed.
func TestNamesWatchOneByteSegmentsIsLinear(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "other.test": nil}, NameConfig{PeekTimeout: 20 * time.Millisecond})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	// oneByteRecords sends msg (a handshake message) in records of one
	// byte, a byte a segment, on a watched flow, and returns what the
	// launcher allocated meanwhile.
	port := uint16(49902)
	oneByteRecords := func(msg []byte) uint64 {
		port++
		send := h.attackFlow(t, netip.AddrPortFrom(jail4, port), netip.AddrPortFrom(api, 443))
		d := h.zone.next(t)
		waitLetThrough(t, h, netip.AddrPortFrom(jail4, port)) // let through at the timeout: watched
		go func() { _, _ = io.Copy(io.Discard, d.peer) }()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, c := range msg {
			h.ep.Drain() // the relay's ACKs (not the RST: after the last segment)
			for _, x := range []byte{0x16, 0x03, 0x01, 0x00, 0x01, c} {
				send([]byte{x})
			}
		}
		h.waitRST(t)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	last := func() string {
		bl := h.blocks.list()
		if len(bl) == 0 {
			return ""
		}
		return bl[len(bl)-1].Rule
	}
	hello := clientHello(t, "other.test")
	oneByteRecords(hello[5:])
	if r := last(); r != "sni mismatch: other.test" {
		t.Fatalf("the last block: %q, want sni mismatch: other.test", r)
	}
	// A message announced at 9,904 bytes: 59,424 bytes in all, under
	// peekMax.
	const length = 9900
	msg := append([]byte{0x01, 0x00, byte(length >> 8), byte(length & 0xff)}, make([]byte, length)...)
	alloc := oneByteRecords(msg)
	t.Logf("%d one-byte segments: %d MB allocated", 6*len(msg), alloc>>20)
	if r := last(); r != "malformed TLS first message" {
		t.Fatalf("the last block: %q, want malformed TLS first message", r)
	}
	if alloc > 128<<20 {
		t.Fatalf("%d one-byte segments of a watched ClientHello allocated %d MB", 6*len(msg), alloc>>20)
	}
}

// An HTTP request header sent a byte a segment: each segment looked at
// all the bytes before it again, in a copy of them (seen: 135 MB
// allocated for 16 KB). While they fit one buffer they are looked at in
// place.
func TestNamesPeekHTTPOneByteSegments(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{PeekTimeout: time.Minute})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	send := h.attackFlow(t, netip.AddrPortFrom(jail4, 49910), netip.AddrPortFrom(api, 80))
	req := []byte("GET / HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", 16000))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, c := range req {
		h.ep.Drain()
		send([]byte{c})
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d one-byte segments: %d MB allocated", len(req), alloc>>20)
	if alloc > 48<<20 {
		t.Fatalf("%d one-byte segments of an HTTP request allocated %d MB", len(req), alloc>>20)
	}
	hostGotNothing(t, h, h.zone.next(t))
}

// A query of one datagram carrying ~10,800 questions (each a 2-byte
// pointer to the first name): every question was parsed into a
// dnsmessage.Question of its own (about 260 bytes each, the name's array
// whole) before the count was looked at, ~2.8 MB allocated per 64 KB
// query (seen). The second question now ends the parse: FORMERR, as
// before.
func TestNamesManyQuestionsQuery(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10")
	const n = 10800
	q := []byte{0x12, 0x34, 0x01, 0x00, byte(n >> 8), byte(n & 0xff), 0, 0, 0, 0, 0, 0}
	q = append(q, 3, 'a', 'p', 'i', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1)
	for range n - 1 {
		q = append(q, 0xc0, 12, 0, 1, 0, 1)
	}
	src := netip.AddrPortFrom(jail4, 5353)
	const queries = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range queries {
		h.send(udpBytes(src, netip.AddrPortFrom(dns4, 53), q))
		o := readOut(t, h.ep)
		var m dnsmessage.Message
		if err := m.Unpack(o.udp().Payload()); err != nil || m.Header.RCode != dnsmessage.RCodeFormatError {
			t.Fatalf("answer %v %v, want FORMERR", m.Header.RCode, err)
		}
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d queries of %d questions: %d MB allocated", queries, n, alloc>>20)
	if alloc > 16<<20 {
		t.Fatalf("%d queries of %d questions allocated %d MB", queries, n, alloc>>20)
	}
	h.zone.none(t)
}
