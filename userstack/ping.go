package userstack

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// HostPinger pings from the host with an unprivileged ICMP ("ping") socket:
// no raw socket and no capability, but the host's
// net.ipv4.ping_group_range must include the caller's group (most
// distributions set it to every group).
type HostPinger struct{}

// Ping sends one echo request to dst and waits for its reply.
func (HostPinger) Ping(ctx context.Context, dst netip.Addr, payload []byte) error {
	network, proto := "udp4", 1
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() && !dst.Is4In6() {
		network, proto = "udp6", 58
		reqType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	c, err := icmp.ListenPacket(network, "")
	if err != nil {
		return fmt.Errorf("ping socket: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	// The kernel sets the identifier of a ping socket's echoes itself.
	const seq = 1
	msg, err := (&icmp.Message{Type: reqType, Body: &icmp.Echo{Seq: seq, Data: payload}}).Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(msg, &net.UDPAddr{IP: dst.Unmap().AsSlice()}); err != nil {
		return err
	}
	buf := make([]byte, 65536)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		if m.Type != replyType {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && e.Seq == seq {
			return nil
		}
	}
}
