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
	flushed chan struct{}
}

// blockQueue is the stack's side of the queue.
type blockQueue struct {
	ch      chan blockItem
	dropped atomic.Uint64
	// The token bucket. Flows are refused on the event loop and on
	// gVisor's dispatch path, so it is locked; the section is a few
	// arithmetic operations, never a wait on anything else.
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newBlockQueue() *blockQueue {
	return &blockQueue{ch: make(chan blockItem, blockQueueLen), tokens: blockBurst}
}

// take reports whether a record at now may be queued (a token was
// available), refilling the bucket first. A clock that goes backwards
// refills nothing.
func (q *blockQueue) take(now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.last.IsZero() && now.After(q.last) {
		q.tokens = min(blockBurst, q.tokens+now.Sub(q.last).Seconds()*BlockRecordRate)
	}
	if q.last.IsZero() || now.After(q.last) {
		q.last = now
	}
	if q.tokens < 1 {
		return false
	}
	q.tokens--
	return true
}

// offer queues b for OnBlock, or counts it dropped; it never blocks.
func (q *blockQueue) offer(b netpolicy.Block) {
	if !q.take(b.Time) {
		q.dropped.Add(1)
		return
	}
	select {
	case q.ch <- blockItem{b: b}:
	default:
		q.dropped.Add(1)
	}
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
		if st.cfg.OnBlock != nil {
			st.cfg.OnBlock(it.b)
		}
	}
	for {
		select {
		case it := <-st.blocks.ch:
			deliver(it)
		case <-st.ctx.Done():
			for {
				select {
				case it := <-st.blocks.ch:
					deliver(it)
				default:
					return
				}
			}
		}
	}
}

// flushBlocks returns once every record queued before the call has been
// delivered to OnBlock (or the stack has closed). Tests use it; it may
// block, so never call it from the event loop.
func (st *Stack) flushBlocks() {
	done := make(chan struct{})
	select {
	case st.blocks.ch <- blockItem{flushed: done}:
	case <-st.ctx.Done():
		return
	}
	select {
	case <-done:
	case <-st.ctx.Done():
	}
}

// BlocksDropped returns how many block records were not delivered to
// Config.OnBlock because the queue was full or over its rate (the flows
// themselves were refused all the same).
func (st *Stack) BlocksDropped() uint64 { return st.blocks.dropped.Load() }
