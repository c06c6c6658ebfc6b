package names

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/admission"
	"github.com/claude-sandbox/claude-sandbox/userstack/inspect"
)

// The stack's own DNS resolver, with the domain allowlist on (names.go).
//
// The sandbox's resolv.conf names the stack's virtual resolver address;
// every query to it (UDP and TCP port 53) is answered here:
//   - a name the allowlist does not allow: NXDOMAIN, recorded as a block,
//     and nothing is sent upstream (DNS cannot carry data out);
//   - A or AAAA for an allowed name: resolved upstream (the host's
//     resolver, the one the plain relay forwards to), and answered with
//     the name's synthetic address (one record, under the name asked,
//     whatever CNAME chain led to the real addresses), NXDOMAIN or an
//     empty answer as upstream said;
//   - HTTPS and SVCB (types 65, 64): an empty answer, so no ECH config or
//     address hints reach the client (ECH would hide the SNI the stack
//     checks; hints are real addresses);
//   - any other type for an allowed name (MX, TXT, SRV, CAA, ...):
//     forwarded upstream, the answer's records of the asked type kept
//     under the name asked and everything else dropped. The query names
//     only an allowed name, so it carries nothing out that an A query
//     would not; what comes back are names (which the sandbox must resolve
//     through here again) or text, never an address it could dial;
//   - ANY: an empty answer (RFC 8482); other opcodes: NOTIMP; a message
//     that is not one query: FORMERR.

// dnsTTLMax caps the TTL of the stack's answers.
const dnsTTLMax = 300

// ServeUDP answers one query the sandbox sent to the virtual resolver
// over UDP, on a worker (resolving may wait on the upstream). Queries
// beyond MaxDNSInFlight are dropped.
func (n *Names) ServeUDP(from, to netip.AddrPort, payload [][]byte) {
	var q []byte
	for _, p := range payload {
		q = append(q, p...)
	}
	select {
	case n.dnsSlots <- struct{}{}:
	default:
		return
	}
	if !n.deps.Spawn(func() {
		defer func() { <-n.dnsSlots }()
		resp := n.answer(n.deps.Ctx, q, netpolicy.ProtoUDP, to, udpLimit(q))
		if resp == nil {
			return
		}
		buf := make([]byte, n.deps.Headroom+len(resp))
		copy(buf[n.deps.Headroom:], resp)
		if err := n.deps.WriteUDP(buf, len(resp), to, from); err != nil {
			n.deps.Logf("userstack: dns answer to %s: %v", from, err)
		}
	}) {
		<-n.dnsSlots
	}
}

// udpLimit is the largest UDP answer the query's sender takes: its EDNS
// size, or 512.
func udpLimit(q []byte) int {
	var p dnsmessage.Parser
	if _, err := p.Start(q); err != nil {
		return 512
	}
	if err := p.SkipAllQuestions(); err != nil {
		return 512
	}
	if err := p.SkipAllAnswers(); err != nil {
		return 512
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return 512
	}
	for {
		h, err := p.AdditionalHeader()
		if err != nil {
			return 512
		}
		if h.Type == dnsmessage.TypeOPT {
			return max(512, min(int(h.Class), 4096))
		}
		if err := p.SkipAdditional(); err != nil {
			return 512
		}
	}
}

// serveDNSTCP answers DNS over TCP on conn (the other end of the
// socketpair the sandbox's connection is relayed to), query after query,
// until the sandbox closes or 2 minutes pass without one.
func (n *Names) serveDNSTCP(conn *os.File, to netip.AddrPort) {
	ctx := n.deps.Ctx
	defer func() { <-n.dnsTCPSlots }()
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var hdr [2]byte
	for {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(conn, q); err != nil {
			return
		}
		// The same slots as queries over UDP: connections at once are
		// bounded (MaxDNSTCPConns), and the queries they have answered
		// upstream at once with the rest.
		select {
		case n.dnsSlots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		resp := n.answer(ctx, q, netpolicy.ProtoTCP, to, 0xffff)
		<-n.dnsSlots
		if resp == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(resp)), uint16(len(resp)))
		_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// StartTCP makes the host side of a TCP connection to the virtual
// resolver: one end of a socketpair the relay uses as its host socket,
// the other end served by serveDNSTCP.
func (n *Names) StartTCP(to netip.AddrPort) (int, error) {
	select {
	case n.dnsTCPSlots <- struct{}{}: // given back by serveDNSTCP
	default:
		n.deps.Block(netpolicy.ProtoTCP, to, "", fmt.Sprintf("dns over tcp: %d connections at once", MaxDNSTCPConns))
		return -1, errDNSTCPFull
	}
	fd, err := n.startDNSTCPConn(to)
	if err != nil {
		<-n.dnsTCPSlots
	}
	return fd, err
}

// MaxDNSTCPConns bounds the TCP connections to the stack's resolver served
// at once (each a goroutine, a socket pair and up to 64 KiB of query
// buffered); one more is reset and recorded.
const MaxDNSTCPConns = 128

var errDNSTCPFull = errors.New("too many DNS connections over TCP")

func (n *Names) startDNSTCPConn(to netip.AddrPort) (int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return -1, err
	}
	if err := unix.SetNonblock(fds[1], true); err != nil { // for Go's poller
		unix.Close(fds[0])
		unix.Close(fds[1])
		return -1, err
	}
	conn := os.NewFile(uintptr(fds[1]), "dns")
	if !n.deps.Spawn(func() { n.serveDNSTCP(conn, to) }) {
		conn.Close()
		unix.Close(fds[0])
		return -1, errors.New("closing")
	}
	return fds[0], nil
}

