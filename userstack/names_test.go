package userstack

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/names"
)

// The names side the tests give their stacks (package names: the stack
// itself does not import it).
type NameConfig = names.Config

var (
	DefaultPool4 = names.DefaultPool4
	DefaultPool6 = names.DefaultPool6
)

// newNames builds the names side of a test's stack (Config.Names).
func newNames(t testing.TB, nc NameConfig) NameService {
	t.Helper()
	n, err := names.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var _ NameService = (*names.Names)(nil)

// fakeRules allows the names listed (exact), on every port unless ports
// names some; "*.x" entries allow strict subdomains of x.
type fakeRules struct{ allow map[string][]uint16 }

func (r fakeRules) match(name string) ([]uint16, bool) {
	if p, ok := r.allow[name]; ok {
		return p, true
	}
	for k, p := range r.allow {
		if strings.HasPrefix(k, "*.") && strings.HasSuffix(name, k[1:]) {
			return p, true
		}
	}
	return nil, false
}

func (r fakeRules) AllowName(name string) (bool, string) {
	if _, ok := r.match(name); ok {
		return true, "allow-domain " + name
	}
	return false, "domain not allowed"
}

func (r fakeRules) Allow(name string, port uint16) (bool, string) {
	ports, ok := r.match(name)
	if !ok {
		return false, "domain not allowed"
	}
	if len(ports) == 0 {
		return true, "allow-domain " + name
	}
	for _, p := range ports {
		if p == port {
			return true, "allow-domain " + name
		}
	}
	return false, "domain not allowed on this port"
}

// zoneDialer is the host side for the allowlist's tests: the upstream
// resolver (a zone in memory, every query logged) and, for any other
// address, a socket pair whose far end goes to dials.
type zoneDialer struct {
	mu      sync.Mutex
	zone    map[string][]dnsmessage.Resource // by lower-case name and type string
	queries []string                         // "name type", as asked upstream
	dials   chan dial
	// fail: "name type" queries the upstream closes its socket on,
	// without an answer (a failed lookup); ttl: a TTL by name for its
	// answers instead of 60.
	fail map[string]bool
	ttl  map[string]uint32
}

func newZoneDialer() *zoneDialer {
	return &zoneDialer{zone: map[string][]dnsmessage.Resource{}, dials: make(chan dial, 16)}
}

func (z *zoneDialer) addA(name string, addrs ...string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		rh := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name + "."), Class: dnsmessage.ClassINET, TTL: 60}
		if ip.Is4() {
			z.zone[name+" A"] = append(z.zone[name+" A"], dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: ip.As4()}})
		} else {
			z.zone[name+" AAAA"] = append(z.zone[name+" AAAA"], dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: ip.As16()}})
		}
	}
}

func (z *zoneDialer) asked() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([]string(nil), z.queries...)
}

func (z *zoneDialer) answer(q []byte) []byte {
	var m dnsmessage.Message
	if err := m.Unpack(q); err != nil || len(m.Questions) != 1 {
		return nil
	}
	qq := m.Questions[0]
	name := strings.ToLower(strings.TrimSuffix(qq.Name.String(), "."))
	typ := strings.TrimPrefix(qq.Type.String(), "Type")
	z.mu.Lock()
	z.queries = append(z.queries, name+" "+typ)
	if z.fail[name+" "+typ] {
		z.mu.Unlock()
		return nil
	}
	var rrs []dnsmessage.Resource
	// A CNAME, then what it points to.
	if c, ok := z.zone[name+" CNAME"]; ok {
		rrs = append(rrs, c...)
		target := strings.TrimSuffix(c[0].Body.(*dnsmessage.CNAMEResource).CNAME.String(), ".")
		rrs = append(rrs, z.zone[target+" "+typ]...)
	} else {
		// A copy: Pack writes each record's header (its length), and
		// lookups run concurrently.
		rrs = append(rrs, z.zone[name+" "+typ]...)
	}
	if ttl, ok := z.ttl[name]; ok {
		for i := range rrs {
			rrs[i].Header.TTL = ttl // rrs holds copies of the records
		}
	}
	known := false
	for k := range z.zone {
		if strings.HasPrefix(k, name+" ") {
			known = true
		}
	}
	z.mu.Unlock()
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: m.Header.ID, Response: true, RecursionAvailable: true}, Questions: m.Questions, Answers: rrs}
	if !known {
		resp.Header.RCode = dnsmessage.RCodeNameError
	}
	b, _ := resp.Pack()
	return b
}

