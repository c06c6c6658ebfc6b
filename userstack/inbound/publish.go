package inbound

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Sandbox is the egress stack as the relays see it: how a connection
// into the sandbox is opened (userstack's Stack.DialSandbox, which fails
// with ErrMemory when the relay's memory budget cannot hold it).
type Sandbox interface {
	DialSandbox(ctx context.Context, proto netpolicy.Proto, dst netip.AddrPort) (net.Conn, error)
}

// Published is one published port's host socket, opened before the
// sandbox starts (Listen) so that a port in use fails the launch, and
// closed by the jail's Close; the kernel closes it too when the launcher
// dies, SIGKILL included, since it is the launcher's own descriptor.
type Published struct {
	netpolicy.Publish
	tcp net.Listener
	udp net.PacketConn

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // host clients being relayed (TCP)
	closed bool
}

// Listen opens the host sockets of the published ports. On error every
// socket opened so far is closed and the error names the port and the fix.
func Listen(pubs []netpolicy.Publish) ([]*Published, error) {
	var out []*Published
	fail := func(err error) ([]*Published, error) {
		for _, p := range out {
			p.Close()
		}
		return nil, err
	}
	for _, p := range pubs {
		addr := netip.AddrPortFrom(p.HostAddr, p.HostPort).String()
		pp := &Published{Publish: p}
		var err error
		if p.Proto == netpolicy.ProtoUDP {
			pp.udp, err = net.ListenPacket("udp", addr)
		} else {
			pp.tcp, err = net.Listen("tcp", addr)
		}
		if err != nil {
			why := err.Error()
			switch {
			case errors.Is(err, syscall.EADDRINUSE):
				why = "the host port is in use: stop what listens there or pick another HOSTPORT"
			case errors.Is(err, syscall.EADDRNOTAVAIL):
				why = "the host has no such address: use 127.0.0.1 (the default), 0.0.0.0, or an address of this host"
			case errors.Is(err, syscall.EACCES):
				why = "ports below 1024 need privileges: pick a HOSTPORT of 1024 or more"
			}
			return fail(fmt.Errorf("--publish %s: %s", p, why))
		}
		out = append(out, pp)
	}
	return out, nil
}

// Close closes the host socket and the connections of host clients being
// relayed (their relays then end: Jail.Close waits for them).
func (p *Published) Close() {
	if p.tcp != nil {
		p.tcp.Close()
	}
	if p.udp != nil {
		p.udp.Close()
	}
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

// track registers a host client's connection while it is relayed; false
// once the port is closed (the caller closes it).
func (p *Published) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.conns == nil {
		p.conns = map[net.Conn]struct{}{}
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Published) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// relayTCPConn relays one host client (a variable for the tests).
var relayTCPConn = relayTCP

// The bounds of one published port: connections relayed at once (each
// holds a host socket, a gVisor endpoint and two goroutines) and UDP
// clients remembered. Beyond them a new connection is reset and a new
// client's datagrams are dropped, so a flood on a published port (one
// written 0.0.0.0, say) costs the launcher a bounded amount. The
// connections' buffers are also held in the egress relay's memory budget
// (Dial): when it is spent, a new connection is reset
// too. Every relay goroutine is in the jail's wait group: Jail.Close
// waits for them.
const (
	maxPublishConns      = 1024
	maxPublishUDPClients = 512
)

// Serve relays the published port into the sandbox's addr until the
// socket closes (Close): every goroutine it starts is counted in wg, so
// the jail's Close waits for them; logf hears of failures; a UDP client
// idle for idle is forgotten.
func (p *Published) Serve(st Sandbox, addr netip.Addr, idle time.Duration, logf func(string, ...any), wg *sync.WaitGroup) {
	// Each relay's goroutine is added to wg by a goroutine wg already
	// counts (the accept or read loop): wg cannot reach zero meanwhile.
	dst := netip.AddrPortFrom(addr, p.Port)
	if p.tcp != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, maxPublishConns)
			for {
				c, err := p.tcp.Accept()
				if err != nil {
					if !errors.Is(err, net.ErrClosed) {
						logf("accept: %v", err)
					}
					return
				}
				select {
				case slots <- struct{}{}:
				default:
					logf("%d connections are relayed already: a new one from %s was reset", maxPublishConns, c.RemoteAddr())
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.SetLinger(0)
					}
					c.Close()
					continue
				}
				if !p.track(c) {
					c.Close()
					<-slots
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					defer p.untrack(c)
					relayTCPConn(st, c, dst, logf)
				}()
			}
		}()
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		relayUDP(st, p.udp, dst, idle, logf, wg)
	}()
}

