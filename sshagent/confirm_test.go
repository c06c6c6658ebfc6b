package sshagent

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// confirmRig is a policy with --ssh-confirm whose hook is the ask mode's
// broker, with timers the test fires.
type confirmRig struct {
	l      *lab
	p      *Policy
	b      *ask.Broker
	reqs   chan ask.Request
	mu     sync.Mutex
	timers []func()
	events []Event
}

func newConfirmRig(t *testing.T) *confirmRig {
	r := &confirmRig{l: newLab(t), reqs: make(chan ask.Request, 10)}
	r.p = r.l.policy(t, Config{Confirm: true})
	r.p.SetEvents(func(e Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	})
	r.b = ask.New(ask.Config{
		Sandbox: "abc", OnRequest: func(q ask.Request) { r.reqs <- q },
		AfterFunc: func(_ time.Duration, f func()) func() bool {
			r.mu.Lock()
			r.timers = append(r.timers, f)
			r.mu.Unlock()
			return func() bool { return true }
		},
		Approve: func(ask.Decision) error {
			t.Error("the Approve hook (the jail's reach) was told of a signature")
			return nil
		},
	})
	t.Cleanup(r.b.Close)
	r.p.SetConfirm(func(s Signature) error {
		return r.b.ConfirmSign(ask.Sign{Host: s.Host, Port: uint16(s.Port), Key: s.Key})
	})
	return r
}

// sign binds a connection to forge.test and asks for a signature on a
// goroutine of its own.
func (r *confirmRig) sign(t *testing.T) chan error {
	t.Helper()
	a := connect(t, r.p, r.l.backing)
	if err := bind(t, a, r.l.forge, r.l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	c := make(chan error, 1)
	go func() {
		data := authData(sid(1), r.l.user.pub, methodPublicKey, nil)
		sig, err := a.Sign(r.l.user.pub, data)
		if err == nil {
			err = r.l.user.pub.Verify(data, sig)
		}
		c <- err
	}()
	return c
}

// request is the request a signature makes; the signature answered
// first (made or refused without asking) fails the test.
func (r *confirmRig) request(t *testing.T, got chan error) ask.Request {
	t.Helper()
	select {
	case q := <-r.reqs:
		return q
	case err := <-got:
		t.Fatalf("the signature was answered without a request: %v", err)
	}
	panic("unreachable")
}

func TestConfirmApproveOnceAndSession(t *testing.T) {
	r := newConfirmRig(t)
	got := r.sign(t)
	q := r.request(t, got)
	if q.Kind != ask.KindSSHSign || q.Name != "forge.test" || q.Port != 22 || q.Key != ssh.FingerprintSHA256(r.l.user.pub) {
		t.Fatalf("request %+v", q)
	}
	if _, err := r.b.Approve(q.ID, ask.Once); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("approved once: %v", err)
	}
	// Once: the next signature asks again; approved for the session,
	// the one after passes without asking.
	got = r.sign(t)
	q = r.request(t, got)
	if _, err := r.b.Approve(q.ID, ask.Session); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("approved for the session: %v", err)
	}
	if err := <-r.sign(t); err != nil {
		t.Fatalf("after --session: %v", err)
	}
	if n, _ := r.b.Counts(); n != 2 {
		t.Fatalf("requests made: %d, want 2", n)
	}
	if s := r.p.Summary(); s != "ssh-agent: signed 3 times for forge.test" {
		t.Fatalf("summary %q", s)
	}
}

