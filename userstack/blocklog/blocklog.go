// Package blocklog is the bounded queue that block records (refused
// flows, and UDP flows evicted at the flow cap) take from the egress
// stack's event loop to their consumer.
//
// Whatever the consumer does with a record (write a JSON line to a file
// or a pipe that may stall, encode a status line) never runs on the
// producer's path, and a flood of refused flows (a SYN scan of a private
// range, thousands a second) costs the producer one locked append per
// record and no memory beyond the queue:
//
//   - the queue holds QueueLen block records; a record that finds it full
//     is dropped;
//   - a token bucket of Burst tokens, refilled at Rate a second of the
//     records' own Time (the caller's clock), admits records into it; a
//     record without a token is dropped;
//   - every dropped record is counted ([Log.Dropped]), so the exit
//     summary can say how many went unrecorded. Blocking itself is never
//     dropped: the flow is refused before its record is offered.
//
// Eviction records ([Log.OfferEvict]) have a bucket and a bound of their
// own: a burst of EvictBurst, then Rate a second, counted apart
// ([Log.EvictsDropped]).
//
// One goroutine ([Log.Run]) hands each queued record, in order, to the
// consumer; when its context ends it delivers what was queued before it
// returns. The package knows nothing of the stack: no socket, no clock of
// its own.
package blocklog

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

const (
	// QueueLen is the most block records queued at once.
	QueueLen = 1024
	// Burst is the block records' token bucket's size.
	Burst = 1024
	// Rate is the records a second delivered, sustained, after a burst.
	Rate = 1000
	// EvictBurst is the eviction records' burst, and the most of them
	// queued at once: a flood of a few thousand new UDP flows is logged
	// whole (each record ~200 bytes), a sustained one at Rate.
	EvictBurst = 4096
)

// keep: a queue drained with a backing array larger than this many
// records gives it up.
const keep = 16

// item is a queued record, or (flushed not nil) a barrier that Flush
// waits behind.
type item struct {
	b       netpolicy.Block
	evict   bool // a UDP flow evicted at the cap
	flushed chan struct{}
}

// Log is the queue. Its records are held in a slice that grows as records
// come (a full queue is about 100 kB, most sandboxes never queue one) and
// is let go once a burst of more than keep records has been delivered.
// The zero value is not usable: use New.
type Log struct {
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
	items  []item // queued from head on, oldest first
	head   int
	// The eviction records' bucket and count.
	evictTokens float64
	evictLast   time.Time
	evictQueued int
}

// New returns an empty queue with full buckets.
func New() *Log {
	return &Log{ready: make(chan struct{}, 1), tokens: Burst, evictTokens: EvictBurst}
}

// takeToken reports whether a record at now may be queued: it takes a
// token of a bucket of burst tokens refilled at Rate a second, refilling
// it first. A clock that goes backwards refills nothing.
func takeToken(tokens *float64, last *time.Time, burst float64, now time.Time) bool {
	if !last.IsZero() && now.After(*last) {
		*tokens = min(burst, *tokens+now.Sub(*last).Seconds()*Rate)
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

// push queues it (l.mu held), moving the queued records to the front of
// the array first when it is full and they do not start there.
func (l *Log) push(it item) {
	if l.head > 0 && len(l.items) == cap(l.items) {
		n := copy(l.items, l.items[l.head:])
		clear(l.items[n:])
		l.items, l.head = l.items[:n], 0
	}
	l.items = append(l.items, it)
}

// signal tells the deliverer that records were queued.
func (l *Log) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Offer queues the block record b (b.Time is the rate's clock), or counts
// it dropped; it never blocks, and is safe from any goroutine.
func (l *Log) Offer(b netpolicy.Block) { l.queue(b, false) }

// OfferEvict queues the eviction record b, or counts it dropped in
// EvictsDropped; it never blocks.
func (l *Log) OfferEvict(b netpolicy.Block) { l.queue(b, true) }

func (l *Log) queue(b netpolicy.Block, evict bool) {
	l.mu.Lock()
	var ok bool
	if evict {
		ok = l.evictQueued < EvictBurst && takeToken(&l.evictTokens, &l.evictLast, EvictBurst, b.Time)
	} else {
		ok = len(l.items)-l.head-l.evictQueued < QueueLen && takeToken(&l.tokens, &l.last, Burst, b.Time)
	}
	if ok {
		l.push(item{b: b, evict: evict})
		if evict {
			l.evictQueued++
		}
	}
	l.mu.Unlock()
	switch {
	case ok:
		l.signal()
	case evict:
		l.evictsDropped.Add(1)
	default:
		l.dropped.Add(1)
	}
}

// pop takes the oldest queued item, if any.
func (l *Log) pop() (item, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == len(l.items) {
		return item{}, false
	}
	it := l.items[l.head]
	l.items[l.head] = item{}
	l.head++
	if it.evict {
		l.evictQueued--
	}
	if l.head == len(l.items) {
		l.items, l.head = l.items[:0], 0
		if cap(l.items) > keep {
			l.items = nil
		}
	}
	return it, true
}

// Run hands each queued record to deliver (evict: an eviction record)
// in order until ctx ends, then those still queued, and returns. One
// goroutine runs it.
func (l *Log) Run(ctx context.Context, deliver func(b netpolicy.Block, evict bool)) {
	give := func(it item) {
		if it.flushed != nil {
			close(it.flushed)
			return
		}
		deliver(it.b, it.evict)
	}
	for {
		if it, ok := l.pop(); ok {
			give(it)
			continue
		}
		select {
		case <-l.ready:
		case <-ctx.Done():
			for {
				it, ok := l.pop()
				if !ok {
					return
				}
				give(it)
			}
		}
	}
}

// Flush returns once every record queued before the call has been
// handed to the consumer (or ctx, Run's context, has ended). Tests use
// it; it may block, so never call it from the producer's event loop.
func (l *Log) Flush(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	done := make(chan struct{})
	l.mu.Lock()
	l.push(item{flushed: done}) // not bounded: tests only
	l.mu.Unlock()
	l.signal()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Dropped returns how many block records were not queued because the
// queue was full or over its rate.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// EvictsDropped returns how many eviction records were not queued.
func (l *Log) EvictsDropped() uint64 { return l.evictsDropped.Load() }
