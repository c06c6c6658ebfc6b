package userstack

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/blocklog"
)

// The queue's bounds (package userstack/blocklog), as the stack's tests
// name them.
const (
	blockQueueLen = blocklog.QueueLen
	blockBurst    = blocklog.Burst
	evictBurst    = blocklog.EvictBurst
)

// floodHarness is a harness whose OnBlock is onBlock (the usual one
// records into h.blocks).
func floodHarness(t *testing.T, onBlock func(netpolicy.Block)) *harness {
	t.Helper()
	h := &harness{dialer: newFakeDialer(), blocks: &blocks{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: h.dialer, Now: h.clock.now})
	h.st.cfg.OnBlock = onBlock // before any flow: the loop reads it only when it refuses one
	return h
}

// synFlood sends n SYNs to a private address, each from its own port,
// and reads the RST each one gets; step advances the fake clock before
// each.
func synFlood(t *testing.T, h *harness, n int, step time.Duration) {
	t.Helper()
	dst := netip.MustParseAddrPort("10.1.2.3:22")
	for i := range n {
		h.clock.add(step)
		src := netip.AddrPortFrom(jail4, uint16(20000+i%40000))
		h.send(tcpSeg{src: src, dst: dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
		if o := readOut(t, h.ep); o.proto != header.TCPProtocolNumber || !o.tcp().Flags().Contains(header.TCPFlagRst) {
			t.Errorf("SYN %d: reply protocol %d, want a RST", i, o.proto)
			return
		}
	}
}

// A flood of refused SYNs while the block consumer is stuck (a block log
// on a pipe nobody reads) neither stalls the event loop (every SYN still
// gets its RST) nor grows memory: the records beyond the queue's bound
// are dropped and counted, and the ones kept are delivered, in order,
// once the consumer moves again. The clock advances a millisecond a SYN,
// the sustained rate, so the queue's bound is what is tested here.
func TestBlockFloodIsBoundedAndCounted(t *testing.T) {
	release := make(chan struct{})
	var delivered atomic.Int64
	h := floodHarness(t, func(netpolicy.Block) {
		<-release
		delivered.Add(1)
	})
	var once atomic.Bool
	free := func() {
		if once.CompareAndSwap(false, true) {
			close(release)
		}
	}
	t.Cleanup(free) // before the stack's Close (cleanups run last first)

	const n = 3 * blockQueueLen
	done := make(chan struct{})
	go func() {
		defer close(done)
		synFlood(t, h, n, time.Millisecond)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the SYN flood stalled behind the stuck block consumer: records are delivered on the event loop")
	}
	dropped := h.st.BlocksDropped()
	kept := n - int(dropped)
	// Queued, plus the one the consumer holds (if it took one in time).
	if kept < blockQueueLen || kept > blockQueueLen+1 {
		t.Fatalf("%d of %d records kept (%d dropped), want the queue's %d (or one more, held by the consumer)", kept, n, dropped, blockQueueLen)
	}
	free()
	h.st.flushBlocks()
	if got := delivered.Load(); got != int64(kept) {
		t.Fatalf("%d records delivered, want the %d kept", got, kept)
	}
}

// Records are admitted at the sustained rate after a burst: with the
// clock standing still, a flood gets its burst recorded and the rest
// counted; a second later, another second's worth.
func TestBlockRecordsAreRateLimited(t *testing.T) {
	var delivered atomic.Int64
	h := floodHarness(t, func(netpolicy.Block) { delivered.Add(1) })
	const n = 2 * blockBurst
	synFlood(t, h, n, 0)
	h.st.flushBlocks()
	if got, d := delivered.Load(), h.st.BlocksDropped(); got != blockBurst || d != n-blockBurst {
		t.Fatalf("standing clock: %d delivered, %d dropped; want the burst %d and %d", got, d, blockBurst, n-blockBurst)
	}
	h.clock.add(time.Second)
	synFlood(t, h, n, 0)
	h.st.flushBlocks()
	if got := delivered.Load() - blockBurst; got != BlockRecordRate {
		t.Fatalf("a second later: %d more delivered, want %d", got, BlockRecordRate)
	}
}
