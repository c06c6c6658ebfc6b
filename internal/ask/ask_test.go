package ask

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// fakeTimers runs the broker's timeouts when the test says.
type fakeTimers struct {
	mu sync.Mutex
	fs []func()
}

func (t *fakeTimers) after(_ time.Duration, f func()) func() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := len(t.fs)
	t.fs = append(t.fs, f)
	return func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.fs[i] = nil
		return true
	}
}

func (t *fakeTimers) fire() {
	t.mu.Lock()
	fs := t.fs
	t.fs = nil
	t.mu.Unlock()
	for _, f := range fs {
		if f != nil {
			f()
		}
	}
}

type rig struct {
	b        *Broker
	timers   *fakeTimers
	reqs     chan Request
	approved []Decision
	failNext error
	retried  chan netip.AddrPort
}

func newRig(t *testing.T, max int) *rig {
	r := &rig{timers: &fakeTimers{}, reqs: make(chan Request, 100), retried: make(chan netip.AddrPort, 100)}
	r.b = New(Config{
		Sandbox: "abc", MaxPending: max, AfterFunc: r.timers.after,
		OnRequest: func(q Request) { r.reqs <- q },
		Approve: func(d Decision) error {
			if err := r.failNext; err != nil {
				r.failNext = nil
				return err
			}
			r.approved = append(r.approved, d)
			return nil
		},
	})
	t.Cleanup(r.b.Close)
	return r
}

var (
	pypi  = netip.MustParseAddrPort("198.18.0.7:443")
	epics = netip.MustParseAddrPort("10.1.2.3:5064")
)

func src(port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), port)
}

func (r *rig) flow(name string, dst netip.AddrPort, sport uint16) Flow {
	s := src(sport)
	return Flow{Proto: netpolicy.ProtoTCP, Name: name, Dst: dst, Src: s, Retry: func() { r.retried <- s }}
}

func (r *rig) waitRetry(t *testing.T, want netip.AddrPort) {
	t.Helper()
	if got := <-r.retried; got != want {
		t.Fatalf("retried %v, want %v", got, want)
	}
}

func TestHoldThenApproveSession(t *testing.T) {
	r := newRig(t, 0)
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Hold {
		t.Fatalf("first flow: %v, want hold", v)
	}
	req := <-r.reqs
	if req.ID != 1 || req.Name != "pypi.org" || req.Port != 443 || req.Kind != "name" || req.Sandbox != "abc" || req.What() != "pypi.org:443" {
		t.Fatalf("request %+v", req)
	}
	// The SYN's retransmission, and a second connection: held, no new
	// request.
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Hold {
		t.Fatalf("retransmission: %v", v)
	}
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40001)); v != Hold {
		t.Fatalf("second flow: %v", v)
	}
	if l := r.b.List(); len(l) != 1 || l[0].Held != 2 {
		t.Fatalf("list %+v", l)
	}
	if _, err := r.b.Approve(1, Session); err != nil {
		t.Fatal(err)
	}
	if len(r.approved) != 1 || r.approved[0].Scope != Session || r.approved[0].Request.Name != "pypi.org" {
		t.Fatalf("approver got %+v", r.approved)
	}
	got := map[netip.AddrPort]bool{<-r.retried: true, <-r.retried: true}
	if !got[src(40000)] || !got[src(40001)] {
		t.Fatalf("retried %v", got)
	}
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Pass {
		t.Fatalf("held flow after approval: %v, want pass", v)
	}
	if r.b.Pending() != 0 {
		t.Fatal("still pending")
	}
	if _, err := r.b.Approve(1, Session); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("second approve: %v", err)
	}
}

func TestApproveOnceOnlyHeldFlows(t *testing.T) {
	r := newRig(t, 0)
	r.b.Ask(r.flow("pypi.org", pypi, 40000))
	<-r.reqs
	if _, err := r.b.Approve(1, Once); err != nil {
		t.Fatal(err)
	}
	r.waitRetry(t, src(40000))
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Pass {
		t.Fatalf("held flow: %v, want pass", v)
	}
	// The pass is spent: a later SYN from the same port (a new
	// connection reusing it) asks again, as does any other flow.
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Hold {
		t.Fatalf("same port again: %v, want hold", v)
	}
	if q := <-r.reqs; q.ID != 2 {
		t.Fatalf("new request %+v", q)
	}
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40002)); v != Hold {
		t.Fatalf("other flow: %v, want hold", v)
	}
}

