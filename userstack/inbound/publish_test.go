package inbound

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// pipeListener is a listener in memory: each conn pushed is accepted.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// A published port's relays are in the jail's wait group, and closing the
// port ends them (issue 34): the relay goroutines were started outside
// it, so the jail's Close returned with relays still copying, holding host
// sockets and gVisor endpoints of a stack that was gone. Here a relay
// lasts as long as its host client's conn (it stands in for the copy);
// the client never closes it.
func TestPublishedRelaysWaitedFor(t *testing.T) {
	entered := make(chan struct{}, 1)
	var ended atomic.Bool
	old := relayTCPConn
	relayTCPConn = func(_ Sandbox, c net.Conn, _ netip.AddrPort, _ func(string, ...any)) {
		entered <- struct{}{}
		_, _ = io.Copy(io.Discard, c)
		ended.Store(true)
	}
	defer func() { relayTCPConn = old }()

	ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	p := &Published{Publish: netpolicy.Publish{Proto: netpolicy.ProtoTCP, Port: 8080}, tcp: ln}
	var wg sync.WaitGroup
	p.Serve(nil, netip.MustParseAddr("10.255.255.2"), time.Minute, func(string, ...any) {}, &wg)
	client, server := net.Pipe()
	defer client.Close()
	ln.conns <- server
	<-entered

	p.Close()
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(20 * time.Second): // failsafe
		t.Fatal("the wait for the published port's goroutines never ended: closing the port left its relay running")
	}
	if !ended.Load() {
		t.Fatal("the wait for the published port's goroutines ended before its relay")
	}
}

// A published port relays at most maxPublishConns connections at once:
// the next is closed at once, with a warning, and one ending frees its
// slot. TestReachPublishTCPConnCap no longer reaches this cap (the
// relay's memory budget stops connections first, issue 34), so it is
// tried here, each relay standing in for a copy that lasts as long as its
// host client's conn.
func TestPublishedConnCap(t *testing.T) {
	var relayed atomic.Int32
	entered := make(chan struct{}, maxPublishConns+1)
	old := relayTCPConn
	relayTCPConn = func(_ Sandbox, c net.Conn, _ netip.AddrPort, _ func(string, ...any)) {
		relayed.Add(1)
		entered <- struct{}{}
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
	defer func() { relayTCPConn = old }()

	ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	p := &Published{Publish: netpolicy.Publish{Proto: netpolicy.ProtoTCP, Port: 8080}, tcp: ln}
	var wg sync.WaitGroup
	warned := make(chan string, 4)
	p.Serve(nil, netip.MustParseAddr("10.255.255.2"), time.Minute, func(f string, a ...any) { warned <- f }, &wg)
	defer func() { p.Close(); wg.Wait() }()
	connect := func() net.Conn {
		client, server := net.Pipe()
		ln.conns <- server
		return client
	}
	var clients []net.Conn
	for range maxPublishConns {
		clients = append(clients, connect())
		<-entered
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	over := connect()
	defer over.Close()
	select {
	case <-entered:
		t.Fatalf("the connection over the cap of %d was relayed", maxPublishConns)
	case w := <-warned:
		if !strings.Contains(w, "connections are relayed already") {
			t.Errorf("warning %q", w)
		}
	}
	if _, err := over.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection over the cap was kept open")
	}
	if got := relayed.Load(); got != maxPublishConns {
		t.Fatalf("%d connections relayed, want the cap of %d", got, maxPublishConns)
	}
	// One ends: its slot takes a new connection (one accepted before
	// its relay has given the slot back is still over the cap: warned,
	// closed, tried again).
	clients[0].Close()
	for relayedNew := false; !relayedNew; {
		c := connect()
		clients = append(clients, c)
		select {
		case <-entered:
			relayedNew = true
		case <-warned:
		}
	}
	if got := relayed.Load(); got != maxPublishConns+1 {
		t.Fatalf("%d connections relayed after one ended, want %d", got, maxPublishConns+1)
	}
}
