package userstack

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Block records leave the event loop through a bounded queue, so that
// whatever Config.OnBlock does (write a JSON line to a file or a pipe that
// may stall, encode a status line) never runs on the loop, and a flood of
// refused flows (a SYN scan of a private range, thousands a second) costs
// the loop one non-blocking channel send per flow and no memory beyond
// the queue:
//
//   - the queue holds blockQueueLen records; a record that finds it full
//     is dropped;
//   - a token bucket of blockBurst tokens, refilled at BlockRecordRate a second
//     of Config.Now, admits records into it; a record without a token is
//     dropped;
//   - every dropped record is counted ([Stack.BlocksDropped]), so the
//     exit summary can say how many went unrecorded. Blocking itself is
//     never dropped: the flow is refused before its record is queued.
//
// The jail's sink (the kernel layer's refusals) records through the same
// queue ([Stack.RecordBlock]): one bucket, one count, for every block
// record of a sandbox.
//
// One goroutine (deliverBlocks) calls OnBlock for each queued record in
// order; Close lets it deliver what was queued before it returns.
const (
	blockQueueLen = 1024
	blockBurst    = 1024
	// BlockRecordRate is the records a second delivered to OnBlock,
	// sustained, after a burst of 1024.
	BlockRecordRate = 1000
)

// blockItem is a queued record, or (flushed not nil) a barrier that
// flushBlocks waits behind.
type blockItem struct {
	b       netpolicy.Block
	evict   bool // a UDP flow evicted at the cap, for OnEvict
	flushed chan struct{}
}

// blockQueue is the stack's side of the queue. Its records are held in a
// slice that grows as records come (a full queue is about 100 kB, most
// sandboxes never queue one) and is let go once a burst of more than
// blockQueueKeep records has been delivered.
type blockQueue struct {
	dropped       atomic.Uint64
	evictsDropped atomic.Uint64
	ready         chan struct{} // one token: records were queued
	// The token bucket and the queue. Flows are refused on the event
	// loop and on gVisor's dispatch path, so it is locked; the section is
	// a few arithmetic operations and an append, never a wait on
	// anything else.
	mu     sync.Mutex
	tokens float64
	last   time.Time
	items  []blockItem // queued from head on, oldest first
	head   int
	// Eviction records have a bucket and a bound of their own (see
	// recordEvict): a burst of evictBurst, then BlockRecordRate a second.
	evictTokens float64
	evictLast   time.Time
	evictQueued int
}

// evictBurst is the eviction records' burst, and the most of them queued
// at once: a flood of a few thousand new UDP flows is logged whole (each
// record ~200 bytes), a sustained one at BlockRecordRate.
const evictBurst = 4096

// blockQueueKeep: a queue drained with a backing array larger than this
// many records gives it up.
const blockQueueKeep = 16

func newBlockQueue() *blockQueue {
	return &blockQueue{ready: make(chan struct{}, 1), tokens: blockBurst, evictTokens: evictBurst}
}

// takeToken reports whether a record at now may be queued: it takes a
// token of a bucket of burst tokens refilled at BlockRecordRate a second,
// refilling it first. A clock that goes backwards refills nothing.
func takeToken(tokens *float64, last *time.Time, burst float64, now time.Time) bool {
	if !last.IsZero() && now.After(*last) {
		*tokens = min(burst, *tokens+now.Sub(*last).Seconds()*BlockRecordRate)
	}
	if last.IsZero() || now.After(*last) {
		*last = now
	}
	if *tokens < 1 {
		return false
	}
	*tokens--
	return true
}

// push queues it (q.mu held), moving the queued records to the front of
// the array first when it is full and they do not start there.
func (q *blockQueue) push(it blockItem) {
	if q.head > 0 && len(q.items) == cap(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, it)
}