func (z *zoneDialer) DialContext(_ context.Context, network, address string) (net.Conn, error) {
	if address == upstream.String() {
		typ := unix.SOCK_SEQPACKET
		if network == "tcp" {
			typ = unix.SOCK_STREAM
		}
		a, b, err := socketPair(typ)
		if err != nil {
			return nil, err
		}
		go func() {
			defer b.Close()
			buf := make([]byte, 65535)
			for {
				if network == "tcp" {
					var hdr [2]byte
					if _, err := io.ReadFull(b, hdr[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(hdr[:]))
					if _, err := io.ReadFull(b, q); err != nil {
						return
					}
					r := z.answer(q)
					if r == nil {
						return
					}
					b.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(r))), r...))
					continue
				}
				n, err := b.Read(buf)
				if err != nil {
					return
				}
				r := z.answer(buf[:n])
				if r == nil {
					return // a failed lookup: closed without an answer
				}
				b.Write(r)
			}
		}()
		return a, nil
	}
	typ := unix.SOCK_STREAM
	if network == "udp" {
		typ = unix.SOCK_SEQPACKET
	}
	a, b, err := socketPair(typ)
	if err != nil {
		return nil, err
	}
	z.dials <- dial{network: network, address: address, peer: b}
	return a, nil
}

func (z *zoneDialer) next(t *testing.T) dial {
	t.Helper()
	select {
	case d := <-z.dials:
		return d
	case <-time.After(20 * time.Second): // failsafe, not a timing assertion
		t.Fatal("no dial")
	}
	return dial{}
}

func (z *zoneDialer) none(t *testing.T) {
	t.Helper()
	select {
	case d := <-z.dials:
		t.Fatalf("unexpected dial %s %s", d.network, d.address)
	default:
	}
}

type namesHarness struct {
	*harness
	zone *zoneDialer
}

func newNamesHarness(t *testing.T, rules map[string][]uint16, nc NameConfig) *namesHarness {
	t.Helper()
	return newNamesHarnessAllow(t, rules, nc, netip.MustParsePrefix("192.168.1.50/32"))
}

// newNamesHarnessAllow is newNamesHarness with the policy's allow entries.
func newNamesHarnessAllow(t *testing.T, rules map[string][]uint16, nc NameConfig, allow ...netip.Prefix) *namesHarness {
	t.Helper()
	return newNamesHarnessWith(t, rules, nc, nil, allow...)
}

// newNamesHarnessWith is newNamesHarnessAllow with edit, if set, changing
// the stack's Config before it starts.
func newNamesHarnessWith(t *testing.T, rules map[string][]uint16, nc NameConfig, edit func(*Config), allow ...netip.Prefix) *namesHarness {
	t.Helper()
	h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	z := newZoneDialer()
	nc.Rules = fakeRules{allow: rules}
	cfg := Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{Allow: allow}),
		Dialer:         z,
		Gateways:       []netip.Addr{gateway4},
		VirtualDNS:     []netip.Addr{dns4},
		Upstreams:      []netip.AddrPort{upstream},
		UDPIdleTimeout: time.Minute,
		Now:            h.clock.now,
		Names:          newNames(t, nc),
	}
	if edit != nil {
		edit(&cfg)
	}
	h.start(t, cfg)
	return &namesHarness{harness: h, zone: z}
}

var dnsID uint16 = 100

