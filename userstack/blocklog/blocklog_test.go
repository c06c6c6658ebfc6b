package blocklog

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// The queue holds no records' memory until records come, and gives a
// burst's back once it is delivered: a sandbox that never has a flow
// refused does not keep a full queue's array (about 100 kB) for its
// life, nor does one after a flood.
func TestQueueGrowsOnDemand(t *testing.T) {
	q := New()
	if c := cap(q.items); c != 0 {
		t.Fatalf("a new queue holds room for %d records", c)
	}
	now := time.Unix(1, 0)
	const n = 3 * keep
	for i := range n {
		q.Offer(netpolicy.Block{Time: now, Rule: strconv.Itoa(i)})
	}
	if got := len(q.items) - q.head; got != n {
		t.Fatalf("%d records queued, want %d", got, n)
	}
	for i := range n {
		it, ok := q.pop()
		if !ok || it.b.Rule != strconv.Itoa(i) {
			t.Fatalf("record %d: %+v, %v", i, it.b, ok)
		}
	}
	if _, ok := q.pop(); ok {
		t.Fatal("a record popped from an empty queue")
	}
	if c := cap(q.items); c > keep {
		t.Fatalf("a drained queue keeps room for %d records", c)
	}
	// Two in, one out, then drained: the records stay in order while the
	// array is reused and compacted.
	var model []string
	next := 0
	for range 4 * keep {
		for range 2 {
			r := strconv.Itoa(next)
			next++
			q.Offer(netpolicy.Block{Time: now, Rule: r})
			model = append(model, r)
		}
		it, ok := q.pop()
		if !ok || it.b.Rule != model[0] {
			t.Fatalf("popped %q (%v), want %q", it.b.Rule, ok, model[0])
		}
		model = model[1:]
	}
	for _, want := range model {
		if it, ok := q.pop(); !ok || it.b.Rule != want {
			t.Fatalf("popped %q (%v), want %q", it.b.Rule, ok, want)
		}
	}
	if c := cap(q.items); c > keep {
		t.Fatalf("a drained queue keeps room for %d records", c)
	}
}

// collector is a consumer that records what Run hands it.
type collector struct {
	mu     sync.Mutex
	blocks []string
	evicts []string
}

func (c *collector) deliver(b netpolicy.Block, evict bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if evict {
		c.evicts = append(c.evicts, b.Rule)
	} else {
		c.blocks = append(c.blocks, b.Rule)
	}
}

func (c *collector) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.blocks), len(c.evicts)
}

// run starts Run with a collector; the returned stop ends it and waits.
func run(t *testing.T, l *Log) (*collector, context.Context, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{}
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx, c.deliver) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return c, ctx, stop
}

// With no consumer running, a flood keeps the queue's bound and counts
// the rest; the ones kept are delivered in order once it runs. The
// clock advances a millisecond a record, the sustained rate, so the
// bound is what is tested here.
func TestFloodIsBoundedAndCounted(t *testing.T) {
	l := New()
	now := time.Unix(1, 0)
	const n = 3 * QueueLen
	for i := range n {
		now = now.Add(time.Millisecond)
		l.Offer(netpolicy.Block{Time: now, Rule: strconv.Itoa(i)})
	}
	if d := l.Dropped(); d != n-QueueLen {
		t.Fatalf("%d dropped, want %d", d, n-QueueLen)
	}
	c, ctx, _ := run(t, l)
	l.Flush(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.blocks) != QueueLen {
		t.Fatalf("%d delivered, want %d", len(c.blocks), QueueLen)
	}
	for i, r := range c.blocks {
		if r != strconv.Itoa(i) {
			t.Fatalf("record %d is %q: out of order", i, r)
		}
	}
}

// Records are admitted at Rate after a burst, by the records' own
// clock; a clock that goes backwards refills nothing.
func TestRateLimit(t *testing.T) {
	l := New()
	c, ctx, _ := run(t, l)
	now := time.Unix(1, 0)
	for range 2 * Burst {
		l.Offer(netpolicy.Block{Time: now})
	}
	l.Flush(ctx)
	if got, _ := c.counts(); got != Burst || l.Dropped() != Burst {
		t.Fatalf("standing clock: %d delivered, %d dropped; want %d and %d", got, l.Dropped(), Burst, Burst)
	}
	for range 2 * Rate {
		l.Offer(netpolicy.Block{Time: now.Add(-time.Hour)})
	}
	l.Flush(ctx)
	if got, _ := c.counts(); got != Burst {
		t.Fatalf("a clock gone backwards refilled the bucket: %d delivered", got)
	}
	for range 2 * Rate {
		l.Offer(netpolicy.Block{Time: now.Add(time.Second)})
	}
	l.Flush(ctx)
	if got, _ := c.counts(); got != Burst+Rate {
		t.Fatalf("a second later: %d delivered in all, want %d", got, Burst+Rate)
	}
}

// Eviction records have their own bucket and bound: a flood of them
// neither takes the block records' tokens nor counts as block drops.
func TestEvictsApart(t *testing.T) {
	l := New()
	now := time.Unix(1, 0)
	for range EvictBurst + 100 {
		l.OfferEvict(netpolicy.Block{Time: now})
	}
	if d, e := l.Dropped(), l.EvictsDropped(); d != 0 || e != 100 {
		t.Fatalf("dropped %d blocks and %d evictions, want 0 and 100", d, e)
	}
	for range QueueLen {
		l.Offer(netpolicy.Block{Time: now})
	}
	if d := l.Dropped(); d != 0 {
		t.Fatalf("%d block records dropped behind queued evictions", d)
	}
	c, ctx, _ := run(t, l)
	l.Flush(ctx)
	if b, e := c.counts(); b != QueueLen || e != EvictBurst {
		t.Fatalf("delivered %d blocks and %d evictions, want %d and %d", b, e, QueueLen, EvictBurst)
	}
}

// When its context ends Run delivers what was queued before returning,
// and Flush after the end returns at once.
func TestRunDrainsAtEnd(t *testing.T) {
	l := New()
	now := time.Unix(1, 0)
	for i := range 10 {
		l.Offer(netpolicy.Block{Time: now, Rule: strconv.Itoa(i)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &collector{}
	l.Run(ctx, c.deliver)
	if b, _ := c.counts(); b != 10 {
		t.Fatalf("%d delivered at the end, want 10", b)
	}
	l.Flush(ctx) // must not block
}
