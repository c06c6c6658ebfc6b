package userstack

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/inspect"
)

// Attacks on the deferred dial's check of the first bytes (peek.go,
// peekwatch.go): each one names another host than the flow's (or none) in
// a way that once slipped past the check, or might.

// attackFlow opens a flow from the sandbox to dst and returns a sender of
// its data, in order.
func (h *namesHarness) attackFlow(t *testing.T, src, dst netip.AddrPort) func(b []byte) {
	t.Helper()
	iss := h.handshake(t, src, dst)
	seq := uint32(1001)
	return func(b []byte) {
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: seq, ack: iss + 1, payload: b}.bytes())
		seq += uint32(len(b))
	}
}

// hostGets reads from the dialed host until it closes, and fails unless
// it got exactly want.
func hostGets(t *testing.T, d dial, want []byte) {
	t.Helper()
	_ = d.peer.SetReadDeadline(time.Now().Add(time.Minute))
	got, _ := io.ReadAll(d.peer)
	if !bytes.Equal(got, want) {
		t.Fatalf("the host got %q, want %q", got, want)
	}
}

// hostGetsAtMost checks that what the dialed host received is a prefix of
// limit: segments the watch has not decided yet may be relayed, or held
// while the flow is still being dialed (which of the two depends on when
// the dial completes), but never the one that completes the message.
func hostGetsAtMost(t *testing.T, d dial, limit []byte) {
	t.Helper()
	_ = d.peer.SetReadDeadline(time.Now().Add(time.Minute))
	got, _ := io.ReadAll(d.peer)
	if !bytes.HasPrefix(limit, got) {
		t.Fatalf("the host got %q, want at most %q", got, limit)
	}
}

// hostGotNothing checks that a flow's host socket, connected at the SYN,
// was written nothing: the stack is closed (every host socket with it),
// and the host reads to its end.
func hostGotNothing(t *testing.T, h *namesHarness, d dial) {
	t.Helper()
	h.st.Close()
	hostGets(t, d, nil)
}

