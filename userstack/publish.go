package userstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"

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
// Config.Inbound.
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
		return gonet.DialTCPWithBind(ctx, st.s, local, remote, netProto)
	case netpolicy.ProtoUDP:
		return gonet.DialUDP(st.s, &local, &remote, netProto)
	}
	return nil, fmt.Errorf("cannot open a %s connection into the sandbox", proto)
}