func TestConfirmDenyAndTimeout(t *testing.T) {
	r := newConfirmRig(t)
	got := r.sign(t)
	q := r.request(t, got)
	if _, err := r.b.Deny(q.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err == nil {
		t.Fatal("signed a denied signature")
	}
	r.mu.Lock()
	if len(r.events) != 1 || r.events[0].Signed || r.events[0].Reason != "denied" || r.events[0].Host != "forge.test" {
		t.Fatalf("events %+v", r.events)
	}
	if !strings.Contains(r.p.Summary(), "signed nothing; refused 1 (1 forge.test)") {
		t.Fatalf("summary %q", r.p.Summary())
	}
	if len(r.l.reports) != 1 || !strings.Contains(r.l.reports[0], "refused a signature (forge.test): denied") {
		t.Fatalf("reports %q", r.l.reports)
	}
	r.mu.Unlock()
	got = r.sign(t)
	r.request(t, got)
	// The request's timer was set before OnRequest told of it.
	r.mu.Lock()
	last := r.timers[len(r.timers)-1]
	r.mu.Unlock()
	last()
	if err := <-got; err == nil {
		t.Fatal("signed at the timeout")
	}
	r.mu.Lock()
	e := r.events[len(r.events)-1]
	r.mu.Unlock()
	if e.Reason != ask.ErrExpired.Error() {
		t.Fatalf("event %+v", e)
	}
}

// TestConfirmPolicyFirst: what the host policy refuses never becomes a
// request.
func TestConfirmPolicyFirst(t *testing.T) {
	r := newConfirmRig(t)
	a := connect(t, r.p, r.l.backing)
	if _, err := a.Sign(r.l.user.pub, authData(sid(1), r.l.user.pub, methodPublicKey, nil)); err == nil {
		t.Fatal("signed unbound")
	}
	a = connect(t, r.p, r.l.backing)
	if err := bind(t, a, r.l.other, r.l.other.signer, sid(2), false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sign(r.l.user.pub, authData(sid(2), r.l.user.pub, methodPublicKey, nil)); err == nil {
		t.Fatal("signed for other.test")
	}
	a = connect(t, r.p, r.l.backing)
	if err := bind(t, a, r.l.forge, r.l.forge.signer, sid(3), false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sign(r.l.user.pub, authData(sid(4), r.l.user.pub, methodPublicKey, nil)); err == nil {
		t.Fatal("signed for another session")
	}
	if n, _ := r.b.Counts(); n != 0 {
		t.Fatalf("%d requests made for signatures the policy refuses", n)
	}
}

// TestConfirmWithoutHook: Confirm without a hook refuses (fail closed).
func TestConfirmWithoutHook(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{Confirm: true})
	a := connect(t, p, l.backing)
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	_, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "forge.test")
}

// TestConfirmClient: the server names the connecting process (here the
// test itself, in the same pid namespace).
func TestConfirmClient(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{Confirm: true})
	seen := make(chan Signature, 1)
	p.SetConfirm(func(s Signature) error { seen <- s; return errors.New("denied") })
	s, err := Listen(p, testutil.ServeAgent(t, l.backing))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := agent.NewClient(c)
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil)); err == nil {
		t.Fatal("signed a denied signature")
	}
	got := <-seen
	if got.Client == nil || got.Client.PID != os.Getpid() || len(got.Client.Argv) == 0 || got.Client.Argv[0] != os.Args[0] {
		t.Fatalf("client %+v", got.Client)
	}
}

// The ssh client's command line is written by the client itself (inside,
// hostile): procClient keeps it bounded and escaped as a flow's process's
// (flowowner), so an escape sequence in its argv never reaches the
// terminal or log raw. Seen failing with procClient's own os.ReadFile
// and split: the OSC 52 sequence came back as it was.
func TestClientArgvEscaped(t *testing.T) {
	evil := "\x1b]52;c;ZXZpbA==\x07git"
	// A shell that stays (sleep then exit: not exec'd in its place), with
	// a long third argument; sleep itself would refuse such an argument
	// and exit at once, its command line gone before it is read.
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000; exit 0 #"+strings.Repeat("A", 100000))
	cmd.Args[0] = evil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Start returns before the child's exec has put its argv in place
	// (an empty cmdline meanwhile): wait for it, bounded.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline"); bytes.HasPrefix(b, []byte(evil)) {
			break
		}
	}
	c := procClient(cmd.Process.Pid)
	if c == nil || c.PID != cmd.Process.Pid || len(c.Argv) != 3 {
		t.Fatalf("procClient = %+v", c)
	}
	for _, a := range c.Argv {
		if strings.ContainsFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }) || len(a) > 4096 {
			t.Errorf("argument %q (%d bytes) kept raw or unbounded", a[:min(len(a), 40)], len(a))
		}
	}
	if !strings.HasPrefix(c.Argv[0], `\x1b]52`) {
		t.Errorf("argv[0] = %q, want the escape written out", c.Argv[0])
	}
}

// A client in a pid namespace of its own inside the sandbox is named by
// its pid in the sandbox's, one level below this process's, not by the
// innermost (1 there, init's number). Here a child in a new pid namespace
// stands for the sandbox's init (pid 1 there) and its child, unshared
// into a further one, for the client: pid 2 in the "sandbox", 1 below.
// Seen failing with the innermost NSpid taken: PID 1.
func TestClientPIDInSandboxNamespace(t *testing.T) {
	cmd := exec.Command("/usr/bin/unshare", "--pid", "--fork", "/bin/sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	children := fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid)
	var client int
	for client == 0 {
		b, err := os.ReadFile(children)
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			client, _ = strconv.Atoi(f[0])
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	c := procClient(client)
	if c == nil || c.PID != 2 {
		t.Fatalf("procClient(%d) = %+v, want PID 2 (the \"sandbox\"'s)", client, c)
	}
}
