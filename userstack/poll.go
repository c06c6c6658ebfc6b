package userstack

import (
	"container/heap"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// poller is the relay's event loop: one goroutine waits in epoll_wait on
// the TUN and on every host socket, and itself runs the handler of each
// that is ready and the timers that are due. pasta and slirp4netns work
// the same way.
//
// It replaced a goroutine per flow parked in Go's netpoller, which cost a
// scheduler round per wake-up (a second, non-blocking epoll_wait among
// it) and, its readiness being edge-triggered, a read that found nothing
// before each wait: ten system calls per TCP round trip where this makes
// six. Readiness here is level-triggered, so a handler reads no further
// than a short read (or a burst's bound) and leaves the rest, or an EOF
// queued behind the data, for the next turn of the loop; and a flow that
// cannot take more (its window to the sandbox is full) says so by
// narrowing its interest.
//
// The descriptors it waits on are not registered with Go's netpoller: a
// conn from a Dialer is detached first (its descriptor duplicated, the
// conn closed), or Go's poller would wake a thread for every packet too.
//
// Handlers and timer callbacks run on the loop's goroutine, one at a
// time; they must not block. Registration and timers may be used from
// any goroutine.
type poller struct {
	epfd int
	wake int // an eventfd: Close, and a timer armed while the loop sleeps
	base time.Time

	mu         sync.Mutex
	regs       map[int32]pollReg
	gen        uint32
	timers     timerHeap
	sleeping   atomic.Bool // in epoll_wait (set under mu), until sleepUntil
	sleepUntil int64       // nanoseconds since base
	closed     bool
	done       chan struct{}
	turns      atomic.Uint64 // epoll_wait returns (tests: nothing spins)
}

// pollHandler is told which events a registered descriptor has.
type pollHandler interface {
	pollReady(events uint32)
}

type pollReg struct {
	h   pollHandler
	gen uint32
}

// pollFD is a registrant's side of a registration: a descriptor and the
// events asked for. The generation tells a stale event (of a descriptor
// closed and reused within one batch) from a current one. Guarded by the
// registrant's own lock.
type pollFD struct {
	fd     int
	gen    uint32
	events uint32
	added  bool
}

const (
	pollBatch = 128
	// maxWaitMS keeps epoll_wait's timeout in its 32 bits (a timer further
	// away is simply looked at again after it).
	maxWaitMS = 1 << 30
)

func newPoller() (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake), Pad: 0}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, err
	}
	p := &poller{epfd: epfd, wake: wake, base: time.Now(), regs: map[int32]pollReg{}, done: make(chan struct{})}
	go p.run()
	return p, nil
}

// set makes pf's interest events, registering pf.fd with h on first use.
// With events 0 the descriptor stays in the set one-shot: errors and
// hang-ups are reported whatever the interest, and level-triggered they
// would be reported again and again to a registrant that cannot act yet;
// one-shot they are told once (the registrant meets them again when it
// next reads or writes). A flow whose window to the sandbox fills and
// opens again so costs one epoll_ctl each way and nothing more.
func (p *poller) set(pf *pollFD, events uint32, h pollHandler) error {
	if pf.added && pf.events == events {
		return nil
	}
	if events == 0 && !pf.added {
		return nil
	}
	op := unix.EPOLL_CTL_MOD
	if !pf.added {
		op = unix.EPOLL_CTL_ADD
		p.mu.Lock()
		p.gen++
		pf.gen = p.gen
		p.regs[int32(pf.fd)] = pollReg{h: h, gen: pf.gen}
		p.mu.Unlock()
	}
	mask := events
	if events == 0 {
		mask = unix.EPOLLONESHOT
	}
	ev := unix.EpollEvent{Events: mask, Fd: int32(pf.fd), Pad: int32(pf.gen)}
	if err := unix.EpollCtl(p.epfd, op, pf.fd, &ev); err != nil {
		if op == unix.EPOLL_CTL_ADD {
			p.forget(pf)
		}
		return err
	}
	pf.added, pf.events = true, events
	return nil
}

// forget drops pf's registration; call it before closing the descriptor.
// It takes the descriptor out of the epoll set first: closing it would do
// that only if no other reference to the open file were left, and one can
// be (a child between fork and exec, a Dialer's own duplicate), which would
// keep reporting a level-triggered event nobody can take any more.
func (p *poller) forget(pf *pollFD) {
	if pf.added {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, pf.fd, nil)
	}
	p.mu.Lock()
	if r, ok := p.regs[int32(pf.fd)]; ok && r.gen == pf.gen {
		delete(p.regs, int32(pf.fd))
	}
	p.mu.Unlock()
	pf.added, pf.events = false, 0
}

