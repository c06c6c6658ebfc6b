package userstack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/inbound"
)

// sandboxStack is a gVisor stack at jail4 standing in for the sandbox,
// linked to h's channel endpoint (packets pumped both ways until the test
// ends), with a TCP listener on port.
func sandboxStack(t *testing.T, h *harness, port uint16) net.Listener {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
	})
	ep := channel.New(256, 65520, "")
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	addr := tcpip.AddrFrom4(jail4.As4())
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: addr.WithPrefix()}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	ln, err := gonet.ListenTCP(s, tcpip.FullAddress{NIC: 1, Addr: addr, Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pump := func(from, to *channel.Endpoint) {
		for {
			pkt := from.ReadContext(ctx)
			if pkt == nil {
				return
			}
			v := pkt.ToView()
			b := append([]byte(nil), v.AsSlice()...)
			v.Release()
			pkt.DecRef()
			inject(to, ipv4.ProtocolNumber, b)
		}
	}
	go pump(h.ep, ep)
	go pump(ep, h.ep)
	t.Cleanup(func() {
		cancel()
		ln.Close()
		s.Close()
		ep.Close()
	})
	return ln
}

// Connections into the sandbox (published ports) hold the relay's memory
// budget (issue 34): gVisor gave each up to 1 MiB + 1 MiB of buffers
// (growing to 4 MiB), outside MaxRelayMemory, for up to 1024 connections
// per published port. Each connection now holds inbound.ConnCost of the
// budget until it is closed, and a dial the budget cannot hold fails at
// once.
func TestInboundConnsInMemoryBudget(t *testing.T) {
	const budget = 1 << 20
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{
		Policy:         netpolicy.MustNew(netpolicy.Config{}),
		Dialer:         h.dialer,
		Gateways:       []netip.Addr{gateway4},
		Now:            h.clock.now,
		Inbound:        true,
		MaxRelayMemory: budget,
	})
	ln := sandboxStack(t, h, 8080)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	dst := netip.AddrPortFrom(jail4, 8080)
	dial := func() (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // failsafe
		defer cancel()
		return h.st.DialSandbox(ctx, netpolicy.ProtoTCP, dst)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	want := budget / inbound.ConnCost
	for len(conns) <= want {
		c, err := dial()
		if errors.Is(err, ErrInboundMemory) {
			break
		}
		if err != nil {
			t.Fatalf("connection %d into the sandbox: %v", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	if len(conns) != want {
		t.Fatalf("%d connections into the sandbox with a budget of %d bytes, want %d (%d bytes each)", len(conns), budget, want, inbound.ConnCost)
	}
	if used, _ := h.st.RelayMemory(); used != int64(want*inbound.ConnCost) {
		t.Fatalf("%d bytes of the budget in use, want %d", used, want*inbound.ConnCost)
	}
	// A closed connection gives its share back: room for the next.
	conns[0].Close()
	conns[0].Close() // twice: given back once
	c, err := dial()
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	conns[0] = c
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if used, _ := h.st.RelayMemory(); used != 0 {
		t.Fatalf("%d bytes of the budget in use after every connection closed", used)
	}
}