func TestDenyRefusesHeldAndLater(t *testing.T) {
	r := newRig(t, 0)
	r.b.Ask(r.flow("", epics, 40000))
	q := <-r.reqs
	if q.Kind != "address" || q.Addr != "10.1.2.3" || q.What() != "10.1.2.3:5064" {
		t.Fatalf("request %+v", q)
	}
	if _, err := r.b.Deny(q.ID); err != nil {
		t.Fatal(err)
	}
	r.waitRetry(t, src(40000))
	if v := r.b.Ask(r.flow("", epics, 40000)); v != Refuse {
		t.Fatalf("held flow after deny: %v", v)
	}
	if v := r.b.Ask(r.flow("", epics, 40009)); v != Refuse {
		t.Fatalf("new flow after deny: %v", v)
	}
	if len(r.approved) != 0 {
		t.Fatal("approver called on deny")
	}
	// Another port of the same address is another destination.
	if v := r.b.Ask(r.flow("", netip.AddrPortFrom(epics.Addr(), 5065), 40010)); v != Hold {
		t.Fatalf("other port: %v", v)
	}
}

func TestTimeoutRefusesHeldThenAsksAgain(t *testing.T) {
	r := newRig(t, 0)
	r.b.Ask(r.flow("other.test", pypi, 40000))
	<-r.reqs
	r.timers.fire()
	r.waitRetry(t, src(40000))
	if r.b.Pending() != 0 {
		t.Fatal("pending after the timeout")
	}
	if v := r.b.Ask(r.flow("other.test", pypi, 40000)); v != Refuse {
		t.Fatalf("held flow after timeout: %v", v)
	}
	// Not a person's no: a new flow asks again.
	if v := r.b.Ask(r.flow("other.test", pypi, 40001)); v != Hold {
		t.Fatalf("new flow after timeout: %v", v)
	}
	if q := <-r.reqs; q.ID != 2 {
		t.Fatalf("request %+v", q)
	}
	if _, err := r.b.Approve(1, Session); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("approve of an expired request: %v", err)
	}
}

func TestApproveFailureLeavesPending(t *testing.T) {
	r := newRig(t, 0)
	r.b.Ask(r.flow("pypi.org", pypi, 40000))
	<-r.reqs
	r.failNext = errors.New("jail failed closed")
	if _, err := r.b.Approve(1, Session); err == nil {
		t.Fatal("approve succeeded although the approver failed")
	}
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Hold {
		t.Fatalf("after a failed approval: %v, want hold", v)
	}
}

func TestPendingCap(t *testing.T) {
	r := newRig(t, 2)
	for i := range 2 {
		if v := r.b.Ask(r.flow("", netip.AddrPortFrom(epics.Addr(), uint16(1000+i)), 40000)); v != Hold {
			t.Fatalf("request %d: %v", i, v)
		}
	}
	if v := r.b.Ask(r.flow("", netip.AddrPortFrom(epics.Addr(), 2000), 40000)); v != Refuse {
		t.Fatalf("beyond the cap: %v, want refuse", v)
	}
	// A flow joining a pending request is not a new request.
	if v := r.b.Ask(r.flow("", netip.AddrPortFrom(epics.Addr(), 1000), 40001)); v != Hold {
		t.Fatalf("joining: %v", v)
	}
	if asked, over := r.b.Counts(); asked != 2 || over != 1 {
		t.Fatalf("counts %d %d", asked, over)
	}
}

func TestHeldPerRequestBounded(t *testing.T) {
	r := newRig(t, 0)
	for i := range maxHeldPerRequest + 10 {
		r.b.Ask(r.flow("pypi.org", pypi, uint16(30000+i)))
	}
	e := r.b.pending[keyOf(r.flow("pypi.org", pypi, 1))]
	// The flows held beyond maxHeldPerRequest (no Retry kept) are
	// e.req.Held - len(e.held).
	if extra := e.req.Held - len(e.held); len(e.held) != maxHeldPerRequest || extra != 10 || e.req.Held != maxHeldPerRequest+10 {
		t.Fatalf("held %d extra %d count %d", len(e.held), extra, e.req.Held)
	}
}

func TestCloseRefusesPending(t *testing.T) {
	r := newRig(t, 0)
	r.b.Ask(r.flow("pypi.org", pypi, 40000))
	<-r.reqs
	r.b.Close()
	r.waitRetry(t, src(40000))
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Refuse {
		t.Fatalf("after close: %v", v)
	}
}

func TestHostPortRequest(t *testing.T) {
	r := newRig(t, 0)
	gw := netip.MustParseAddrPort("192.0.2.1:11434")
	r.b.Ask(Flow{Proto: netpolicy.ProtoTCP, Dst: gw, HostPort: true, Src: src(1)})
	q := <-r.reqs
	if q.Kind != "host-port" || q.Port != 11434 || q.What() != "the host's port 11434/tcp" {
		t.Fatalf("request %+v %q", q, q.What())
	}
}