// signal tells the deliverer that records were queued.
func (q *blockQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// offer queues b for OnBlock, or counts it dropped; it never blocks.
func (q *blockQueue) offer(b netpolicy.Block) { q.queue(b, false) }

// queue queues b for OnBlock (for OnEvict, evict), or counts it dropped;
// it never blocks.
func (q *blockQueue) queue(b netpolicy.Block, evict bool) {
	q.mu.Lock()
	var ok bool
	if evict {
		ok = q.evictQueued < evictBurst && takeToken(&q.evictTokens, &q.evictLast, evictBurst, b.Time)
	} else {
		ok = len(q.items)-q.head-q.evictQueued < blockQueueLen && takeToken(&q.tokens, &q.last, blockBurst, b.Time)
	}
	if ok {
		q.push(blockItem{b: b, evict: evict})
		if evict {
			q.evictQueued++
		}
	}
	q.mu.Unlock()
	switch {
	case ok:
		q.signal()
	case evict:
		q.evictsDropped.Add(1)
	default:
		q.dropped.Add(1)
	}
}

// pop takes the oldest queued item, if any.
func (q *blockQueue) pop() (blockItem, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return blockItem{}, false
	}
	it := q.items[q.head]
	q.items[q.head] = blockItem{}
	q.head++
	if it.evict {
		q.evictQueued--
	}
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
		if cap(q.items) > blockQueueKeep {
			q.items = nil
		}
	}
	return it, true
}

// RecordBlock records a refused flow as the stack records its own: b,
// its Time set from Config.Now (the rate's clock), goes through the
// bounded, rate-limited queue to Config.OnBlock, or is counted in
// [Stack.BlocksDropped]. It never blocks, and is safe from any
// goroutine. The jail's sink records its refusals with it. Call it
// before Close: a record given after may be neither delivered nor
// counted.
func (st *Stack) RecordBlock(b netpolicy.Block) {
	if st.cfg.OnBlock == nil {
		return
	}
	b.Time = st.cfg.Now()
	st.blocks.offer(b)
}

// deliverBlocks calls OnBlock for each queued record until the stack
// closes, then for those still queued.
func (st *Stack) deliverBlocks() {
	defer st.wg.Done()
	deliver := func(it blockItem) {
		if it.flushed != nil {
			close(it.flushed)
			return
		}
		switch {
		case it.evict:
			st.cfg.OnEvict(it.b)
		case st.cfg.OnBlock != nil:
			st.cfg.OnBlock(it.b)
		}
	}
	for {
		if it, ok := st.blocks.pop(); ok {
			deliver(it)
			continue
		}
		select {
		case <-st.blocks.ready:
		case <-st.ctx.Done():
			for {
				it, ok := st.blocks.pop()
				if !ok {
					return
				}
				deliver(it)
			}
		}
	}
}

// flushBlocks returns once every record queued before the call has been
// delivered to OnBlock (or the stack has closed). Tests use it; it may
// block, so never call it from the event loop.
func (st *Stack) flushBlocks() {
	if st.ctx.Err() != nil {
		return
	}
	done := make(chan struct{})
	st.blocks.mu.Lock()
	st.blocks.push(blockItem{flushed: done}) // not bounded: tests only
	st.blocks.mu.Unlock()
	st.blocks.signal()
	select {
	case <-done:
	case <-st.ctx.Done():
	}
}

// BlocksDropped returns how many block records were not delivered to
// Config.OnBlock because the queue was full or over its rate (the flows
// themselves were refused all the same).
func (st *Stack) BlocksDropped() uint64 { return st.blocks.dropped.Load() }

// recordEvict reports a UDP flow evicted at the flow cap to
// Config.OnEvict through the block records' queue, off the event loop,
// with a token bucket and a bound of its own (evictBurst, then
// BlockRecordRate a second): a flood of new flows evicts one flow per
// datagram, and each record is a line in the jail's block log. An
// eviction record the queue does not take is counted in
// [Stack.EvictRecordsDropped]; every eviction is counted in
// [Stack.UDPEvictions].
func (st *Stack) recordEvict(b netpolicy.Block) {
	st.evictions.Add(1)
	if st.cfg.OnEvict == nil {
		return
	}
	b.Time = st.cfg.Now()
	st.blocks.queue(b, true)
}

// UDPEvictions returns how many UDP flows were evicted at the flow cap,
// reported to OnEvict or not.
func (st *Stack) UDPEvictions() uint64 { return st.evictions.Load() }

// EvictRecordsDropped returns how many eviction records were not
// delivered to Config.OnEvict (the queue was full or over its rate).
func (st *Stack) EvictRecordsDropped() uint64 { return st.blocks.evictsDropped.Load() }
