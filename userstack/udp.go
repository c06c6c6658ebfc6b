package userstack

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// flowKey identifies a UDP flow as the sandbox sees it.
type flowKey struct {
	src, dst netip.AddrPort
}

// udpFlow is one NAT entry: the stack-side endpoint connected to the
// sandbox's socket, and the host-side socket dialed for it.
type udpFlow struct {
	in   net.Conn
	out  net.Conn
	last atomic.Int64 // UnixNano of the last datagram either way
	once sync.Once
}

func (f *udpFlow) touch(t time.Time) { f.last.Store(t.UnixNano()) }

func (f *udpFlow) close() {
	f.once.Do(func() {
		f.in.Close()
		f.out.Close()
	})
}

// handleUDP decides the first datagram of a new UDP flow (later datagrams
// go straight to the flow's endpoint). Returning false makes gVisor answer
// with ICMP port unreachable.
func (st *Stack) handleUDP(req *udp.ForwarderRequest) bool {
	id := req.ID()
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	src := netip.AddrPortFrom(toAddr(id.RemoteAddress), id.RemotePort)
	var target netip.AddrPort
	switch {
	case st.isLocal(dst.Addr()):
		up, ok := st.upstream()
		if dst.Port() != netpolicy.DNSPort || !ok {
			st.block(netpolicy.ProtoUDP, dst, "local address, not a DNS port")
			return false
		}
		target = up
	default:
		if v := st.cfg.Policy.Check(netpolicy.ProtoUDP, dst); !v.Allowed {
			st.block(netpolicy.ProtoUDP, dst, v.Rule)
			return false
		}
		target = dst
	}
	key := flowKey{src: src, dst: dst}
	st.mu.Lock()
	_, exists := st.flows[key]
	closed := st.closed
	st.mu.Unlock()
	if closed || exists {
		return true // drop: closing, or the flow is being torn down
	}
	ctx, cancel := context.WithTimeout(st.ctx, st.cfg.DialTimeout)
	out, err := st.cfg.Dialer.DialContext(ctx, "udp", target.String())
	cancel()
	if err != nil {
		st.cfg.Logf("userstack: dial udp %s: %v", target, err)
		return false
	}
	var wq waiter.Queue
	ep, terr := req.CreateEndpoint(&wq)
	if terr != nil {
		st.cfg.Logf("userstack: udp endpoint for %s -> %s: %s", src, dst, terr)
		out.Close()
		return true
	}
	f := &udpFlow{in: gonet.NewUDPConn(&wq, ep), out: out}
	f.touch(st.cfg.Now())
	st.mu.Lock()
	if st.closed || st.flows[key] != nil {
		st.mu.Unlock()
		f.close()
		return true
	}
	st.flows[key] = f
	st.wg.Add(2)
	st.mu.Unlock()
	st.work.Go(func() { st.pumpUDP(key, f, f.in, f.out) })
	st.work.Go(func() { st.pumpUDP(key, f, f.out, f.in) })
	return true
}

// pumpUDP copies datagrams from src to dst until either side fails or the
// flow is closed, then closes and forgets the flow.
func (st *Stack) pumpUDP(key flowKey, f *udpFlow, src, dst net.Conn) {
	defer st.wg.Done()
	defer st.dropFlow(key, f)
	buf := make([]byte, 65535)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		f.touch(st.cfg.Now())
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (st *Stack) dropFlow(key flowKey, f *udpFlow) {
	f.close()
	st.mu.Lock()
	if st.flows[key] == f {
		delete(st.flows, key)
	}
	st.mu.Unlock()
}

// ExpireIdle closes every UDP flow idle for at least the idle timeout and
// returns how many it closed. The janitor calls it periodically; tests
// call it after moving their clock.
func (st *Stack) ExpireIdle() int {
	now := st.cfg.Now().UnixNano()
	var idle []*udpFlow
	st.mu.Lock()
	for k, f := range st.flows {
		if now-f.last.Load() >= int64(st.cfg.UDPIdleTimeout) {
			idle = append(idle, f)
			delete(st.flows, k)
		}
	}
	st.mu.Unlock()
	for _, f := range idle {
		f.close()
	}
	return len(idle)
}

// UDPFlows returns how many UDP NAT entries are live.
func (st *Stack) UDPFlows() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.flows)
}

func (st *Stack) janitor() {
	defer st.wg.Done()
	every := st.cfg.UDPIdleTimeout / 4
	if every < 100*time.Millisecond {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-t.C:
			st.ExpireIdle()
		}
	}
}
