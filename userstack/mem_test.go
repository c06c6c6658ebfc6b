package userstack

import (
	"bytes"
	"io"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// streamAt is bytes [pos, pos+n) of the test stream every flow carries.
func streamAt(pos, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		p := pos + i
		b[i] = byte(p*7 + p/251)
	}
	return b
}

// newBudgetHarness is a harness whose stack has the given memory budget,
// on a link whose queue holds every segment a burst of all flows sends
// (the usual 64 would drop some, and the tests would wait on
// retransmissions).
func newBudgetHarness(t *testing.T, budget int) *harness {
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.ep = channel.New(1<<14, 65520, "")
	st, err := New(h.ep, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: h.dialer, MaxRelayMemory: budget, Now: h.clock.now, NoJanitor: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	t.Cleanup(func() {
		st.Close()
		h.ep.Close()
	})
	return h
}

func (h *harness) checkBudget(t *testing.T, budget int) {
	t.Helper()
	if now, peak := h.st.RelayMemory(); now > int64(budget) || peak > int64(budget) || now < 0 {
		t.Fatalf("relay memory %d now, %d at its peak; budget %d", now, peak, budget)
	}
}

// Issues 12 and 15: many connections whose host never reads, and a
// sandbox that sends as if the window were endless: the relay holds no
// more than its budget in all (what does not fit is not acknowledged),
// the window it advertises shrinks to what is free, and once the hosts
// read, every byte the relay acknowledged arrives, in order, and the
// budget is all given back.
func TestRelayMemoryBudgetWithSlowHosts(t *testing.T) {
	const budget, flows, chunk = 1 << 20, 12, 32 << 10
	h := newBudgetHarness(t, budget)
	var cs []*conn
	for i := range flows {
		cs = append(cs, handshake(t, h, netip.AddrPortFrom(jail4, uint16(47000+i)), netip.MustParseAddrPort("203.0.113.70:80")))
	}
	took := make([]int, flows)
	for round := 0; ; round++ {
		if round > 10000 {
			t.Fatal("the relay never stopped taking data from hosts that do not read")
		}
		progress := false
		for i, c := range cs {
			f := c.flow(t)
			f.mu.Lock()
			nxt := uint32(f.rcvNxt)
			f.mu.Unlock()
			h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck | header.TCPFlagPsh, seq: nxt, ack: c.iss + 1, payload: streamAt(int(nxt-1001), chunk)}.bytes())
			f.mu.Lock()
			n := int(uint32(f.rcvNxt) - nxt)
			f.mu.Unlock()
			took[i] += n
			progress = progress || n > 0
			h.checkBudget(t, budget)
			h.ep.Drain()
		}
		if !progress {
			break
		}
	}
	now, _ := h.st.RelayMemory()
	if now < budget/2 {
		t.Fatalf("the relay holds %d bytes with every host stalled: the budget (%d) was never under pressure", now, budget)
	}
	// The window each flow now advertises is no more than what is free.
	c := cs[0]
	c.at(1001+uint32(took[0])-1, header.TCPFlagAck, nil) // a keepalive: answered at once
	if w := int(c.nextAck(t).WindowSize()); w > budget-int(now) {
		t.Errorf("window %d advertised with %d of the budget free", w, budget-int(now))
	}
	// The hosts read: everything acknowledged arrives, in order.
	for i, c := range cs {
		got := make([]byte, took[i])
		_ = c.d.peer.SetReadDeadline(time.Now().Add(20 * time.Second)) // failsafe
		if _, err := io.ReadFull(c.d.peer, got); err != nil {
			t.Fatalf("flow %d: host read %v", i, err)
		}
		if !bytes.Equal(got, streamAt(0, took[i])) {
			t.Fatalf("flow %d: the host got other bytes than the sandbox sent", i)
		}
		h.ep.Drain()
	}
	for range 2000 {
		if now, _ := h.st.RelayMemory(); now == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if now, _ := h.st.RelayMemory(); now != 0 {
		t.Fatalf("%d bytes of the budget still held after the hosts read everything", now)
	}
	h.checkBudget(t, budget)
}

