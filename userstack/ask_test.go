package userstack

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
)

// askHarness is a names harness in the ask mode, with a real broker
// whose timeouts never fire.
func askHarness(t *testing.T) (*namesHarness, *ask.Broker) {
	t.Helper()
	b := ask.New(ask.Config{Sandbox: "t", AfterFunc: func(time.Duration, func()) func() bool { return func() bool { return true } }})
	t.Cleanup(b.Close)
	h := newNamesHarnessWith(t, map[string][]uint16{"api.test": nil}, NameConfig{PeekTimeout: 20 * time.Millisecond}, func(c *Config) { c.Ask = b.Ask })
	return h, b
}

// waitPending polls the broker for a request for name (a failsafe, not a
// timing assertion).
func waitPending(t *testing.T, b *ask.Broker, name string) ask.Request {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, q := range b.List() {
			if q.Name == name {
				return q
			}
		}
	}
	t.Fatalf("no request for %s", name)
	return ask.Request{}
}

// In the ask mode a name off the allowlist resolves at once to a
// synthetic address with nothing asked upstream; a SYN to it is held
// (no answer, a request made) until approved once, when the held SYN is
// re-delivered and the name resolved and dialed; a denied one gets its
// RST at the decision, recorded.
func TestAskHoldsNameFlow(t *testing.T) {
	h, b := askHarness(t)
	h.zone.addA("pypi.test", "203.0.113.30")
	h.zone.addA("evil.test", "203.0.113.31")
	addrs := answerAddrs(t, h.query(t, "pypi.test.", dnsmessage.TypeA), "pypi.test.")
	if len(addrs) != 1 || !DefaultPool4.Contains(addrs[0]) {
		t.Fatalf("pypi.test answered %v, want one synthetic address", addrs)
	}
	if q := h.zone.asked(); len(q) != 0 {
		t.Fatalf("asked upstream before any approval: %v", q)
	}
	src := netip.AddrPortFrom(jail4, 46000)
	dst := netip.AddrPortFrom(addrs[0], 443)
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	q := waitPending(t, b, "pypi.test")
	if q.Port != 443 || q.Proto != "tcp" || q.Held != 1 {
		t.Fatalf("request %+v", q)
	}
	// The retransmitted SYN joins it.
	h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
	h.zone.none(t)
	if q := h.zone.asked(); len(q) != 0 {
		t.Fatalf("asked upstream while held: %v", q)
	}
	if _, err := b.Approve(q.ID, ask.Once); err != nil {
		t.Fatal(err)
	}
	d := h.zone.next(t)
	if d.address != "203.0.113.30:443" {
		t.Fatalf("dialed %s", d.address)
	}
	synack := readOut(t, h.ep)
	if synack.proto != header.TCPProtocolNumber || synack.tcp().Flags() != header.TCPFlagSyn|header.TCPFlagAck || synack.src != addrs[0] {
		t.Fatalf("after approval: %v from %v, want SYN|ACK", synack.tcp().Flags(), synack.src)
	}
	d.peer.Close()

	// Denied: the held SYN gets its RST when the decision comes.
	evil := answerAddrs(t, h.query(t, "evil.test.", dnsmessage.TypeA), "evil.test.")[0]
	src2 := netip.AddrPortFrom(jail4, 46001)
	h.send(tcpSeg{src: src2, dst: netip.AddrPortFrom(evil, 443), flags: header.TCPFlagSyn, seq: 1000}.bytes())
	q = waitPending(t, b, "evil.test")
	if _, err := b.Deny(q.ID); err != nil {
		t.Fatal(err)
	}
	h.waitRST(t)
	h.zone.none(t)
	found := false
	for _, bl := range h.blocks.list() {
		if bl.Name == "evil.test" && strings.Contains(bl.Rule, "ask: denied") {
			found = true
		}
	}
	if !found {
		t.Errorf("the denied flow is not recorded: %+v", h.blocks.list())
	}
	for _, a := range h.zone.asked() {
		if strings.Contains(a, "evil") {
			t.Errorf("asked upstream for the denied name: %v", h.zone.asked())
		}
	}
}

// A held SYN's copy counts in the relay's memory budget while it is held
// (once per flow: a retransmission joining the request keeps none), and
// is given back at the decision.
func TestAskHeldMemoryCharged(t *testing.T) {
	h, b := askHarness(t)
	syn := answerAddrs(t, h.query(t, "mem.test.", dnsmessage.TypeA), "mem.test.")[0]
	src := netip.AddrPortFrom(jail4, 47000)
	seg := tcpSeg{src: src, dst: netip.AddrPortFrom(syn, 443), flags: header.TCPFlagSyn, seq: 1000}
	h.send(seg.bytes())
	q := waitPending(t, b, "mem.test")
	h.send(seg.bytes()) // retransmitted (delivered synchronously, as the first)
	now, _ := h.st.RelayMemory()
	if now != heldCost+header.TCPMinimumSize {
		t.Fatalf("relay memory while held: %d, want %d (one copy)", now, heldCost+header.TCPMinimumSize)
	}
	if _, err := b.Deny(q.ID); err != nil {
		t.Fatal(err)
	}
	h.waitRST(t)
	if now, _ := h.st.RelayMemory(); now != 0 {
		t.Fatalf("relay memory after the decision: %d, want 0", now)
	}
}
