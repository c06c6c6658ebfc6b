package userstack

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// handleTCP decides a new TCP connection. It runs on the packet path, so
// it never blocks: the dial happens in a goroutine. Every path ends in
// exactly one req.Complete.
func (st *Stack) handleTCP(req *tcp.ForwarderRequest) {
	id := req.ID()
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	target, ok := st.tcpTarget(dst)
	if !ok {
		req.Complete(true) // RST: the caller sees "connection refused" at once
		return
	}
	st.mu.Lock()
	closed := st.closed
	if !closed {
		st.wg.Add(1)
	}
	st.mu.Unlock()
	if closed {
		req.Complete(true)
		return
	}
	st.work.Go(func() {
		defer st.wg.Done()
		st.forwardTCP(req, target)
	})
}

// tcpTarget returns where a connection to dst goes: the upstream resolver
// for port 53 of a local address, dst itself when the policy allows it. It
// records a Block for a refused destination.
func (st *Stack) tcpTarget(dst netip.AddrPort) (netip.AddrPort, bool) {
	if st.isLocal(dst.Addr()) {
		if dst.Port() == netpolicy.DNSPort {
			return st.upstream()
		}
		st.block(netpolicy.ProtoTCP, dst, "local address, not a DNS port")
		return netip.AddrPort{}, false
	}
	if v := st.cfg.Policy.Check(netpolicy.ProtoTCP, dst); !v.Allowed {
		st.block(netpolicy.ProtoTCP, dst, v.Rule)
		return netip.AddrPort{}, false
	}
	return dst, true
}

// forwardTCP dials the target first, so that a refused or unreachable
// destination gives the sandbox a RST instead of an accepted connection
// that then closes; then it completes the handshake and splices.
func (st *Stack) forwardTCP(req *tcp.ForwarderRequest, target netip.AddrPort) {
	id := req.ID() // valid only until Complete
	ctx, cancel := context.WithTimeout(st.ctx, st.cfg.DialTimeout)
	out, err := st.cfg.Dialer.DialContext(ctx, "tcp", target.String())
	cancel()
	if err != nil {
		st.cfg.Logf("userstack: dial tcp %s: %v", target, err)
		req.Complete(true)
		return
	}
	if st.ctx.Err() != nil {
		// Closing: a handshake on a closed stack would only time out.
		out.Close()
		req.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := req.CreateEndpoint(&wq)
	if terr != nil {
		// The sandbox side went away (or the handshake failed).
		req.Complete(true)
		out.Close()
		return
	}
	req.Complete(false)
	// Keepalives notice a sandbox peer that vanished without a FIN.
	ep.SocketOptions().SetKeepAlive(true)
	in := gonet.NewTCPConn(&wq, ep)
	if !st.track(in, out) {
		return
	}
	defer st.untrack(in, out)
	var relayed func()
	if f, ok := st.ep.(ackFlusher); ok {
		ours := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
		theirs := netip.AddrPortFrom(toAddr(id.RemoteAddress), id.RemotePort)
		relayed = func() { f.FlushAck(ours, theirs) }
	}
	st.splice(in, out, relayed)
}

type closeWriter interface{ CloseWrite() error }

// notifyWriter calls after once each write returned.
type notifyWriter struct {
	w     io.Writer
	after func()
}

func (n notifyWriter) Write(p []byte) (int, error) {
	k, err := n.w.Write(p)
	n.after()
	return k, err
}

// relayBuffers recycles splice buffers: a fresh 256 KiB pair per
// connection made the launcher grow by about 130 KiB a connection under
// connection churn, until the garbage collector caught up.
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, relayBufferSize); return &b }}

// ackFlusher is a link endpoint that holds back bare ACKs (TUN): it is
// told when the data such an ACK acknowledges has been relayed.
type ackFlusher interface {
	FlushAck(src, dst netip.AddrPort)
}

// splice copies both ways until both directions are done: from b to a on a
// worker, from a to b on the calling goroutine, calling relayed (if set)
// after each write to b. An EOF in one direction is passed on as a
// half-close (CloseWrite) so that protocols that shut down their sending
// side first keep working; an error in either direction tears both down.
// Both conns are closed on return.
func (st *Stack) splice(a, b net.Conn, relayed func()) {
	errc := make(chan error, 1)
	st.work.Go(func() { errc <- copyHalf(a, b, nil) })
	if err := copyHalf(b, a, relayed); err != nil {
		// A reset or closed side: unblock the other direction now.
		a.Close()
		b.Close()
	}
	<-errc
	a.Close()
	b.Close()
}

// copyHalf copies src to dst until src ends, then half-closes dst. On an
// error it closes both, which ends the other direction too. relayed, if
// set, runs after each write and after the half-close.
func copyHalf(dst, src net.Conn, relayed func()) error {
	buf := relayBuffers.Get().(*[]byte)
	var w io.Writer = struct{ io.Writer }{dst}
	if relayed != nil {
		w = notifyWriter{dst, relayed}
	}
	_, err := io.CopyBuffer(w, struct{ io.Reader }{src}, *buf)
	relayBuffers.Put(buf)
	if err != nil {
		dst.Close()
		src.Close()
		return err
	}
	if cw, ok := dst.(closeWriter); ok {
		if cw.CloseWrite() != nil {
			dst.Close()
		}
	} else {
		dst.Close()
	}
	if relayed != nil {
		relayed() // the FIN, passed on too
	}
	return nil
}
