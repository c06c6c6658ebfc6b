package userstack

import (
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack/blocklog"
)

// Block records leave the event loop through the bounded, rate-limited
// queue of package userstack/blocklog (its doc says how it bounds a
// flood), so that whatever Config.OnBlock and Config.OnEvict do never
// runs on the loop. The jail's sink (the kernel layer's refusals) records
// through the same queue ([Stack.RecordBlock]): one bucket, one count,
// for every block record of a sandbox. One goroutine of the stack's
// (deliverBlocks) calls the callbacks; Close lets it deliver what was
// queued before it returns.

// BlockRecordRate is the records a second delivered to OnBlock,
// sustained, after a burst of 1024.
const BlockRecordRate = blocklog.Rate

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
	st.blocks.Offer(b)
}

// deliverBlocks calls OnBlock (OnEvict) for each queued record until the
// stack closes, then for those still queued.
func (st *Stack) deliverBlocks() {
	defer st.wg.Done()
	st.blocks.Run(st.ctx, func(b netpolicy.Block, evict bool) {
		switch {
		case evict:
			st.cfg.OnEvict(b)
		case st.cfg.OnBlock != nil:
			st.cfg.OnBlock(b)
		}
	})
}

// flushBlocks returns once every record queued before the call has been
// delivered to OnBlock (or the stack has closed). Tests use it; it may
// block, so never call it from the event loop.
func (st *Stack) flushBlocks() { st.blocks.Flush(st.ctx) }

// BlocksDropped returns how many block records were not delivered to
// Config.OnBlock because the queue was full or over its rate (the flows
// themselves were refused all the same).
func (st *Stack) BlocksDropped() uint64 { return st.blocks.Dropped() }

// recordEvict reports a UDP flow evicted at the flow cap to
// Config.OnEvict through the block records' queue, off the event loop,
// with a token bucket and a bound of their own (a burst of
// blocklog.EvictBurst, then BlockRecordRate a second): a flood of new
// flows evicts one flow per datagram, and each record is a line in the
// jail's block log. An eviction record the queue does not take is
// counted in [Stack.EvictRecordsDropped]; every eviction is counted in
// [Stack.UDPEvictions].
func (st *Stack) recordEvict(b netpolicy.Block) {
	st.evictions.Add(1)
	if st.cfg.OnEvict == nil {
		return
	}
	b.Time = st.cfg.Now()
	st.blocks.OfferEvict(b)
}

// UDPEvictions returns how many UDP flows were evicted at the flow cap,
// reported to OnEvict or not.
func (st *Stack) UDPEvictions() uint64 { return st.evictions.Load() }

// EvictRecordsDropped returns how many eviction records were not
// delivered to Config.OnEvict (the queue was full or over its rate).
func (st *Stack) EvictRecordsDropped() uint64 { return st.blocks.EvictsDropped() }
