package sshagent

import (
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/agent"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// A session binds each connection to a host key of its own making (one
// line on the caller's terminal each, one place in the exit summary
// each): the lines and the places are bounded, the count is not lost.
func TestRefusalFloodBounded(t *testing.T) {
	l := newLab(t)
	var mu sync.Mutex
	var lines []string
	p := l.policy(t, Config{})
	p.report = func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
	}
	const n = 200
	for i := 0; i < n; i++ {
		a := connect(t, p, l.backing)
		k := newKey(t)
		if err := bind(t, a, k, k.signer, sid(1), false); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil)); err == nil {
			t.Fatal("signed for a host key of the session's")
		}
	}
	mu.Lock()
	shown := len(lines)
	last := ""
	if shown > 0 {
		last = lines[shown-1]
	}
	mu.Unlock()
	if shown > maxShown+1 {
		t.Errorf("%d refusal lines on the caller's terminal for %d refusals, want at most %d", shown, n, maxShown+1)
	}
	if !strings.Contains(last, "counted, not shown") {
		t.Errorf("the last line does not say the rest are only counted: %q", last)
	}
	_, r := p.Counts()
	total := 0
	for _, v := range r {
		total += v
	}
	if len(r) > maxPlaces+1 || total != n || r[otherPlaces] == 0 {
		t.Errorf("%d places counted apart (want at most %d), %d refusals (want %d): %v", len(r), maxPlaces+1, total, n, len(r))
	}
	if s := p.Summary(); len(s) > 4096 {
		t.Errorf("the exit summary's line is %d bytes", len(s))
	}
}

// A session-bind whose signature does not verify is refused before it
// counts as a binding: a session sends them in a loop on one connection.
// Their lines are bounded with the refusals'.
func TestBadBindFloodBounded(t *testing.T) {
	l := newLab(t)
	var mu sync.Mutex
	var lines []string
	p := l.policy(t, Config{})
	p.report = func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
	}
	a := connect(t, p, l.backing)
	const n = 200
	for i := 0; i < n; i++ {
		// The allowed host's key, a signature by another.
		if err := bind(t, a, l.forge, l.other.signer, sid(1), false); err == nil {
			t.Fatal("a forged session-bind was taken")
		}
	}
	mu.Lock()
	shown := len(lines)
	mu.Unlock()
	if shown > maxShown+1 {
		t.Errorf("%d lines on the caller's terminal for %d forged session-binds, want at most %d", shown, n, maxShown+1)
	}
}

// countingAgent is the caller's agent, counting the connections open to
// it at once (the most seen).
func countingAgent(t *testing.T, a agent.Agent) (sock string, peak func() int) {
	t.Helper()
	sock = t.TempDir() + "/backing.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	open, most := 0, 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open++
			most = max(most, open)
			mu.Unlock()
			go func() {
				_ = agent.ServeAgent(a, c)
				c.Close()
				mu.Lock()
				open--
				mu.Unlock()
			}()
		}
	}()
	return sock, func() int {
		mu.Lock()
		defer mu.Unlock()
		return most
	}
}

// A session opens connection after connection to the agent and keeps
// them: each held one to the caller's own agent (whose descriptors are
// the caller's, outside every sandbox) and a goroutine of the launcher.
// At most MaxConns are served at once; the rest are closed, and once
// the session lets go, new connections are served again.
func TestServerConnsBounded(t *testing.T) {
	l := newLab(t)
	backing, peak := countingAgent(t, l.backing)
	var mu sync.Mutex
	var lines []string
	p := l.policy(t, Config{})
	p.report = func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
	}
	s, err := Listen(p, backing)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 3 * MaxConns
	var conns []net.Conn
	served := 0
	for i := 0; i < n; i++ {
		c, err := net.Dial("unix", s.Socket)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := agent.NewClient(c).List(); err == nil {
			served++
		}
	}
	if served > MaxConns || peak() > MaxConns {
		t.Errorf("%d of %d connections served at once, %d connections to the caller's agent at once; want at most %d", served, n, peak(), MaxConns)
	}
	if served < MaxConns {
		t.Errorf("only %d connections served, want %d", served, MaxConns)
	}
	mu.Lock()
	nl := len(lines)
	mu.Unlock()
	if nl != 1 {
		t.Errorf("%d lines for the connections closed, want 1", nl)
	}
	for _, c := range conns {
		c.Close()
	}
	// The server notices the closes on its own goroutines: a new
	// connection is served once it has.
	for i := 0; ; i++ {
		c, err := net.Dial("unix", s.Socket)
		if err != nil {
			t.Fatal(err)
		}
		_, err = agent.NewClient(c).List()
		c.Close()
		if err == nil {
			break
		}
		if i == 1000 {
			t.Fatalf("no connection served after the others closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A sandbox that sees the host's temporary directory (--bind /tmp)
// reaches the agent sockets of launchers started after it: with the
// sandbox's user namespace set, a peer in any other is refused before
// anything is served, and one in it is served.
func TestServerPeerNamespace(t *testing.T) {
	l := newLab(t)
	var mu sync.Mutex
	var lines []string
	p := l.policy(t, Config{})
	p.report = func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
	}
	s, err := Listen(p, testutil.ServeAgent(t, l.backing))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	own, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	list := func() error {
		c, err := net.Dial("unix", s.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = agent.NewClient(c).List()
		return err
	}
	// This test's process plays the other sandbox's: the sandbox's
	// namespace is another than its own.
	var want atomic.Value
	want.Store("user:[1]")
	s.SetSandboxNS(func() string { return want.Load().(string) })
	if err := list(); err == nil {
		t.Fatal("a peer in another user namespace than the sandbox's was served")
	}
	want.Store("") // the sandbox's init not known yet
	if err := list(); err == nil {
		t.Fatal("a peer was served before the sandbox's namespace was known")
	}
	mu.Lock()
	got := strings.Join(lines, "\n")
	mu.Unlock()
	if !strings.Contains(got, "refused a connection from outside this sandbox") {
		t.Errorf("no line for the refused peer: %q", got)
	}
	want.Store(own)
	if err := list(); err != nil {
		t.Fatalf("a peer in the sandbox's namespace: %v", err)
	}
}