// answer builds the answer to query q (nil: none, drop it), limited to
// limit bytes (a longer one is sent truncated, TC set).
func (n *Names) answer(ctx context.Context, q []byte, proto netpolicy.Proto, to netip.AddrPort, limit int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil // not a query: no answer (as a resolver drops garbage)
	}
	qs, err := oneQuestion(&p)
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	switch {
	case h.OpCode != 0:
		resp.RCode = dnsmessage.RCodeNotImplemented
		return build(resp, nil, nil, limit)
	case err != nil || len(qs) != 1:
		resp.RCode = dnsmessage.RCodeFormatError
		return build(resp, nil, nil, limit)
	}
	question := qs[0]
	name := inspect.Canon(question.Name.String())
	if question.Class != dnsmessage.ClassINET {
		resp.RCode = dnsmessage.RCodeRefused
		return build(resp, qs, nil, limit)
	}
	ok, rule := n.rules.AllowName(name)
	if !ok {
		if _, valid := netpolicy.CanonicalName(name); valid && n.deps.Ask && admission.Askable(rule) {
			return n.askAnswer(resp, qs, question, limit)
		}
		if rule == "" {
			rule = "domain not allowed"
		}
		n.deps.Block(proto, to, name, rule)
		resp.RCode = dnsmessage.RCodeNameError
		return build(resp, qs, nil, limit)
	}
	n.deps.NoteDNS(proto, to, name, question.Type, rule)
	switch question.Type {
	case dnsmessage.TypeA, dnsmessage.TypeAAAA:
		v6 := question.Type == dnsmessage.TypeAAAA
		if v6 && n.cfg.NoIPv6 {
			return build(resp, qs, nil, limit)
		}
		addrs, rcode, err := n.lookup(ctx, name, question.Type)
		n.prefetch(name, question.Type)
		if err != nil {
			n.deps.Logf("userstack: dns %s %v: %v", name, question.Type, err)
			resp.RCode = dnsmessage.RCodeServerFailure
			return build(resp, qs, nil, limit)
		}
		if len(addrs) == 0 {
			resp.RCode = rcode
			return build(resp, qs, nil, limit)
		}
		a, err := n.synthetic(name, v6)
		if errors.Is(err, errTooManyNames) {
			n.deps.Block(proto, to, name, fmt.Sprintf("synthetic names: %d handed out, no more", MaxNames))
			resp.RCode = dnsmessage.RCodeServerFailure
			return build(resp, qs, nil, limit)
		}
		if err != nil {
			n.deps.Logf("userstack: dns %s: %v", name, err)
			resp.RCode = dnsmessage.RCodeServerFailure
			return build(resp, qs, nil, limit)
		}
		return build(resp, qs, []dnsmessage.Resource{addressRecord(question.Name, a, v6, n.ttlOf(name, question.Type))}, limit)
	case dnsmessage.TypeHTTPS, dnsmessage.TypeSVCB, dnsmessage.TypeALL:
		return build(resp, qs, nil, limit)
	}
	rcode, rrs, err := n.forwardUpstream(ctx, name, question)
	if err != nil {
		n.deps.Logf("userstack: dns %s %v: %v", name, question.Type, err)
		resp.RCode = dnsmessage.RCodeServerFailure
		return build(resp, qs, nil, limit)
	}
	resp.RCode = rcode
	return build(resp, qs, rrs, limit)
}

