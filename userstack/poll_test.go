package userstack

import (
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

type countReady struct{ n chan uint32 }

func (c countReady) pollReady(ev uint32) {
	select {
	case c.n <- ev:
	default:
	}
}

// quiet fails t if p's loop turns more than a few times while nothing
// should happen: a level-triggered event nobody takes would turn it
// thousands of times in that while.
func quiet(t *testing.T, p *poller) {
	t.Helper()
	before := p.turns.Load()
	time.Sleep(50 * time.Millisecond)
	if n := p.turns.Load() - before; n > 5 {
		t.Fatalf("the event loop turned %d times with nothing to do", n)
	}
}

// A descriptor given up and closed while another reference to its socket
// lives on (a fork between fork and exec, a Dialer's own duplicate) must
// not stay in the epoll set, reporting readiness no handler takes.
func TestPollerForgetLeavesNoStaleWatch(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	h := countReady{n: make(chan uint32, 1)}
	pf := pollFD{fd: fds[0]}
	if err := p.set(&pf, unix.EPOLLIN, h); err != nil {
		t.Fatal(err)
	}
	other, err := unix.Dup(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	p.forget(&pf)
	unix.Close(fds[0])
	if _, err := unix.Write(fds[1], []byte("x")); err != nil {
		t.Fatal(err)
	}
	quiet(t, p)
	select {
	case ev := <-h.n:
		t.Fatalf("a forgotten registration was told %#x", ev)
	default:
	}
}

// timerFunc owns a timer by calling itself when it fires.
type timerFunc func()

func (fn timerFunc) timerFired(*loopTimer) { fn() }

// Timers fire on the loop, in order, and a stopped one does not.
func TestPollerTimers(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	fired := make(chan string, 3)
	a := newLoopTimer(timerFunc(func() { fired <- "a" }))
	b := newLoopTimer(timerFunc(func() { fired <- "b" }))
	c := newLoopTimer(timerFunc(func() { fired <- "c" }))
	p.arm(&b, 20*time.Millisecond)
	p.arm(&a, time.Millisecond)
	p.arm(&c, 5*time.Millisecond)
	p.stop(&c)
	for _, want := range []string{"a", "b"} {
		select {
		case got := <-fired:
			if got != want {
				t.Fatalf("fired %s, want %s", got, want)
			}
		case <-time.After(20 * time.Second): // failsafe, not a timing assertion
			t.Fatalf("timer %s never fired", want)
		}
	}
	select {
	case got := <-fired:
		t.Fatalf("timer %s fired after it was stopped", got)
	case <-time.After(50 * time.Millisecond):
	}
}

// A link whose reads end (a TUN never reads empty; a closed socket pair
// does) is reported to onError once and no longer watched.
func TestTUNReadEndReported(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	tun := newTUNOn(fds[0], 0, func(err error) { errs <- err })
	st, err := New(tun, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: newFakeDialer(), NoJanitor: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	unix.Close(fds[1])
	select {
	case err := <-errs:
		if err != io.EOF {
			t.Fatalf("onError(%v), want EOF", err)
		}
	case <-time.After(20 * time.Second): // failsafe
		t.Fatal("the end of the link was not reported")
	}
	quiet(t, st.poll)
	if len(errs) != 0 {
		t.Fatalf("reported %d more times", len(errs))
	}
}

// A virtio-net header length the endpoint cannot hold is refused when the
// stack attaches, through onError, not taken as some other length.
func TestTUNBadHeaderLengthRefused(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	errs := make(chan error, 1)
	tun := newTUNOn(fds[0], vnetHdrMax+1, func(err error) { errs <- err })
	st, err := New(tun, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), Dialer: newFakeDialer(), NoJanitor: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "virtio-net header length 17") {
			t.Fatalf("onError(%v), want the header length named", err)
		}
	default:
		t.Fatal("a 17-byte virtio-net header was not refused")
	}
	if st.poll.registered() != 0 {
		t.Fatal("the refused device is watched")
	}
}