// query asks the stack's resolver over UDP and returns the answer.
func (h *namesHarness) query(t *testing.T, name string, typ dnsmessage.Type) *dnsmessage.Message {
	t.Helper()
	dnsID++
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: dnsID, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}}}
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	src := netip.AddrPortFrom(jail4, 5353)
	h.send(udpBytes(src, netip.AddrPortFrom(dns4, 53), b))
	o := readOut(t, h.ep)
	if o.proto != header.UDPProtocolNumber || o.src != dns4 || o.udp().SourcePort() != 53 || o.udp().DestinationPort() != 5353 {
		t.Fatalf("answer %v:%d -> %v:%d proto %d", o.src, o.udp().SourcePort(), o.dst, o.udp().DestinationPort(), o.proto)
	}
	var m dnsmessage.Message
	if err := m.Unpack(o.udp().Payload()); err != nil {
		t.Fatal(err)
	}
	if m.Header.ID != dnsID || !m.Header.Response {
		t.Fatalf("answer header %+v", m.Header)
	}
	return &m
}

func answerAddrs(t *testing.T, m *dnsmessage.Message, qname string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, rr := range m.Answers {
		if !strings.EqualFold(rr.Header.Name.String(), qname) {
			t.Fatalf("answer record owned by %s, want only %s: %v", rr.Header.Name, qname, m.Answers)
		}
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA))
		default:
			t.Fatalf("answer record %v", rr)
		}
	}
	return out
}

func TestNamesDNSStub(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "cdn.test": nil, "*.wild.test": nil, "v4only.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10", "203.0.113.11", "2001:db8::10")
	h.zone.addA("v4only.test", "203.0.113.12")
	h.zone.addA("edge.example.net", "203.0.113.20")
	h.zone.mu.Lock()
	h.zone.zone["cdn.test CNAME"] = []dnsmessage.Resource{{
		Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("cdn.test."), Class: dnsmessage.ClassINET, TTL: 60},
		Body:   &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("edge.example.net.")},
	}}
	h.zone.mu.Unlock()

	// An allowed name: one synthetic address, from the pool, stable.
	m := h.query(t, "API.test.", dnsmessage.TypeA)
	got := answerAddrs(t, m, "API.test.")
	if m.Header.RCode != dnsmessage.RCodeSuccess || len(got) != 1 || !DefaultPool4.Contains(got[0]) {
		t.Fatalf("A api.test: %v %v, want one address of %v", m.Header.RCode, got, DefaultPool4)
	}
	again := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")
	if len(again) != 1 || again[0] != got[0] {
		t.Fatalf("second answer %v, want %v (stable per name)", again, got)
	}
	v6 := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeAAAA), "api.test.")
	if len(v6) != 1 || !DefaultPool6.Contains(v6[0]) {
		t.Fatalf("AAAA api.test: %v, want one address of %v", v6, DefaultPool6)
	}
	if name, ok := h.st.NameOf(got[0]); !ok || name != "api.test" {
		t.Fatalf("NameOf(%v) = %q", got[0], name)
	}
	// A CNAME chain: only the synthetic address, under the name asked.
	cdn := answerAddrs(t, h.query(t, "cdn.test.", dnsmessage.TypeA), "cdn.test.")
	if len(cdn) != 1 || cdn[0] == got[0] || !DefaultPool4.Contains(cdn[0]) {
		t.Fatalf("A cdn.test: %v, want one new synthetic address", cdn)
	}
	// No AAAA upstream: an empty answer, not a synthetic address.
	if m := h.query(t, "v4only.test.", dnsmessage.TypeAAAA); m.Header.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
		t.Fatalf("AAAA v4only.test: %v %v, want an empty NOERROR", m.Header.RCode, m.Answers)
	}
	// A wildcard's subdomain that does not exist upstream: NXDOMAIN as
	// upstream said.
	if m := h.query(t, "nope.wild.test.", dnsmessage.TypeA); m.Header.RCode != dnsmessage.RCodeNameError {
		t.Fatalf("A nope.wild.test: %v, want NXDOMAIN", m.Header.RCode)
	}
	// HTTPS and SVCB: empty, never asked upstream.
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeHTTPS, dnsmessage.TypeSVCB} {
		if m := h.query(t, "api.test.", typ); m.Header.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
			t.Fatalf("%v api.test: %v %v, want an empty NOERROR", typ, m.Header.RCode, m.Answers)
		}
	}
	before := len(h.zone.asked())
	// Names not on the list: NXDOMAIN, never upstream, recorded by name.
	for _, name := range []string{"evil.test.", "c2VjcmV0.exfil.example.", "wild.test.", "api.test.evil.example."} {
		for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeTXT} {
			if m := h.query(t, name, typ); m.Header.RCode != dnsmessage.RCodeNameError || len(m.Answers) != 0 {
				t.Fatalf("%v %s: %v %v, want NXDOMAIN", typ, name, m.Header.RCode, m.Answers)
			}
		}
	}
	for _, q := range h.zone.asked()[before:] {
		// Only the background lookups of allowed names (the other
		// address family) may have come since.
		if !strings.HasPrefix(q, "nope.wild.test ") && !strings.HasPrefix(q, "api.test ") && !strings.HasPrefix(q, "cdn.test ") && !strings.HasPrefix(q, "v4only.test ") {
			t.Fatalf("names not on the list reached upstream: %v", q)
		}
	}
	for _, q := range h.zone.asked() {
		if strings.Contains(q, "evil") || strings.Contains(q, "exfil") || strings.HasPrefix(q, "wild.test ") {
			t.Fatalf("upstream was asked %q", q)
		}
	}
	var names []string
	for _, b := range h.blocks.list() {
		if b.Dst != netip.AddrPortFrom(dns4, 53) || b.Proto != netpolicy.ProtoUDP {
			t.Fatalf("block %+v, want udp %v:53", b, dns4)
		}
		names = append(names, b.Name)
	}
	if want := "evil.test evil.test c2vjcmv0.exfil.example c2vjcmv0.exfil.example wild.test wild.test api.test.evil.example api.test.evil.example"; strings.Join(names, " ") != want {
		t.Fatalf("blocked names %q, want %q", names, want)
	}
}

