package userstack

import (
	"net/netip"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// sentFootprint is the memory f's unacknowledged host data really takes:
// each chunk's buffer (its capacity; a pooled one whole) and the slots of
// the slice that holds them.
func sentFootprint(f *tcpFlow) (footprint, charged int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	footprint = cap(f.sent) * int(unsafe.Sizeof(tcpChunk{}))
	for _, c := range f.sent {
		if c.pooled != nil {
			footprint += cap(*c.pooled)
		} else {
			footprint += cap(c.data)
		}
		charged += c.cost
	}
	return footprint, charged
}

// A remote end that sends its data a byte at a time (each write read on
// its own) to a sandbox that never acknowledges: every byte became a
// chunk of its own in the flow's unacknowledged data, charged one byte of
// the memory budget while it took an 8-byte buffer and a 40-byte slot
// (seen: 20,000 bytes charged for 1.09 MB held, ~55 times over).
// What each chunk costs the budget now covers what it holds, so
// MaxRelayMemory bounds the memory and not only the payload; and once
// the sandbox acknowledges most of it, the slice shrinks with it.
func TestRelayMemoryBudgetCoversSmallChunks(t *testing.T) {
	const budget = 256 << 10
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.ep = channel.New(1<<14, 65520, "")
	relayClock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} // never moves: no retransmission, no give-up
	st, err := New(h.ep, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: h.dialer, MaxRelayMemory: budget,
		Now: h.clock.now, NoJanitor: true, Logf: t.Logf, tcpClock: relayClock.now})
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	t.Cleanup(func() {
		st.Close()
		h.ep.Close()
	})
	c := handshake(t, h, netip.AddrPortFrom(jail4, 47100), netip.MustParseAddrPort("203.0.113.70:80"))
	f := c.flow(t)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const writes = 4000
	deadline := time.Now().Add(20 * time.Second) // failsafe, not a timing assertion
	sent := 0
	for sent < writes && time.Now().Before(deadline) {
		// A failsafe too: once the relay reads no more, a blocking write
		// would wait for ever (each one-byte write takes far more of the
		// socket's buffer than a byte).
		if err := c.d.peer.SetWriteDeadline(deadline); err != nil {
			t.Fatal(err)
		}
		if _, err := c.d.peer.Write([]byte{'x'}); err != nil {
			t.Fatal(err)
		}
		waiting := false
		for time.Now().Before(deadline) {
			f.mu.Lock()
			n := int(f.iss.Add(1).Size(f.sndNxt))
			waiting = f.has(waitingMem)
			f.mu.Unlock()
			if n > sent || waiting {
				sent = n
				break
			}
			h.ep.Drain()
			runtime.Gosched()
		}
		if waiting || h.st.memFree() <= 0 {
			// The budget is spent (what is left is less than the next
			// segment's charge): the relay reads no more.
			break
		}
		h.ep.Drain() // the sandbox reads its link, and never acknowledges
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	footprint, charged := sentFootprint(f)
	now, _ := h.st.RelayMemory()
	t.Logf("%d bytes sent unacknowledged in %d chunks: %d bytes held, %d charged (budget now %d); heap grew %d",
		sent, len(f.sent), footprint, charged, now, int64(after.HeapAlloc)-int64(before.HeapAlloc))
	if footprint > charged {
		t.Fatalf("the flow's unacknowledged data holds %d bytes and is charged %d of the budget", footprint, charged)
	}
	h.checkBudget(t, budget)
	// The sandbox acknowledges all but the last 100 bytes.
	h.send(tcpSeg{src: c.src, dst: c.dst, flags: header.TCPFlagAck, seq: c.nxt, ack: c.iss + 1 + uint32(sent-100), wnd: 0xffff}.bytes())
	footprint, charged = sentFootprint(f)
	t.Logf("after the ACK: %d bytes held, %d charged", footprint, charged)
	if slack := 256 * int(unsafe.Sizeof(tcpChunk{})); footprint > charged+slack {
		t.Fatalf("after most was acknowledged, the flow's unacknowledged data holds %d bytes and is charged %d", footprint, charged)
	}
}