// waitLetThrough waits until the flow from src is let through by the
// peek timeout (or decided otherwise): from then on it is watched
// (peekwatch.go), not peeked.
func waitLetThrough(t *testing.T, h *namesHarness, src netip.AddrPort) {
	t.Helper()
	waitUntil(t, "the peek timeout", func() bool {
		h.st.mu.Lock()
		var f *tcpFlow
		for k, x := range h.st.tcp {
			if k.src == src {
				f = x
			}
		}
		h.st.mu.Unlock()
		if f == nil {
			return true
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.peek == nil
	})
}

// hostReads reads n bytes from the dialed host.
func hostReads(t *testing.T, d dial, n int) []byte {
	t.Helper()
	_ = d.peer.SetReadDeadline(time.Now().Add(time.Minute))
	b := make([]byte, n)
	if _, err := io.ReadFull(d.peer, b); err != nil {
		t.Fatalf("the host read %q: %v", b, err)
	}
	return b
}

// A client that outwaits the peek timeout (as a server-first protocol
// does, or sending the start of a request line and pausing) and then
// names another host: reset at the segment that names it, which never
// reaches the host. Before peekwatch.go it was relayed unchecked.
func TestNamesPeekTimeoutThenOtherName(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "other.test": nil}, NameConfig{PeekTimeout: 20 * time.Millisecond})
	h.zone.addA("api.test", "203.0.113.10")
	h.zone.addA("other.test", "203.0.113.10") // a shared front
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	port := uint16(49000)
	next := func(dport uint16) (func([]byte), netip.AddrPort) {
		port++
		dst := netip.AddrPortFrom(api, dport)
		return h.attackFlow(t, netip.AddrPortFrom(jail4, port), dst), dst
	}
	// afterTimeout takes the flow's dial (made at its SYN) once the peek
	// timeout let the silent flow through.
	afterTimeout := func() dial {
		t.Helper()
		d := h.zone.next(t)
		waitLetThrough(t, h, netip.AddrPortFrom(jail4, port))
		return d
	}
	refused := func(d dial, hostGot []byte, rule string) {
		t.Helper()
		h.waitRST(t)
		hostGetsAtMost(t, d, hostGot)
		bl := h.blocks.list()
		if len(bl) == 0 || bl[len(bl)-1].Name != "api.test" || bl[len(bl)-1].Rule != rule {
			t.Fatalf("blocks %+v, want the last api.test (%s)", bl, rule)
		}
	}
	other := clientHello(t, "other.test")
	req := []byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")

	// Silence until the dial, then a ClientHello for another name.
	send, _ := next(443)
	d := afterTimeout() // let through at the timeout, nothing sent yet
	send(other)
	refused(d, nil, "sni mismatch: other.test")

	// The same in small segments (as few as the harness's queue of
	// packets holds the answers to): the last one is never relayed.
	send, _ = next(443)
	d = afterTimeout()
	last := 0
	for i := 0; i < len(other); i += 32 {
		last = i
		send(other[i:min(i+32, len(other))])
	}
	refused(d, other[:last], "sni mismatch: other.test")

	// Silence, then no SNI.
	send, _ = next(443)
	d = afterTimeout()
	send(clientHello(t, ""))
	refused(d, nil, "no sni")

	// Silence, then an HTTP request for another host.
	send, _ = next(80)
	d = afterTimeout()
	send(req)
	refused(d, nil, "http host mismatch: other.test")

	// A pause in the request line: "G" is relayed after the timeout, the
	// rest is checked with it.
	send, _ = next(80)
	send(req[:1])
	d = h.zone.next(t)
	if got := hostReads(t, d, 1); string(got) != "G" {
		t.Fatalf("host read %q", got)
	}
	send(req[1:])
	refused(d, nil, "http host mismatch: other.test")

	// A few bytes at a time, slower than the timeout: the same.
	send, _ = next(80)
	send(req[:2])
	d = h.zone.next(t)
	hostReads(t, d, 2)
	last = 0
	for i := 2; i < len(req); i += 4 {
		last = i
		send(req[i:min(i+4, len(req))])
	}
	refused(d, req[2:last], "http host mismatch: other.test")

	// Cleartext HTTP/2 with prior knowledge after a pause.
	send, _ = next(80)
	send([]byte("PRI"))
	d = h.zone.next(t)
	hostReads(t, d, 3)
	send([]byte(inspect.H2Preface[3:]))
	refused(d, nil, "cleartext HTTP/2 (its :authority is not checked: use TLS, or --allow-ip for the address)")

	// Controls: the right name after the timeout is relayed, and so is a
	// server-first protocol's answer.
	good := clientHello(t, "api.test")
	send, _ = next(443)
	d = afterTimeout()
	send(good)
	if got := hostReads(t, d, len(good)); !bytes.Equal(got, good) {
		t.Fatal("the ClientHello for api.test was not relayed whole")
	}
	send([]byte("\x17\x03\x03\x00\x01x")) // application data, after the check
	hostReads(t, d, 6)
	d.peer.Close()

	send, _ = next(22)
	d = afterTimeout()
	send([]byte("SSH-2.0-client\r\n"))
	send([]byte("\x00\x00\x01\x0c\x0a\x14 binary"))
	if got := hostReads(t, d, 29); !strings.HasPrefix(string(got), "SSH-2.0-client\r\n") {
		t.Fatalf("host read %q", got)
	}
	d.peer.Close()
	for _, b := range h.blocks.list() {
		if strings.Contains(b.Dst.String(), ":22") || b.Rule == "" {
			t.Fatalf("a control was blocked: %+v", b)
		}
	}
}