// errNotOneQuestion: a query with no question, or more than one.
var errNotOneQuestion = errors.New("not one question")

// oneQuestion parses the query's question, and no further than a second
// one: AllQuestions would parse every one first (a datagram holds ~10,800
// questions of a 2-byte name pointer each, each parsed into a Question
// with a 255-byte name array: ~13 MB allocated per query, seen).
func oneQuestion(p *dnsmessage.Parser) ([]dnsmessage.Question, error) {
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	if _, err := p.Question(); err != dnsmessage.ErrSectionDone {
		return nil, errNotOneQuestion
	}
	return []dnsmessage.Question{q}, nil
}

// ttlOf is the TTL of a synthetic answer: the cached upstream TTL, at
// least a second.
func (n *Names) ttlOf(name string, t dnsmessage.Type) uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return max(1, min(n.cache[cacheKey{name, t}].ttl, dnsTTLMax))
}

// build packs an answer; past limit, the answer section is dropped and TC
// set (the client retries over TCP).
func build(h dnsmessage.Header, qs []dnsmessage.Question, rrs []dnsmessage.Resource, limit int) []byte {
	m := dnsmessage.Message{Header: h, Questions: qs, Answers: rrs}
	out, err := m.Pack()
	if err != nil {
		m.Answers = nil
		m.Header.RCode = dnsmessage.RCodeServerFailure
		out, _ = m.Pack()
	}
	if len(out) > limit {
		m.Answers = nil
		m.Header.Truncated = true
		out, _ = m.Pack()
	}
	return out
}

// resolveUpstream asks the upstream resolver for name's records of type t
// (A or AAAA) and returns the addresses at the end of the CNAME chain
// from name, their least TTL, and the answer's rcode.
func (n *Names) resolveUpstream(ctx context.Context, name string, t dnsmessage.Type) ([]netip.Addr, uint32, dnsmessage.RCode, error) {
	qn, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, 0, 0, err
	}
	m, err := n.exchange(ctx, dnsmessage.Question{Name: qn, Type: t, Class: dnsmessage.ClassINET})
	if err != nil {
		return nil, 0, 0, err
	}
	chain := map[string]bool{inspect.Canon(qn.String()): true}
	for range 16 { // follow the CNAMEs, in any order they came
		grew := false
		for _, rr := range m.Answers {
			if c, ok := rr.Body.(*dnsmessage.CNAMEResource); ok && chain[inspect.Canon(rr.Header.Name.String())] && !chain[inspect.Canon(c.CNAME.String())] {
				chain[inspect.Canon(c.CNAME.String())] = true
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	var addrs []netip.Addr
	ttl := uint32(dnsTTLMax)
	for _, rr := range m.Answers {
		if !chain[inspect.Canon(rr.Header.Name.String())] {
			continue
		}
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			if t == dnsmessage.TypeA {
				addrs = append(addrs, netip.AddrFrom4(b.A))
				ttl = min(ttl, rr.Header.TTL)
			}
		case *dnsmessage.AAAAResource:
			if t == dnsmessage.TypeAAAA {
				addrs = append(addrs, netip.AddrFrom16(b.AAAA).Unmap())
				ttl = min(ttl, rr.Header.TTL)
			}
		}
	}
	addrs = dedupAddrs(addrs)
	if len(addrs) > MaxCachedAddrs {
		addrs = append([]netip.Addr(nil), addrs[:MaxCachedAddrs]...) // not the whole answer's array
	}
	return addrs, ttl, m.Header.RCode, nil
}

// forwardUpstream asks upstream for q (another type than A/AAAA) under
// name, and returns the records of q's type owned by a name of the CNAME
// chain, re-owned by q's name.
func (n *Names) forwardUpstream(ctx context.Context, name string, q dnsmessage.Question) (dnsmessage.RCode, []dnsmessage.Resource, error) {
	qn, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return 0, nil, err
	}
	m, err := n.exchange(ctx, dnsmessage.Question{Name: qn, Type: q.Type, Class: dnsmessage.ClassINET})
	if err != nil {
		return 0, nil, err
	}
	var out []dnsmessage.Resource
	for _, rr := range m.Answers {
		if rr.Header.Type != q.Type {
			continue // CNAMEs, addresses, anything else
		}
		if _, unknown := rr.Body.(*dnsmessage.UnknownResource); unknown {
			continue
		}
		rr.Header.Name = q.Name
		rr.Header.TTL = min(rr.Header.TTL, dnsTTLMax)
		out = append(out, rr)
	}
	return m.Header.RCode, out, nil
}

