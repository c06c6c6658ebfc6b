package userstack

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// A flow to a name connects as the kernel would (issue 30): the name is
// resolved and dialed when the SYN comes, and the SYN is answered with
// what the dial found. Before, the SYN was answered at once and the host
// dialed only after the first bytes: `nc -z` saw a successful connect to
// a name whose only address is blocked, to a refused port and to a host
// that does not answer.
//
// With the stack's own sockets (as the jail runs it), in a network
// namespace of its own (inOwnNetnsChild): nsServer is on lo (a closed
// port refuses, a listener accepts), nsVoid never answers, nsUnreachable
// has an unreachable route.
func TestNamesConnectLikeKernel(t *testing.T) {
	if !inOwnNetnsChild(t, "TestNamesConnectLikeKernel") {
		return
	}
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(nsServer, 7000).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	nh := startNamesOwnSocket(t, map[string]netip.Addr{
		"open.test": nsServer, "void.test": nsVoid, "unreach.test": nsUnreachable, "rebind.test": netip.MustParseAddr("10.1.2.3"),
	}, 300*time.Millisecond, 0, time.Minute)
	h := nh.harness
	addr := map[string]netip.Addr{}
	for _, n := range []string{"open.test", "void.test", "unreach.test", "rebind.test"} {
		addr[n] = resolveName(t, nh, n)
	}
	port := uint16(43000)
	syn := func(name string, dport uint16) (netip.AddrPort, netip.AddrPort) {
		port++
		src, dst := netip.AddrPortFrom(jail4, port), netip.AddrPortFrom(addr[name], dport)
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
		return src, dst
	}
	answer := func(src netip.AddrPort) out {
		t.Helper()
		for {
			o := readOut(t, h.ep)
			if o.proto == header.TCPProtocolNumber && o.tcp().DestinationPort() == src.Port() {
				return o
			}
			if o.proto == header.ICMPv4ProtocolNumber {
				return o
			}
		}
	}
	isRST := func(o out) bool {
		return o.proto == header.TCPProtocolNumber && o.tcp().Flags() == header.TCPFlagRst|header.TCPFlagAck
	}

	// A name that resolves only to a blocked address (a rebind into
	// 10/8): refused at the SYN, recorded, as the address itself is.
	src, _ := syn("rebind.test", 80)
	if o := answer(src); !isRST(o) {
		t.Fatalf("rebind.test: got %v, want RST|ACK (connection refused)", o.tcp().Flags())
	}
	if bl := h.blocks.list(); len(bl) != 1 || bl[0].Name != "rebind.test" || !strings.HasPrefix(bl[0].Rule, "resolves only to blocked addresses: 10.1.2.3") {
		t.Fatalf("blocks %+v", bl)
	}

	// A closed port of the name's host: RST (ECONNREFUSED), not a
	// connect that succeeds and then ends.
	src, _ = syn("open.test", 7001)
	if o := answer(src); !isRST(o) {
		t.Fatalf("open.test:7001 (closed): got %v, want RST|ACK", o.tcp().Flags())
	}

	// An unreachable host: ICMP destination unreachable.
	src, _ = syn("unreach.test", 80)
	if o := answer(src); o.proto != header.ICMPv4ProtocolNumber || header.ICMPv4(o.transport).Type() != header.ICMPv4DstUnreachable {
		t.Fatalf("unreach.test: got protocol %d, want ICMP destination unreachable", o.proto)
	}

	// A host that does not answer, the name's answer expired from the
	// cache (resolved again on a worker): no answer at all; the flow ends
	// after DialTimeout without a packet to the sandbox, whose own SYN
	// retries then time out.
	h.clock.add(10 * time.Minute)
	syn("void.test", 80)
	waitUntil(t, "the blackholed flow's end", func() bool { return tcpFlows(h.st) == 0 })
	if o, ok := queuedOut(t, nh); ok {
		t.Fatalf("void.test: the sandbox got a packet (protocol %d), want none", o.proto)
	}

	// The name's host listening: the SYN is answered once connected. A
	// ClientHello for another name is refused, and the host socket,
	// already connected, is closed having been written nothing.
	src, dst := syn("open.test", 7000)
	o := answer(src)
	if o.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck {
		t.Fatalf("open.test:7000: got %v, want SYN|ACK", o.tcp().Flags())
	}
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(20 * time.Second): // failsafe
		t.Fatal("the host never saw the connection")
	}
	iss := o.tcp().SequenceNumber()
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: iss + 1}.bytes())
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: clientHello(t, "other.test")}.bytes())
	nh.waitRST(t)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if got, _ := io.ReadAll(c); len(got) != 0 {
		t.Fatalf("the host got %d bytes of a refused flow", len(got))
	}
	c.Close()
	if bl := h.blocks.list(); len(bl) != 2 || bl[1].Name != "open.test" || bl[1].Rule != "sni mismatch: other.test" {
		t.Fatalf("blocks %+v", bl)
	}

	// The right SNI: relayed whole.
	src, dst = syn("open.test", 7000)
	o = answer(src)
	if o.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck {
		t.Fatalf("open.test:7000: got %v, want SYN|ACK", o.tcp().Flags())
	}
	c = <-accepted
	defer c.Close()
	iss = o.tcp().SequenceNumber()
	hello := clientHello(t, "open.test")
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck, seq: 1001, ack: iss + 1}.bytes())
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: 1001, ack: iss + 1, payload: hello}.bytes())
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	got := make([]byte, len(hello))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != string(hello) {
		t.Fatalf("the host read %d bytes (%v), want the ClientHello", len(got), err)
	}
}