// Other ways of naming another host in the first message: each refused
// before any byte reaches the host.
func TestNamesFirstMessageEvasions(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "other.test": nil, "kit.test": nil}, NameConfig{PeekTimeout: time.Minute})
	h.zone.addA("api.test", "203.0.113.10")
	h.zone.addA("kit.test", "203.0.113.11")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	kit := answerAddrs(t, h.query(t, "kit.test.", dnsmessage.TypeA), "kit.test.")[0]
	// fragmented re-frames a ClientHello's handshake message in records of
	// n bytes each.
	fragmented := func(hello []byte, n int) []byte {
		msg := hello[5:]
		var out []byte
		for len(msg) > 0 {
			k := min(n, len(msg))
			out = append(out, 0x16, 0x03, 0x01, 0, byte(k))
			out = append(out, msg[:k]...)
			msg = msg[k:]
		}
		return out
	}
	port := uint16(49500)
	for _, tt := range []struct {
		name    string
		payload []byte
		rule    string
		to      netip.Addr // api when not set
	}{
		{"leading crlf before the request line", []byte("\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n"), "http host mismatch: other.test", netip.Addr{}},
		{"absolute-form target", []byte("GET http://other.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n"), "malformed HTTP first message", netip.Addr{}},
		{"two Host headers", []byte("GET / HTTP/1.1\r\nHost: api.test\r\nHost: other.test\r\n\r\n"), "malformed HTTP first message", netip.Addr{}},
		{"sni with a suffix", clientHello(t, "api.test.other.test"), "sni mismatch: api.test.other.test", netip.Addr{}},
		{"idn sni", clientHello(t, "xn--pi-ila.test"), "sni mismatch: xn--pi-ila.test", netip.Addr{}},
		{"one-byte TLS records", fragmented(clientHello(t, "other.test"), 1), "sni mismatch: other.test", netip.Addr{}},
		{"sni folding to the name only in unicode", clientHello(t, "\u212Ait.test"), `sni mismatch: "\u212ait.test"`, kit},
		{"h2 prior knowledge", []byte(inspect.H2Preface), "cleartext HTTP/2 (its :authority is not checked: use TLS, or --allow-ip for the address)", netip.Addr{}},
	} {
		port++
		to := api
		if tt.to.IsValid() {
			to = tt.to
		}
		send := h.attackFlow(t, netip.AddrPortFrom(jail4, port), netip.AddrPortFrom(to, 443))
		d := h.zone.next(t) // connected at the SYN
		send(tt.payload)
		h.waitRST(t)
		hostGets(t, d, nil)
		bl := h.blocks.list()
		if len(bl) == 0 || bl[len(bl)-1].Rule != tt.rule {
			t.Fatalf("%s: blocks %+v, want the last %q", tt.name, bl, tt.rule)
		}
	}
	// Controls: the allowed name in one-byte records, with an upper-case
	// SNI and with leading empty lines, is relayed whole.
	for _, payload := range [][]byte{
		fragmented(clientHello(t, "API.Test"), 1),
		[]byte("\r\nGET / HTTP/1.1\r\nHost: api.test\r\n\r\n"),
	} {
		port++
		send := h.attackFlow(t, netip.AddrPortFrom(jail4, port), netip.AddrPortFrom(api, 443))
		send(payload)
		d := h.zone.next(t)
		if got := hostReads(t, d, len(payload)); !bytes.Equal(got, payload) {
			t.Fatalf("host got %q", got)
		}
		d.peer.Close()
	}
}

// Addresses in other forms, after a live policy update (the jail replaces
// the address policy when the host's network changes, here with a
// network-specific NAT64 prefix): the IPv4-mapped and NAT64 forms of a
// synthetic address and of the real address behind a name lead nowhere,
// and the name itself still works with its check.
func TestNamesAddressFormsAfterLiveUpdate(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "other.test": nil}, NameConfig{PeekTimeout: time.Minute})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	h.st.SetPolicy(netpolicy.MustNew(netpolicy.Config{
		Allow: []netip.Prefix{netip.MustParsePrefix("192.168.1.50/32"), DefaultPool4, DefaultPool6},
		NAT64: []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96")},
	}))
	a4 := api.As4()
	port := uint16(49800)
	for _, dst := range []string{
		"[::ffff:" + api.String() + "]:443",
		"[2001:db8:64::" + netip.AddrFrom4(a4).String() + "]:443",
		"[64:ff9b::" + api.String() + "]:443",
		"[::ffff:203.0.113.10]:443",
		"[2001:db8:64::203.0.113.10]:443",
		"[64:ff9b::203.0.113.10]:443",
		"203.0.113.10:443",
		"198.18.255.255:443",
		"198.19.255.255:443",
	} {
		port++
		src := netip.AddrPortFrom(jail4, port)
		d := netip.MustParseAddrPort(dst)
		if d.Addr().Is6() {
			src = netip.AddrPortFrom(jail6, port)
		}
		h.send(tcpSeg{src: src, dst: d, flags: header.TCPFlagSyn, seq: 1000}.bytes())
		// A marker refused for sure: everything the stack answers to the
		// SYN above comes before its RST (an IPv4-mapped destination
		// gets no answer at all: gVisor drops it).
		marker := netip.AddrPortFrom(jail4, 40999)
		h.send(tcpSeg{src: marker, dst: netip.MustParseAddrPort("203.0.113.99:9"), flags: header.TCPFlagSyn, seq: 1000}.bytes())
		for {
			o := readOut(t, h.ep)
			if o.proto != header.TCPProtocolNumber {
				continue
			}
			if o.tcp().DestinationPort() == src.Port() && !o.tcp().Flags().Contains(header.TCPFlagRst) {
				t.Fatalf("%s: got %v, want RST or nothing", dst, o.tcp().Flags())
			}
			if o.tcp().DestinationPort() == marker.Port() {
				break
			}
		}
		h.zone.none(t)
	}
	// The name, after the update: the check still runs.
	port++
	send := h.attackFlow(t, netip.AddrPortFrom(jail4, port), netip.AddrPortFrom(api, 443))
	d := h.zone.next(t)
	send(clientHello(t, "other.test"))
	h.waitRST(t)
	hostGets(t, d, nil)
	port++
	send = h.attackFlow(t, netip.AddrPortFrom(jail4, port), netip.AddrPortFrom(api, 443))
	good := clientHello(t, "api.test")
	send(good)
	d = h.zone.next(t)
	hostReads(t, d, len(good))
	d.peer.Close()
}