// A request that expires while its approval is put in force: the held
// flows are refused, and the caller is told the approval holds.
func TestExpireDuringApprove(t *testing.T) {
	r := newRig(t, 0)
	r.b.Ask(r.flow("pypi.org", pypi, 40000))
	<-r.reqs
	r.b.cfg.Approve = func(Decision) error {
		r.timers.fire() // the timeout, while the jail changes its reach
		return nil
	}
	if _, err := r.b.Approve(1, Session); !errors.Is(err, ErrExpiredInForce) {
		t.Fatalf("approve: %v, want ErrExpiredInForce", err)
	}
	r.waitRetry(t, src(40000))
	if v := r.b.Ask(r.flow("pypi.org", pypi, 40000)); v != Refuse {
		t.Fatalf("the held flow: %v, want refuse", v)
	}
}

// The process behind a new request's flow (Config.Who, the jail's socket
// lookup: system calls and a /proc scan) is looked up off the caller's
// packet path: Ask returns Hold while the lookup is still running, the
// lookup runs once per request (not for a flow joining it), and
// OnRequest and List then name the process.
func TestWhoOffThePacketPath(t *testing.T) {
	called, release := make(chan Flow, 4), make(chan struct{})
	reqs := make(chan Request, 4)
	b := New(Config{
		Sandbox: "abc", AfterFunc: (&fakeTimers{}).after,
		OnRequest: func(q Request) { reqs <- q },
		Approve:   func(Decision) error { return nil },
		Who: func(f Flow) *Process {
			called <- f
			<-release
			return &Process{PID: 42, Argv: []string{"pip", "install"}}
		},
	})
	t.Cleanup(b.Close)
	asked := make(chan Verdict, 1)
	go func() { asked <- b.Ask(Flow{Proto: netpolicy.ProtoTCP, Name: "pypi.org", Dst: pypi, Src: src(1)}) }()
	if f := <-called; f.Src != src(1) {
		t.Fatalf("Who asked for %v", f.Src)
	}
	// A failsafe, not a timing assertion: a lookup on the caller's path
	// keeps Ask from returning until release.
	select {
	case v := <-asked:
		if v != Hold {
			t.Fatalf("Ask: %v, want Hold", v)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Ask waited for the process lookup")
	}
	if v := b.Ask(Flow{Proto: netpolicy.ProtoTCP, Name: "pypi.org", Dst: pypi, Src: src(2)}); v != Hold {
		t.Fatalf("a second flow to it: %v, want Hold", v)
	}
	close(release)
	q := <-reqs
	if q.Who == nil || q.Who.PID != 42 {
		t.Fatalf("OnRequest told of %+v, want the process", q)
	}
	if l := b.List(); len(l) != 1 || l[0].Who == nil || l[0].Who.Argv[0] != "pip" {
		t.Fatalf("List: %+v", l)
	}
	select {
	case f := <-called:
		t.Fatalf("Who asked again, for the flow that joined the request (%v)", f.Src)
	default:
	}
}

// A session's process names itself with the longest command line and
// working directory the lookup keeps: each request carries a bounded
// part of them (every pending request is in every listing), whichever
// way the process comes (with the flow, from the lookup, with a
// signature).
func TestWhoBounded(t *testing.T) {
	var argv []string
	for i := 0; i < 64; i++ {
		argv = append(argv, strings.Repeat(`\x1b`, 128))
	}
	huge := &Process{PID: 9, Argv: argv, Cwd: "/" + strings.Repeat("d", 4095)}
	r := newRig(t, 0)
	r.b.cfg.Who = func(Flow) *Process { return huge }
	f := r.flow("pypi.org", pypi, 40000)
	f.Who = huge
	r.b.Ask(f)
	r.b.Ask(r.flow("files.pythonhosted.org", pypi, 40001))
	go func() { _ = r.b.ConfirmSign(Sign{Host: "forge.test", Port: 22, Key: "SHA256:abc", Who: huge}) }()
	for i := 0; i < 3; i++ {
		q := <-r.reqs
		if q.Who == nil || q.Who.PID != 9 || len(q.Who.Argv) == 0 || q.Who.Argv[0] != argv[0] {
			t.Fatalf("request %d: the process %+v, want pid 9 and its first argument", q.ID, q.Who)
		}
	}
	for _, q := range r.b.List() {
		b, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 4096 {
			t.Errorf("request %d (%s) is %d bytes of JSON in each listing", q.ID, q.Kind, len(b))
		}
	}
}