func TestNamesDNSOverTCP(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10")
	src := netip.AddrPortFrom(jail4, 43000)
	dst := netip.AddrPortFrom(dns4, 53)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	synack := readOut(t, h.ep)
	if synack.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck {
		t.Fatalf("got %v, want SYN|ACK", synack.tcp().Flags())
	}
	iss := synack.tcp().SequenceNumber()
	seq := uint32(1001)
	for _, name := range []string{"api.test.", "evil.test."} {
		q := dnsmessage.Message{Header: dnsmessage.Header{ID: 7, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
		b, _ := q.Pack()
		b = append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: seq, ack: iss + 1, payload: b}.bytes())
		seq += uint32(len(b))
		var got []byte
		for len(got) < 2 || len(got) < 2+int(binary.BigEndian.Uint16(got)) {
			o := readOut(t, h.ep)
			got = append(got, o.tcpPayload()...)
		}
		var m dnsmessage.Message
		if err := m.Unpack(got[2:]); err != nil {
			t.Fatal(err)
		}
		switch name {
		case "api.test.":
			if a := answerAddrs(t, &m, name); len(a) != 1 || !DefaultPool4.Contains(a[0]) {
				t.Fatalf("over TCP: %v", a)
			}
		default:
			if m.Header.RCode != dnsmessage.RCodeNameError {
				t.Fatalf("over TCP, %s: %v", name, m.Header.RCode)
			}
		}
	}
	if bl := h.blocks.list(); len(bl) != 1 || bl[0].Name != "evil.test" || bl[0].Proto != netpolicy.ProtoTCP {
		t.Fatalf("blocks %+v", bl)
	}
	for _, q := range h.zone.asked() {
		if strings.Contains(q, "evil") {
			t.Fatalf("upstream was asked %q", q)
		}
	}
	h.zone.none(t)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// handshake opens a TCP flow from src to dst and returns the stack's ISS.
func (h *namesHarness) handshake(t *testing.T, src, dst netip.AddrPort) uint32 {
	t.Helper()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	synack := readOut(t, h.ep)
	for synack.proto != header.TCPProtocolNumber || synack.tcp().DestinationPort() != src.Port() {
		synack = readOut(t, h.ep) // another flow's
	}
	if synack.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck || synack.src != dst.Addr() {
		t.Fatalf("got %v from %v, want SYN|ACK from %v", synack.tcp().Flags(), synack.src, dst.Addr())
	}
	iss := synack.tcp().SequenceNumber()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: iss + 1}.bytes())
	return iss
}

