package userstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/inbound"
)

// Connections into the sandbox (Config.Inbound, --publish): gVisor's own
// TCP and UDP endpoints on a gateway address, dialed by package
// userstack/inbound (its doc says how their replies find them and how
// their buffers are bounded). Each TCP connection holds inbound.ConnCost
// of the relay's memory budget (mem.go) until it is closed.

// ErrInboundMemory is DialSandbox's error when the relay's memory budget
// cannot hold another connection into the sandbox.
var ErrInboundMemory = inbound.ErrMemory

// boundInboundBuffers bounds the buffers of s's TCP endpoints, without
// moderation (growth).
func boundInboundBuffers(s *stack.Stack) error { return inbound.BoundBuffers(s) }

// inboundBudget is the relay's memory budget as inbound.Dial takes it.
type inboundBudget struct{ st *Stack }

func (b inboundBudget) TakeLeast(least, want int) int { return b.st.memTakeLeast(least, want) }
func (b inboundBudget) Give(n int)                    { b.st.memGive(n) }

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
// Config.Inbound. A TCP connection holds inbound.ConnCost of the relay's
// memory budget until it is closed; when the budget cannot hold it, the
// dial fails at once (ErrInboundMemory).
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
	local := tcpip.FullAddress{Addr: tcpAddr(gw)}
	remote := tcpip.FullAddress{Addr: tcpAddr(dst.Addr().Unmap()), Port: dst.Port()}
	return inbound.Dial(ctx, st.s, nicID, inboundBudget{st}, proto, local, remote)
}
