package userstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Connections into the sandbox (Config.Inbound, --publish). The relay
// only answers connections the sandbox opens; a published port needs the
// other direction, so these are gVisor's own TCP and UDP endpoints on a
// gateway address, connecting to the sandbox's address over the TUN like
// any peer. Their replies come back addressed to the gateway: with
// Inbound set, the TUN's reader sends every packet to a gateway through
// gVisor (not the fast path), whose demultiplexer finds the endpoint; a
// packet no endpoint takes goes on to the relay's handlers as before (DNS
// and host ports of the gateway, and refusals). The traffic of a
// published port is a dev server's, not the egress path's: gVisor's full
// TCP (a second stack between client and server) is fast enough there.

// A connection into the sandbox holds memory in gVisor's endpoint: its
// send and receive buffers, which gVisor sizes at 1 MiB each by default
// and lets grow (receive buffer moderation) to 4 MiB. With Inbound, the
// stack's TCP endpoints are those connections only (the relay uses none),
// so both buffers are bounded stack-wide at publishBuffer, and each
// connection holds publishConnCost of the relay's memory budget
// (Config.MaxRelayMemory, mem.go) from its dial until it is closed: the
// published ports and the egress relay share one bound. A dial when the
// budget cannot hold one more fails at once (ErrInboundMemory).
const (
	// publishBuffer bounds each of a connection's two buffers: a window
	// of 64 KiB over the TUN's round trip (tens of microseconds) is
	// hundreds of MB/s, plenty for a dev server.
	publishBuffer = 64 << 10
	// publishConnCost: both buffers at their bound, and the endpoint's
	// own state and the jail's two copy goroutines (their stacks), about
	// 16 KiB.
	publishConnCost = 2*publishBuffer + 16<<10
)

// ErrInboundMemory is DialSandbox's error when the relay's memory budget
// cannot hold another connection into the sandbox.
var ErrInboundMemory = fmt.Errorf("the egress relay's memory budget is spent (each connection into the sandbox holds %d KiB of it)", publishConnCost>>10)

// boundInboundBuffers bounds the buffers of s's TCP endpoints at
// publishBuffer, without moderation (growth).
func boundInboundBuffers(s *stack.Stack) error {
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: publishBuffer, Max: publishBuffer}
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: publishBuffer, Max: publishBuffer}
	moderate := tcpip.TCPModerateReceiveBufferOption(false)
	if err := tcpipErr("inbound send buffers", s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)); err != nil {
		return err
	}
	if err := tcpipErr("inbound receive buffers", s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)); err != nil {
		return err
	}
	return tcpipErr("inbound buffer moderation", s.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate))
}

// inboundConn is a connection into the sandbox: its Close gives its share
// of the memory budget back.
type inboundConn struct {
	*gonet.TCPConn
	st   *Stack
	once sync.Once
}

func (c *inboundConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { c.st.memGive(publishConnCost) })
	return err
}

// isGateway reports whether a is one of the gateway addresses.
func (st *Stack) isGateway(a netip.Addr) bool {
	a = a.Unmap()
	for _, g := range st.cfg.Gateways {
		if g.Unmap() == a {
			return true
		}
	}
	return false
}

// DialSandbox opens a connection from the gateway of dst's family to dst
// (the sandbox's address and a port it listens on): a TCP stream, or a
// connected UDP socket whose datagrams are the sandbox's. It needs
// Config.Inbound. A TCP connection holds publishConnCost of the relay's
// memory budget until it is closed; when the budget cannot hold it, the
// dial fails at once.
func (st *Stack) DialSandbox(ctx context.Context, proto netpolicy.Proto, dst netip.AddrPort) (net.Conn, error) {
	if !st.cfg.Inbound {
		return nil, errors.New("the egress stack was not set up for connections into the sandbox")
	}
	var gw netip.Addr
	for _, g := range st.cfg.Gateways {
		if g.Unmap().Is4() == dst.Addr().Unmap().Is4() {
			gw = g.Unmap()
			break
		}
	}
	if !gw.IsValid() {
		return nil, fmt.Errorf("no gateway address of the family of %s", dst)
	}
	netProto := ipv4.ProtocolNumber
	if gw.Is6() {
		netProto = ipv6.ProtocolNumber
	}
	local := tcpip.FullAddress{NIC: nicID, Addr: tcpAddr(gw)}
	remote := tcpip.FullAddress{NIC: nicID, Addr: tcpAddr(dst.Addr().Unmap()), Port: dst.Port()}
	switch proto {
	case netpolicy.ProtoTCP:
		if st.memTakeLeast(publishConnCost, publishConnCost) == 0 {
			return nil, ErrInboundMemory
		}
		c, err := gonet.DialTCPWithBind(ctx, st.s, local, remote, netProto)
		if err != nil {
			st.memGive(publishConnCost)
			return nil, err
		}
		return &inboundConn{TCPConn: c, st: st}, nil
	case netpolicy.ProtoUDP:
		return gonet.DialUDP(st.s, &local, &remote, netProto)
	}
	return nil, fmt.Errorf("cannot open a %s connection into the sandbox", proto)
}