// waitRST reads until a RST comes (failing on data).
func (h *namesHarness) waitRST(t *testing.T) {
	t.Helper()
	for {
		o := readOut(t, h.ep)
		if o.proto == header.TCPProtocolNumber && o.tcp().Flags().Contains(header.TCPFlagRst) {
			return
		}
		if o.proto == header.TCPProtocolNumber && len(o.tcpPayload()) > 0 {
			t.Fatalf("data %q before the RST", o.tcpPayload())
		}
	}
}

func TestNamesTCPRawDeferredDial(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "internal.test": nil, "ssh.test": {22}}, NameConfig{PeekTimeout: 20 * time.Millisecond})
	h.zone.addA("api.test", "203.0.113.10")
	h.zone.addA("internal.test", "10.1.2.3", "127.0.0.1", "169.254.169.254")
	h.zone.addA("ssh.test", "203.0.113.22")
	syn := func(name string) netip.Addr {
		a := answerAddrs(t, h.query(t, name+".", dnsmessage.TypeA), name+".")
		return a[0]
	}
	api, internal, ssh := syn("api.test"), syn("internal.test"), syn("ssh.test")
	src := netip.AddrPortFrom(jail4, 44000)

	// Raw TCP (neither TLS nor HTTP) to an allowed name: the SYN is
	// answered once the name's real address is connected, the first bytes
	// then reach the host.
	dst := netip.AddrPortFrom(api, 7000)
	iss := h.handshake(t, src, dst)
	d := h.zone.next(t)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: []byte("\x00raw hello")}.bytes())
	if d.address != "203.0.113.10:7000" {
		t.Fatalf("dialed %s, want the name's real address 203.0.113.10:7000", d.address)
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(d.peer, buf, 10)
	if err != nil || string(buf[:n]) != "\x00raw hello" {
		t.Fatalf("host read %q %v", buf[:n], err)
	}
	go d.peer.Write([]byte("pong"))
	for {
		o := readOut(t, h.ep)
		if p := o.tcpPayload(); len(p) > 0 {
			if string(p) != "pong" || o.src != api {
				t.Fatalf("sandbox got %q from %v", p, o.src)
			}
			break
		}
	}
	d.peer.Close()

	// A server that speaks first: no bytes from the sandbox; its banner
	// reaches the sandbox.
	src2 := netip.AddrPortFrom(jail4, 44001)
	dst2 := netip.AddrPortFrom(ssh, 22)
	h.handshake(t, src2, dst2)
	d = h.zone.next(t)
	if d.address != "203.0.113.22:22" {
		t.Fatalf("dialed %s", d.address)
	}
	go d.peer.Write([]byte("SSH-2.0-test\r\n"))
	for {
		o := readOut(t, h.ep)
		if p := o.tcpPayload(); len(p) > 0 {
			if string(p) != "SSH-2.0-test\r\n" {
				t.Fatalf("banner %q", p)
			}
			break
		}
	}
	d.peer.Close()

	// A port the rule does not allow: refused at the SYN.
	src3 := netip.AddrPortFrom(jail4, 44002)
	h.send(tcpSeg{src: src3, dst: netip.AddrPortFrom(ssh, 443), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	h.waitRST(t)

	// An allowed name that resolves only into blocked ranges: refused at
	// the SYN, recorded, never dialed (no DNS rebinding into the host's
	// network).
	src4 := netip.AddrPortFrom(jail4, 44003)
	dst4 := netip.AddrPortFrom(internal, 80)
	h.send(tcpSeg{src: src4, dst: dst4, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	h.waitRST(t)
	h.zone.none(t)

	// The IP literal of an allowed name: default-deny.
	src5 := netip.AddrPortFrom(jail4, 44004)
	h.send(tcpSeg{src: src5, dst: netip.MustParseAddrPort("203.0.113.10:443"), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	h.waitRST(t)
	// A synthetic address never handed out.
	h.send(tcpSeg{src: src5, dst: netip.MustParseAddrPort("198.19.200.1:443"), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	h.waitRST(t)
	// An allow-ip entry still works.
	h.send(tcpSeg{src: src5, dst: netip.MustParseAddrPort("192.168.1.50:80"), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	if d := h.zone.next(t); d.address != "192.168.1.50:80" {
		t.Fatalf("allow-ip dialed %s", d.address)
	} else {
		d.peer.Close()
	}
	h.zone.none(t)

	var got []string
	for _, b := range h.blocks.list() {
		got = append(got, b.Name+"|"+b.Dst.String()+"|"+b.Rule)
	}
	want := []string{
		"ssh.test|" + netip.AddrPortFrom(ssh, 443).String() + "|domain not allowed on this port",
		"internal.test|" + dst4.String() + "|resolves only to blocked addresses: 10.1.2.3 (private range 10.0.0.0/8), 127.0.0.1 (loopback 127.0.0.0/8), 169.254.169.254 (link-local/metadata 169.254.0.0/16)",
		"|203.0.113.10:443|not on the domain allowlist (an address, not a name: allow it with --allow-ip)",
		"|198.19.200.1:443|synthetic address never handed out by the sandbox's resolver",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNamesUDP(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	src := netip.AddrPortFrom(jail4, 45000)
	// QUIC: ICMP port unreachable, recorded by name.
	h.send(udpBytes(src, netip.AddrPortFrom(api, 443), []byte("quic")))
	o := readOut(t, h.ep)
	if o.proto != header.ICMPv4ProtocolNumber || header.ICMPv4(o.transport).Type() != header.ICMPv4DstUnreachable {
		t.Fatalf("udp 443: got proto %d, want ICMP unreachable", o.proto)
	}
	// Other UDP to the name: relayed to its real address, the reply from
	// the synthetic one.
	dst := netip.AddrPortFrom(api, 9000)
	d := sendUntilDial(t, h, src, dst, []byte("ping"))
	if d.network != "udp" || d.address != "203.0.113.10:9000" {
		t.Fatalf("dialed %s %s", d.network, d.address)
	}
	buf := make([]byte, 64)
	if n, err := d.peer.Read(buf); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("host read %q %v", buf[:n], err)
	}
	d.peer.Write([]byte("pong"))
	for {
		o := readOut(t, h.ep)
		if o.proto == header.UDPProtocolNumber {
			if o.src != api || o.udp().SourcePort() != 9000 || string(o.udp().Payload()) != "pong" {
				t.Fatalf("reply %q from %v:%d", o.udp().Payload(), o.src, o.udp().SourcePort())
			}
			break
		}
	}
	// UDP to the real address: refused.
	h.send(udpBytes(src, netip.MustParseAddrPort("203.0.113.10:9000"), []byte("x")))
	for {
		o := readOut(t, h.ep)
		if o.proto == header.ICMPv4ProtocolNumber {
			break
		}
	}
	bl := h.blocks.list()
	if len(bl) != 2 || bl[0].Name != "api.test" || bl[0].Rule != "udp 443 (QUIC) to a name: use TCP" || bl[1].Name != "" {
		t.Fatalf("blocks %+v", bl)
	}
	d.peer.Close()
}

// clientHello returns the first flight of a Go TLS client naming sni (no
// SNI when sni is ""), as the sandbox would send it.
func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: sni == "", MinVersion: tls.VersionTLS12})
		c.Handshake() //nolint:errcheck // the peer never answers
		a.Close()
	}()
	buf := make([]byte, 1<<16)
	var out []byte
	// The ClientHello is one record: its length is in its header.
	for len(out) < 5 || len(out) < 5+int(binary.BigEndian.Uint16(out[3:5])) {
		n, err := b.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:n]...)
	}
	return out
}

func TestNamesTLSAndHTTPCrossCheck(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil, "other.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10")
	h.zone.addA("other.test", "203.0.113.10") // a shared front
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	port := uint16(46000)
	// open sends payload (in segments of at most seg bytes) on a new flow
	// to api:443.
	open := func(payload []byte, seg int) netip.AddrPort {
		port++
		src := netip.AddrPortFrom(jail4, port)
		dst := netip.AddrPortFrom(api, 443)
		iss := h.handshake(t, src, dst)
		for off := 0; off < len(payload); off += seg {
			end := min(off+seg, len(payload))
			h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001 + uint32(off), ack: iss + 1, payload: payload[off:end]}.bytes())
		}
		return src
	}
	expectRelayed := func(payload []byte) {
		t.Helper()
		d := h.zone.next(t)
		if d.address != "203.0.113.10:443" {
			t.Fatalf("dialed %s", d.address)
		}
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(d.peer, got); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("host got %d bytes (%v), want the %d the sandbox sent", len(got), err, len(payload))
		}
		d.peer.Close()
	}

	good := clientHello(t, "API.test")
	open(good, 1000)
	expectRelayed(good)
	// Split in small segments, still the same.
	open(good, 100)
	expectRelayed(good)
	req := []byte("GET / HTTP/1.1\r\nHost: api.test:443\r\nUser-Agent: t\r\n\r\n")
	open(req, 1000)
	expectRelayed(req)

	refused := []struct {
		payload []byte
		rule    string
	}{
		{clientHello(t, "other.test"), "sni mismatch: other.test"},
		{clientHello(t, "evil.example"), "sni mismatch: evil.example"},
		{clientHello(t, ""), "no sni"},
		{[]byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"), "http host mismatch: other.test"},
		{append([]byte{0x16, 0x03, 0x01, 0x00, 0x05}, 0x01, 0xff, 0xff, 0xff, 0x00), "malformed TLS first message"},
	}
	for _, r := range refused {
		before := len(h.blocks.list())
		open(r.payload, 1000)
		h.waitRST(t)
		hostGets(t, h.zone.next(t), nil) // connected at the SYN, written nothing
		bl := h.blocks.list()
		if len(bl) != before+1 || bl[before].Name != "api.test" || bl[before].Rule != r.rule || bl[before].Proto != netpolicy.ProtoTCP {
			t.Fatalf("blocks %+v, want tcp api.test (%s)", bl[before:], r.rule)
		}
	}
	h.zone.none(t)
}

// The pool's NAT64 forms (which the jail's allow-cidr punch for the pool
// also opens) lead nowhere.
func TestNamesPoolNAT64FormRefused(t *testing.T) {
	h := &harness{blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	z := newZoneDialer()
	h.start(t, Config{
		Policy:     netpolicy.MustNew(netpolicy.Config{Allow: []netip.Prefix{DefaultPool4, DefaultPool6}}),
		Dialer:     z,
		VirtualDNS: []netip.Addr{dns4},
		Upstreams:  []netip.AddrPort{upstream},
		Now:        h.clock.now,
		Names:      newNames(t, NameConfig{Rules: fakeRules{allow: map[string][]uint16{"api.test": nil}}}),
	})
	src := netip.AddrPortFrom(jail6, 47000)
	dst := netip.MustParseAddrPort("[64:ff9b::198.18.0.1]:443")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	if o := readOut(t, h.ep); !o.tcp().Flags().Contains(header.TCPFlagRst) {
		t.Fatalf("got %v, want RST", o.tcp().Flags())
	}
	z.none(t)
	if bl := h.blocks.list(); len(bl) != 1 || !strings.Contains(bl[0].Rule, "NAT64") {
		t.Fatalf("blocks %+v", bl)
	}
}

// A short message that might begin an HTTP request line, then silence (a
// client waiting for its answer): relayed after the peek timeout. The
// start of a ClientHello, then silence: refused.
func TestNamesPeekTimeoutPartial(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{PeekTimeout: 20 * time.Millisecond})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	src := netip.AddrPortFrom(jail4, 48000)
	dst := netip.AddrPortFrom(api, 6379)
	iss := h.handshake(t, src, dst)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: []byte("x")}.bytes())
	d := h.zone.next(t)
	buf := make([]byte, 8)
	if n, err := d.peer.Read(buf); err != nil || string(buf[:n]) != "x" {
		t.Fatalf("host read %q %v", buf[:n], err)
	}
	d.peer.Close()
	if bl := h.blocks.list(); len(bl) != 0 {
		t.Fatalf("blocks %+v", bl)
	}

	old := peekWaitMax
	peekWaitMax = 50 * time.Millisecond
	defer func() { peekWaitMax = old }()
	src2 := netip.AddrPortFrom(jail4, 48001)
	dst2 := netip.AddrPortFrom(api, 443)
	iss = h.handshake(t, src2, dst2)
	hello := clientHello(t, "other.test")
	h.send(tcpSeg{src: src2, dst: dst2, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: hello[:20]}.bytes())
	h.waitRST(t)
	hostGets(t, h.zone.next(t), nil)
	if bl := h.blocks.list(); len(bl) != 1 || bl[0].Rule != "incomplete TLS ClientHello" {
		t.Fatalf("blocks %+v", bl)
	}
}