// The other way: hosts that send much to a sandbox that does not
// acknowledge. The relay reads the host sockets only while the budget has
// room; acknowledgements give it back and reading resumes (the wake-up),
// and every byte arrives in order.
func TestRelayMemoryBudgetWithASlowSandbox(t *testing.T) {
	const budget, flows, size = 256 << 10, 12, 100 << 10
	h := newBudgetHarness(t, budget)
	var cs []*conn
	byPort := map[uint16]int{}
	for i := range flows {
		c := handshake(t, h, netip.AddrPortFrom(jail4, uint16(47100+i)), netip.MustParseAddrPort("203.0.113.71:80"))
		cs = append(cs, c)
		byPort[c.src.Port()] = i
	}
	for _, c := range cs {
		go func() { _, _ = c.d.peer.Write(streamAt(0, size)) }()
	}
	got := make([][]byte, flows)
	for done, steps := 0, 0; done < flows; steps++ {
		if steps > 200000 {
			t.Fatalf("only %d of %d flows got everything", done, flows)
		}
		o := readOut(t, h.ep)
		h.checkBudget(t, budget)
		i, ok := byPort[o.tcp().DestinationPort()]
		if !ok {
			t.Fatalf("a segment to port %d", o.tcp().DestinationPort())
		}
		c := cs[i]
		p := o.tcpPayload()
		if len(p) == 0 || o.tcp().SequenceNumber() != c.iss+1+uint32(len(got[i])) {
			continue // an ACK, or out of order: the relay sends it again
		}
		got[i] = append(got[i], p...)
		if len(got[i]) == size {
			done++
		}
		c.h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1 + uint32(len(got[i]))}.bytes())
	}
	for i := range got {
		if !bytes.Equal(got[i], streamAt(0, size)) {
			t.Fatalf("flow %d: the sandbox got other bytes than the host sent", i)
		}
	}
	if _, peak := h.st.RelayMemory(); peak < budget/2 {
		t.Fatalf("peak %d: the budget (%d) was never under pressure", peak, budget)
	}
}

// A flow held back by the budget with nothing in flight (so no
// acknowledgement of its own will come) is woken when another flow gives
// memory back, and reads its host.
func TestRelayMemoryWakesAFlowHeldBack(t *testing.T) {
	const budget = 60000
	h := newBudgetHarness(t, budget)
	a := handshake(t, h, netip.AddrPortFrom(jail4, 47200), netip.MustParseAddrPort("203.0.113.72:80"))
	b := handshake(t, h, netip.AddrPortFrom(jail4, 47201), netip.MustParseAddrPort("203.0.113.72:81"))
	go func() { _, _ = a.d.peer.Write(streamAt(0, 70000)) }()
	// a takes the whole budget (its window, 65535, is wider): all of it
	// but less than the least a read takes (each chunk is charged its
	// overhead, tcpChunkOverhead, with its bytes).
	af := a.flow(t)
	// A failsafe, not a timing assertion: under a loaded -race run the
	// relay can take seconds to fill the budget.
	deadline := time.Now().Add(20 * time.Second)
	var now int64
	for {
		// Under a's lock: not in the middle of a read, whose grant
		// takes all that is free before it gives the rest back.
		af.mu.Lock()
		now, _ = h.st.RelayMemory()
		held := af.has(waitingMem) && budget-now < int64(tcpReadLeast)
		af.mu.Unlock()
		if held || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.ep.Drain()
	af.mu.Lock()
	got := int(uint32(af.sndNxt) - a.iss - 1)
	af.mu.Unlock()
	if now > budget || budget-now >= int64(tcpReadLeast) {
		t.Fatalf("relay memory %d, want the whole budget %d", now, budget)
	}
	// b's host speaks: nothing is free, so b waits.
	if _, err := b.d.peer.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	bf := b.flow(t)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		bf.mu.Lock()
		waiting := bf.has(waitingMem)
		bf.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	bf.mu.Lock()
	waiting, sent := bf.has(waitingMem), uint32(bf.sndNxt)-b.iss-1
	if waiting && sent == 0 {
		// Its retransmission timer, still armed from the handshake,
		// would look at it once more: only the wake-up may.
		bf.stopRTO()
	}
	bf.mu.Unlock()
	// Failed outside the flow's lock: the cleanup's Close takes it (a
	// Fatalf under it hung the test until go test's timeout).
	if !waiting || sent != 0 {
		t.Fatalf("b: waiting %v, %d bytes sent; want it held back", waiting, sent)
	}
	// The sandbox acknowledges a's data: b reads and sends.
	h.send(tcpSeg{src: a.src, dst: a.dst, flags: header.TCPFlagAck, seq: a.nxt, ack: a.iss + 1 + uint32(got)}.bytes())
	for {
		o := readOut(t, h.ep)
		if o.tcp().DestinationPort() == b.src.Port() && len(o.tcpPayload()) > 0 {
			if string(o.tcpPayload()) != "hello" {
				t.Fatalf("b sent %q", o.tcpPayload())
			}
			break
		}
	}
}

// A budget larger than a window's 32 bits narrows nothing.
func TestRelayMemoryLargeBudget(t *testing.T) {
	h := newBudgetHarness(t, 1<<40)
	c := handshake(t, h, netip.AddrPortFrom(jail4, 47300), netip.MustParseAddrPort("203.0.113.73:80"))
	f := c.flow(t)
	f.mu.Lock()
	w, short, _ := f.windowLimit()
	f.mu.Unlock()
	if short || w != 0xffff {
		t.Fatalf("window %d (narrowed %v) under a 1 TiB budget, want 65535 (no window scale)", w, short)
	}
}