// relayTCP connects a host client to the sandbox's port and copies both
// ways, each direction's end passed on as a half close.
func relayTCP(st Sandbox, c net.Conn, dst netip.AddrPort, logf func(string, ...any)) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	sc, err := st.DialSandbox(ctx, netpolicy.ProtoTCP, dst)
	cancel()
	if err != nil {
		if errors.Is(err, ErrMemory) {
			logf("a connection from %s to the sandbox's %s was reset: %v", c.RemoteAddr(), dst, err)
		} else {
			logf("a connection from %s to the sandbox's %s failed: %v; a server inside must listen on 0.0.0.0 or %s, not 127.0.0.1", c.RemoteAddr(), dst, err, dst.Addr())
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // the client sees a reset, as from a closed port
		}
		return
	}
	defer sc.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(sc, c)
		closeWrite(sc)
		close(done)
	}()
	_, _ = io.Copy(c, sc)
	closeWrite(c)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// relayUDP gives each host client (address and port) a UDP socket of its
// own toward the sandbox's port, so replies go back to that client; a
// client idle for idle is forgotten.
func relayUDP(st Sandbox, pc net.PacketConn, dst netip.AddrPort, idle time.Duration, logf func(string, ...any), wg *sync.WaitGroup) {
	type client struct {
		conn net.Conn
		last time.Time
	}
	var mu sync.Mutex
	clients := map[string]*client{}
	defer func() {
		mu.Lock()
		for _, c := range clients {
			c.conn.Close()
		}
		mu.Unlock()
	}()
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				logf("read: %v", err)
			}
			return
		}
		key := from.String()
		mu.Lock()
		c := clients[key]
		if c == nil && len(clients) >= maxPublishUDPClients {
			mu.Unlock()
			logf("%d UDP clients are relayed already: datagrams from %s were dropped", maxPublishUDPClients, from)
			continue
		}
		if c == nil {
			sc, err := st.DialSandbox(context.Background(), netpolicy.ProtoUDP, dst)
			if err != nil {
				mu.Unlock()
				logf("datagrams from %s to the sandbox's %s: %v", from, dst, err)
				continue
			}
			c = &client{conn: sc}
			clients[key] = c
			wg.Add(1) // this loop's own goroutine is counted: never from zero
			go func() {
				defer wg.Done()
				rb := make([]byte, 65535)
				for {
					_ = sc.SetReadDeadline(time.Now().Add(idle))
					m, err := sc.Read(rb)
					if err != nil {
						// Any end forgets the client, so that its next
						// datagram opens a new socket: a socket left
						// in the map closed (a refusal from inside
						// reported at this read) would swallow the
						// client's datagrams for good.
						var ne net.Error
						mu.Lock()
						if errors.As(err, &ne) && ne.Timeout() && time.Since(c.last) < idle {
							mu.Unlock()
							continue
						}
						if clients[key] == c {
							delete(clients, key)
						}
						mu.Unlock()
						sc.Close()
						return
					}
					mu.Lock()
					c.last = time.Now()
					mu.Unlock()
					if _, err := pc.WriteTo(rb[:m], from); err != nil && errors.Is(err, net.ErrClosed) {
						sc.Close()
						return
					}
				}
			}()
		}
		c.last = time.Now()
		mu.Unlock()
		if _, err := c.conn.Write(buf[:n]); err != nil {
			// A refusal from inside (nothing listened on the port
			// when an earlier datagram came) is reported at the next
			// write, as on a connected socket, and that datagram is
			// not sent: once reported, the second write goes.
			if _, err := c.conn.Write(buf[:n]); err != nil {
				logf("datagram from %s to the sandbox's %s: %v", from, dst, err)
			}
		}
	}
}