// A name's UDP destination, once admitted, is cached for new mappings (at
// least 30 s); a live policy update that blocks its real address (the
// host moved onto a network routing it: a connected subnet now) reaches
// a new mapping at once, not when the cache entry expires.
func TestNamesUDPCachedTargetRechecked(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	dst := netip.AddrPortFrom(api, 9000)
	src := netip.AddrPortFrom(jail4, 45100)
	d := sendUntilDial(t, h, src, dst, []byte("ping"))
	defer d.peer.Close()
	// The A answer sufficed for that dial; the refusal below also needs
	// the AAAA one (the other family is tried when the first has nothing
	// allowed), which the prefetch may still be asking for: a datagram
	// meanwhile is dropped, not refused. This query waits for it.
	h.query(t, "api.test.", dnsmessage.TypeAAAA)
	h.st.SetPolicy(netpolicy.MustNew(netpolicy.Config{
		Allow:            []netip.Prefix{netip.MustParsePrefix("192.168.1.50/32")},
		ConnectedSubnets: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
	}))
	// Another socket of the sandbox, the same name and port.
	h.send(udpBytes(netip.AddrPortFrom(jail4, 45101), dst, []byte("again")))
	deadline := time.After(5 * time.Second)
	for refused := false; !refused; {
		select {
		case d2 := <-h.zone.dials:
			d2.peer.Close()
			t.Fatalf("dialed %s %s after the policy blocked it", d2.network, d2.address)
		case <-deadline:
			t.Fatal("no answer to the datagram")
		default:
		}
		o := readOut(t, h.ep)
		refused = o.proto == header.ICMPv4ProtocolNumber && header.ICMPv4(o.transport).Type() == header.ICMPv4DstUnreachable
	}
	var rules []string
	for _, b := range h.blocks.list() {
		rules = append(rules, b.Name+"|"+b.Rule)
	}
	if len(rules) == 0 || !strings.HasPrefix(rules[len(rules)-1], "api.test|") {
		t.Fatalf("blocks %q: want the refusal recorded by name", rules)
	}
}

// sendUntilDial sends payload from src to dst until the zone's dialer
// sees a dial, which it returns: the first datagrams to a name may be
// dropped while the name resolves.
func sendUntilDial(t *testing.T, h *namesHarness, src, dst netip.AddrPort, payload []byte) dial {
	t.Helper()
	for i := 0; ; i++ {
		h.send(udpBytes(src, dst, payload))
		select {
		case d := <-h.zone.dials:
			return d
		case <-time.After(50 * time.Millisecond):
			if i >= 200 {
				t.Fatal("no udp dial")
			}
		}
	}
}
