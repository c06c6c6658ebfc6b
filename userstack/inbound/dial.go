// Package inbound is the jail's connections into the sandbox: the host
// sockets of the published ports (--publish), opened before the sandbox
// starts, and the relays that copy each host client to the sandbox's
// address and port; and, on the stack's side, the gVisor endpoints those
// relays dial from a gateway address ([Dial]), each holding a share of
// the egress relay's memory budget.
//
// The relays know the egress stack only through [Sandbox], its
// DialSandbox; the dial knows it only through a gVisor stack, a NIC and
// a [Budget]. It imports neither package userstack nor package jail: the
// stack (userstack) calls Dial and BoundBuffers, and the jail serves the
// ports ([Published.Serve]) with the stack as the Sandbox.
//
// The relay only answers connections the sandbox opens; a published port
// needs the other direction, so these are gVisor's own TCP and UDP
// endpoints on a gateway address, connecting to the sandbox's address
// over the TUN like any peer. Their replies come back addressed to the
// gateway: with Config.Inbound, the TUN's reader sends every packet to a
// gateway through gVisor (not the fast path), whose demultiplexer finds
// the endpoint; a packet no endpoint takes goes on to the relay's
// handlers as before (DNS and host ports of the gateway, and refusals).
// The traffic of a published port is a dev server's, not the egress
// path's: gVisor's full TCP (a second stack between client and server) is
// fast enough there.
package inbound

import (
	"context"
	"fmt"
	"net"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// A connection into the sandbox holds memory in gVisor's endpoint: its
// send and receive buffers, which gVisor sizes at 1 MiB each by default
// and lets grow (receive buffer moderation) to 4 MiB. With Inbound, the
// stack's TCP endpoints are those connections only (the relay uses none),
// so both buffers are bounded stack-wide at Buffer, and each connection
// holds ConnCost of the relay's memory budget (Config.MaxRelayMemory)
// from its dial until it is closed: the published ports and the egress
// relay share one bound. A dial when the budget cannot hold one more
// fails at once (ErrMemory).
const (
	// Buffer bounds each of a connection's two buffers: a window of 64
	// KiB over the TUN's round trip (tens of microseconds) is hundreds of
	// MB/s, plenty for a dev server.
	Buffer = 64 << 10
	// ConnCost: both buffers at their bound, and the endpoint's own
	// state and the jail's two copy goroutines (their stacks), about 16
	// KiB.
	ConnCost = 2*Buffer + 16<<10
)

// ErrMemory is Dial's error when the relay's memory budget cannot hold
// another connection into the sandbox.
var ErrMemory = fmt.Errorf("the egress relay's memory budget is spent (each connection into the sandbox holds %d KiB of it)", ConnCost>>10)

// Budget is the egress relay's memory budget, as the dial sees it.
type Budget interface {
	// TakeLeast takes up to want bytes, nothing unless least are free,
	// and returns how many it took.
	TakeLeast(least, want int) int
	// Give gives n bytes back.
	Give(n int)
}

// BoundBuffers bounds the buffers of s's TCP endpoints at Buffer,
// without moderation (growth).
func BoundBuffers(s *stack.Stack) error {
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: Buffer, Max: Buffer}
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: Buffer, Max: Buffer}
	moderate := tcpip.TCPModerateReceiveBufferOption(false)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd); err != nil {
		return fmt.Errorf("the egress stack: inbound send buffers: %s", err)
	}
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv); err != nil {
		return fmt.Errorf("the egress stack: inbound receive buffers: %s", err)
	}
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate); err != nil {
		return fmt.Errorf("the egress stack: inbound buffer moderation: %s", err)
	}
	return nil
}

// conn is a connection into the sandbox: its Close gives its share of
// the memory budget back.
type conn struct {
	*gonet.TCPConn
	mem  Budget
	once sync.Once
}

func (c *conn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { c.mem.Give(ConnCost) })
	return err
}

// Dial opens a connection on s's nic from gw to dst (the sandbox's
// address and a port it listens on; the same family as gw): a TCP
// stream, holding ConnCost of mem until it is closed (ErrMemory at once
// when mem cannot hold it), or a connected UDP socket whose datagrams are
// the sandbox's.
func Dial(ctx context.Context, s *stack.Stack, nic tcpip.NICID, mem Budget, proto netpolicy.Proto, gw, dst tcpip.FullAddress) (net.Conn, error) {
	netProto := ipv4.ProtocolNumber
	if gw.Addr.Len() == 16 {
		netProto = ipv6.ProtocolNumber
	}
	gw.NIC, dst.NIC = nic, nic
	switch proto {
	case netpolicy.ProtoTCP:
		if mem.TakeLeast(ConnCost, ConnCost) == 0 {
			return nil, ErrMemory
		}
		c, err := gonet.DialTCPWithBind(ctx, s, gw, dst, netProto)
		if err != nil {
			mem.Give(ConnCost)
			return nil, err
		}
		return &conn{TCPConn: c, mem: mem}, nil
	case netpolicy.ProtoUDP:
		return gonet.DialUDP(s, &gw, &dst, netProto)
	}
	return nil, fmt.Errorf("cannot open a %s connection into the sandbox", proto)
}