// The IPv6 pool gets the same check: a synthetic AAAA address used with
// another name, at once or after the peek timeout, is refused; with its
// own name it reaches the name's real IPv6 address.
func TestNamesPool6SNICheck(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "other.test": nil}, NameConfig{PeekTimeout: 20 * time.Millisecond})
	h.zone.addA("api.test", "2001:db8::10")
	api6 := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeAAAA), "api.test.")[0]
	if !DefaultPool6.Contains(api6) {
		t.Fatalf("AAAA %v outside %v", api6, DefaultPool6)
	}
	dst := netip.AddrPortFrom(api6, 443)
	send := h.attackFlow(t, netip.AddrPortFrom(jail6, 49900), dst)
	d := h.zone.next(t)
	send(clientHello(t, "other.test"))
	h.waitRST(t)
	hostGets(t, d, nil)

	send = h.attackFlow(t, netip.AddrPortFrom(jail6, 49901), dst)
	d = h.zone.next(t)
	waitLetThrough(t, h, netip.AddrPortFrom(jail6, 49901))
	send(clientHello(t, "other.test"))
	h.waitRST(t)
	hostGets(t, d, nil)

	good := clientHello(t, "api.test")
	send = h.attackFlow(t, netip.AddrPortFrom(jail6, 49902), dst)
	send(good)
	d = h.zone.next(t)
	if d.address != "[2001:db8::10]:443" {
		t.Fatalf("dialed %s", d.address)
	}
	hostReads(t, d, len(good))
	d.peer.Close()
}

// smallBufDialer is the zone's dialer with a host socket that takes little
// at once (the relay's pend then needs its memory budget).
type smallBufDialer struct{ *zoneDialer }

func (s smallBufDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := s.zoneDialer.DialContext(ctx, network, address)
	if err == nil && network == "tcp" && address != upstream.String() {
		rc, rerr := c.(syscall.Conn).SyscallConn()
		if rerr == nil {
			_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 1) })
		}
	}
	return c, err
}

// A watched flow whose segment the relay takes only in part (its memory
// budget spent): the sandbox sends the rest again, different. The check
// must see the stream the host gets, not the first version of the
// segment: here that version ends in a Host for the flow's name, while
// the stream the host would get names another host.
func TestNamesWatchPartialTake(t *testing.T) {
	const budget = 10 << 10
	h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	z := newZoneDialer()
	h.start(t, Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{}),
		Dialer:         smallBufDialer{z},
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
		MaxRelayMemory: budget,
		Names:          newNames(t, NameConfig{Rules: fakeRules{allow: map[string][]uint16{"api.test": nil, "other.test": nil}}, PeekTimeout: 20 * time.Millisecond}),
	})
	nh := &namesHarness{harness: h, zone: z}
	z.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, nh.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	src := netip.AddrPortFrom(jail4, 49950)
	dst := netip.AddrPortFrom(api, 80)
	iss := nh.handshake(t, src, dst)
	d := z.next(t)
	waitLetThrough(t, nh, src) // silence: let through at the timeout, watched
	s1 := []byte("GET / HTTP/1.1\r\nX: " + strings.Repeat("a", budget-1500) + "\r\nHost: api.test\r\n")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: s1}.bytes())
	var took uint32
	for took == 0 {
		o := readOut(t, h.ep)
		if o.proto == header.TCPProtocolNumber && o.tcp().DestinationPort() == src.Port() {
			if o.tcp().Flags().Contains(header.TCPFlagRst) {
				t.Fatal("reset on the first segment")
			}
			took = o.tcp().AckNumber() - 1001
		}
	}
	if int(took) >= len(s1)-len("\r\nHost: api.test\r\n") {
		t.Fatalf("the relay took %d of %d bytes: the test needs it to take less (budget %d)", took, len(s1), budget)
	}
	// The rest, different: after "X: aaa" the host would read a Host for
	// other.test; after all of s1 the first version read api.test.
	s2 := []byte("\r\nHost: other.test\r\n\r\n")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001 + took, ack: iss + 1, payload: s2}.bytes())
	nh.waitRST(t)
	got, _ := io.ReadAll(d.peer)
	if bytes.Contains(got, []byte("other.test")) {
		t.Fatalf("the host got %q", got)
	}
	if bl := h.blocks.list(); len(bl) == 0 || bl[len(bl)-1].Rule != "http host mismatch: other.test" {
		t.Fatalf("blocks %+v", bl)
	}
}