// errNoUpstream: the stack has no resolver to ask.
var errNoUpstream = errors.New("no upstream resolver")

// exchange sends one query to the upstream resolver (over UDP, twice at
// most, then TCP if the answer is truncated) and returns its answer. The
// upstream is dialed on the host side (through the Dialer, if any), as
// the plain DNS relay does.
func (n *Names) exchange(ctx context.Context, q dnsmessage.Question) (*dnsmessage.Message, error) {
	up := n.deps.Upstream
	if !up.IsValid() {
		return nil, errNoUpstream
	}
	id := uint16(rand.Uint32())
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{q},
	}
	var opt dnsmessage.ResourceHeader
	_ = opt.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
	msg.Additionals = []dnsmessage.Resource{{Header: opt, Body: &dnsmessage.OPTResource{}}}
	pkt, err := msg.Pack()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for try := range 2 {
		m, err := n.exchangeOnce(ctx, "udp", up, pkt, time.Duration(2+2*try)*time.Second)
		if err == nil && m.Header.Truncated {
			m, err = n.exchangeOnce(ctx, "tcp", up, pkt, 5*time.Second)
		}
		if err == nil {
			if m.Header.ID != id || !m.Header.Response || len(m.Questions) != 1 ||
				inspect.Canon(m.Questions[0].Name.String()) != inspect.Canon(q.Name.String()) || m.Questions[0].Type != q.Type {
				lastErr = errors.New("the upstream answer does not match the query")
				continue
			}
			return m, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (n *Names) exchangeOnce(ctx context.Context, network string, up netip.AddrPort, pkt []byte, timeout time.Duration) (*dnsmessage.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	var err error
	if n.deps.Dialer != nil {
		conn, err = n.deps.Dialer.DialContext(ctx, network, up.String())
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, up.String())
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var buf []byte
	if network == "tcp" {
		out := binary.BigEndian.AppendUint16(nil, uint16(len(pkt)))
		if _, err := conn.Write(append(out, pkt...)); err != nil {
			return nil, err
		}
		var hdr [2]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return nil, err
		}
		buf = make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(conn, buf); err != nil {
			return nil, err
		}
	} else {
		if _, err := conn.Write(pkt); err != nil {
			return nil, err
		}
		buf = make([]byte, 65535)
		id := binary.BigEndian.Uint16(pkt)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return nil, err
			}
			if k >= 2 && binary.BigEndian.Uint16(buf) == id {
				buf = buf[:k]
				break
			}
			// Not ours (a late answer to an earlier try): keep reading.
		}
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf); err != nil {
		return nil, fmt.Errorf("the upstream answer: %w", err)
	}
	return &m, nil
}

// prefetch resolves the other address family of name in the background,
// so that a UDP flow to the name finds both in the cache (admission never
// waits on the packet path) without dropping its first datagram.
func (n *Names) prefetch(name string, asked dnsmessage.Type) {
	other := dnsmessage.TypeAAAA
	if asked == dnsmessage.TypeAAAA {
		other = dnsmessage.TypeA
	}
	n.background(name, other)
}

// askAnswer answers a query for a name off the allowlist in the ask mode
// (ask.go): A and AAAA with the name's synthetic address, at once and
// without asking upstream (so nothing about the name leaves the sandbox
// before a person approves a connection to it); other types with an
// empty answer. The connection to the address is what asks.
func (n *Names) askAnswer(resp dnsmessage.Header, qs []dnsmessage.Question, question dnsmessage.Question, limit int) []byte {
	v6 := question.Type == dnsmessage.TypeAAAA
	if question.Type != dnsmessage.TypeA && !v6 || v6 && n.cfg.NoIPv6 {
		return build(resp, qs, nil, limit)
	}
	a, err := n.synthetic(inspect.Canon(question.Name.String()), v6)
	if err != nil {
		resp.RCode = dnsmessage.RCodeServerFailure
		return build(resp, qs, nil, limit)
	}
	return build(resp, qs, []dnsmessage.Resource{addressRecord(question.Name, a, v6, TTLMin)}, limit)
}

// addressRecord is the answer that name has address a: an AAAA record
// for v6, else an A record.
func addressRecord(name dnsmessage.Name, a netip.Addr, v6 bool, ttl uint32) dnsmessage.Resource {
	rh := dnsmessage.ResourceHeader{Name: name, Class: dnsmessage.ClassINET, TTL: ttl}
	if v6 {
		return dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}}
	}
	return dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}}
}