// close stops the loop and waits for it. Handlers still registered are
// not told. It must not be called from a handler or a timer callback.
func (p *poller) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.signal()
	<-p.done
	unix.Close(p.epfd)
	unix.Close(p.wake)
}

// registered returns how many descriptors have a registration (those of
// live flows and the TUN; a flow's outlasting it would be a leak).
func (p *poller) registered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.regs)
}

func (p *poller) signal() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(p.wake, one[:])
}

func (p *poller) now() int64 { return int64(time.Since(p.base)) }

func (p *poller) run() {
	defer close(p.done)
	evs := make([]unix.EpollEvent, pollBatch)
	var due []*loopTimer
	var drain [8]byte
	lastYield := p.now()
	for {
		timeout, ok := p.beforeWait()
		if !ok {
			return
		}
		n, err := unix.EpollWait(p.epfd, evs, timeout)
		p.turns.Add(1)
		// Awake: a timer armed from now on needs no signal. (One armed
		// just before this may still signal: a spare turn, no more.)
		p.sleeping.Store(false)
		if err != nil && err != unix.EINTR {
			// Only a bad epoll descriptor fails here: a bug, not a
			// condition to wait out.
			panic("userstack: epoll_wait: " + err.Error())
		}
		for i := 0; i < n; i++ {
			ev := &evs[i]
			if int(ev.Fd) == p.wake {
				_, _ = unix.Read(p.wake, drain[:])
				continue
			}
			p.mu.Lock()
			r := p.regs[ev.Fd]
			p.mu.Unlock()
			if r.h != nil && r.gen == uint32(ev.Pad) {
				r.h.pollReady(ev.Events)
			}
		}
		now := p.now()
		due = p.expired(due[:0], now)
		for i, t := range due {
			t.owner.timerFired(t)
			due[i] = nil
		}
		if now-lastYield >= int64(yieldAfter) {
			runtime.Gosched()
			lastYield = p.now()
		}
	}
}

// yieldAfter: the loop passes through the scheduler once this long has
// gone by since it last did. A goroutine that never does looks to the
// runtime's monitor like one that has run on for over 10 ms, and the
// monitor then takes its P away at each system call, which sent the loop
// from thread to thread (each move a wake-up of another thread).
const yieldAfter = 2 * time.Millisecond

// beforeWait returns epoll_wait's timeout for the next timer (in whole
// milliseconds, rounded up: a timer never fires early), and false once
// the poller is closed.
func (p *poller) beforeWait() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, false
	}
	if len(p.timers) == 0 {
		p.sleeping.Store(true)
		p.sleepUntil = 1 << 62
		return -1, true
	}
	at := p.timers[0].at
	d := at - p.now()
	if d <= 0 {
		return 0, true
	}
	p.sleeping.Store(true)
	p.sleepUntil = at
	ms := (d + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	return int(min(ms, maxWaitMS)), true
}

// loopTimer is a timer whose callback runs on the loop. Go's timers run
// theirs on whatever thread finds them due, which meant waking a second
// thread (and taking the flow's lock there) for every delayed ACK.
//
// Its owner is told which of its timers fired: a flow's two timers cost no
// closure each (an allocation per connection).
type loopTimer struct {
	at    int64 // nanoseconds since the poller's base
	idx   int   // in the heap; -1 when not armed
	owner timerOwner
}

// timerOwner is told when one of its timers fires.
type timerOwner interface {
	timerFired(t *loopTimer)
}

func newLoopTimer(owner timerOwner) loopTimer { return loopTimer{idx: -1, owner: owner} }

// arm (re)starts t to fire after d.
func (p *poller) arm(t *loopTimer, d time.Duration) {
	p.mu.Lock()
	t.at = p.now() + int64(d)
	if t.idx >= 0 {
		heap.Fix(&p.timers, t.idx)
	} else {
		heap.Push(&p.timers, t)
	}
	wake := p.sleeping.Load() && t.at < p.sleepUntil
	if wake {
		p.sleeping.Store(false)
	}
	p.mu.Unlock()
	if wake {
		p.signal()
	}
}

// stop disarms t; its callback may still run once if it was already due.
func (p *poller) stop(t *loopTimer) {
	p.mu.Lock()
	if t.idx >= 0 {
		heap.Remove(&p.timers, t.idx)
	}
	p.mu.Unlock()
}

// expired takes the due timers off the heap.
func (p *poller) expired(due []*loopTimer, now int64) []*loopTimer {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.timers) > 0 && p.timers[0].at <= now {
		due = append(due, heap.Pop(&p.timers).(*loopTimer))
	}
	return due
}

type timerHeap []*loopTimer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*loopTimer)
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.idx = -1
	return t
}