// An allowed name that resolves to the host's loopback or to an
// unspecified address (a host-side connect to 0.0.0.0 or :: reaches the
// host's loopback), or to either in its NAT64 form (64:ff9b::/96, which a
// translator on the host's path takes to its own loopback), is never
// dialed, even under a policy built in code
// that allows those addresses (netpolicy.New refuses no entry; the
// command line does refuse loopback). The host's loopback is reached
// only at a gateway's allowed host port.
func TestNamesHostLoopbackNeverDialed(t *testing.T) {
	h := newNamesHarnessAllow(t, map[string][]uint16{"lo.test": nil}, NameConfig{PeekTimeout: 20 * time.Millisecond},
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("::/128"),
		netip.MustParsePrefix("64:ff9b::7f00:1/128"), netip.MustParsePrefix("64:ff9b::/128"))
	h.zone.addA("lo.test", "127.0.0.1", "0.0.0.0", "::1", "::", "64:ff9b::7f00:1", "64:ff9b::")
	syn := answerAddrs(t, h.query(t, "lo.test.", dnsmessage.TypeA), "lo.test.")[0]
	src := netip.AddrPortFrom(jail4, 44100)
	dst := netip.AddrPortFrom(syn, 8081)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	h.waitRST(t) // at the SYN: connection refused
	h.zone.none(t)
	const rule = "host loopback: only --allow-host-port ports at the gateway address reach it"
	var got []string
	for _, b := range h.blocks.list() {
		got = append(got, b.Name+"|"+b.Dst.String()+"|"+b.Rule)
	}
	want := []string{
		"lo.test|" + dst.String() + "|resolves only to blocked addresses: 127.0.0.1 (" + rule + "), 0.0.0.0 (" + rule + "), ::1 (" + rule + "), :: (" + rule + "), 64:ff9b::7f00:1 (" + rule + "), 64:ff9b:: (" + rule + ")",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Without names, by address: a TCP SYN and a UDP datagram from inside to
// the host's loopback or the unspecified address in its well-known NAT64
// form are never dialed, even under a policy built in code that allows
// them (netpolicy.New adds every IPv4 entry's NAT64 form), and are
// recorded under the host loopback rule (admission's hostCheck).
func TestHostLoopbackNAT64ByAddressNeverDialed(t *testing.T) {
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{
		Policy: netpolicy.MustNew(netpolicy.Config{Allow: []netip.Prefix{
			netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("0.0.0.0/32")}}),
		Dialer:         h.dialer,
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
	})
	const rule = "host loopback: only --allow-host-port ports at the gateway address reach it"
	src := netip.AddrPortFrom(jail6, 41000)
	var want []string
	for _, s := range []string{"[64:ff9b::7f00:1]:8080", "[64:ff9b::7f01:203]:22", "[64:ff9b::]:8080"} {
		dst := netip.MustParseAddrPort(s)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1}.bytes())
		h.send(udpBytes(src, dst, []byte("x")))
		want = append(want, "tcp|"+s+"|"+rule, "udp|"+s+"|"+rule)
	}
	h.dialer.none(t)
	var got []string
	for _, b := range h.blocks.list() {
		got = append(got, b.Proto.String()+"|"+b.Dst.String()+"|"+b.Rule)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
