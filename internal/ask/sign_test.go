package ask

import (
	"errors"
	"testing"
)

var forge = Sign{Host: "forge.test", Port: 22, Key: "SHA256:abc", Who: &Process{PID: 7, Argv: []string{"ssh", "git@forge.test"}}}

// sign runs ConfirmSign on a goroutine of its own: its answer comes on
// the channel returned.
func (r *rig) sign(s Sign) chan error {
	c := make(chan error, 1)
	go func() { c <- r.b.ConfirmSign(s) }()
	return c
}

// TestSignApproveOnce: a signature waits for its request; approved once
// it is made, the next one asks again; the Approve hook (the jail's
// reach) is never told of it.
func TestSignApproveOnce(t *testing.T) {
	r := newRig(t, 0)
	got := r.sign(forge)
	req := <-r.reqs
	if req.Kind != KindSSHSign || req.Proto != "ssh" || req.Name != "forge.test" || req.Port != 22 || req.Key != "SHA256:abc" || req.Who == nil || req.Who.PID != 7 {
		t.Fatalf("request %+v", req)
	}
	if w := req.What(); w != "signature for forge.test with key SHA256:abc" {
		t.Fatalf("What: %q", w)
	}
	// A second signature meanwhile joins the request.
	got2 := r.sign(forge)
	for {
		if l := r.b.List(); len(l) == 1 && l[0].Held == 2 {
			break
		}
	}
	if _, err := r.b.Approve(req.ID, Once); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("approved once: %v", err)
	}
	// Once is the signature shown: the one that joined (another
	// process, perhaps, whose connection would ride on the approval)
	// asks for itself.
	var req1b Request
	select {
	case err := <-got2:
		t.Fatalf("joined, approved once for the other: answered without a request of its own (%v)", err)
	case req1b = <-r.reqs:
	}
	if req1b.ID == req.ID || req1b.Held != 1 {
		t.Fatalf("the joined signature's own request: %+v", req1b)
	}
	if _, err := r.b.Approve(req1b.ID, Once); err != nil {
		t.Fatal(err)
	}
	if err := <-got2; err != nil {
		t.Fatalf("joined, then approved once itself: %v", err)
	}
	if len(r.approved) != 0 {
		t.Fatalf("the Approve hook was told of a signature: %+v", r.approved)
	}
	got = r.sign(forge)
	req2 := <-r.reqs
	if req2.ID == req.ID {
		t.Fatal("the next signature did not ask again")
	}
	if _, err := r.b.Deny(req2.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, ErrDenied) || err.Error() != "denied" {
		t.Fatalf("denied: %v", err)
	}
}

// TestSignApproveSession: approved for the session, the host and key's
// later signatures pass without asking; another key or host asks.
func TestSignApproveSession(t *testing.T) {
	r := newRig(t, 0)
	got := r.sign(forge)
	req := <-r.reqs
	if _, err := r.b.Approve(req.ID, Session); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := r.b.ConfirmSign(forge); err != nil {
		t.Fatalf("after --session: %v", err)
	}
	other := forge
	other.Key = "SHA256:other"
	got = r.sign(other)
	if q := <-r.reqs; q.Key != "SHA256:other" {
		t.Fatalf("request %+v", q)
	}
	other.Key, other.Port = forge.Key, 2222
	got2 := r.sign(other)
	if q := <-r.reqs; q.Port != 2222 || q.What() != "signature for [forge.test]:2222 with key SHA256:abc" {
		t.Fatalf("request %+v (%s)", q, q.What())
	}
	if len(r.approved) != 0 {
		t.Fatalf("the Approve hook was told of a signature: %+v", r.approved)
	}
	r.b.Close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if err := <-got2; !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	if err := r.b.ConfirmSign(forge); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// TestSignDenyAndTimeout: denied, the signature is refused and the next
// asks again; unanswered, it is refused at the timeout.
func TestSignDenyAndTimeout(t *testing.T) {
	r := newRig(t, 0)
	got := r.sign(forge)
	req := <-r.reqs
	if _, err := r.b.Deny(req.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, ErrDenied) {
		t.Fatalf("denied: %v", err)
	}
	got = r.sign(forge)
	<-r.reqs
	r.timers.fire()
	if err := <-got; !errors.Is(err, ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	if r.b.Pending() != 0 {
		t.Fatalf("pending after the timeout: %d", r.b.Pending())
	}
}

// TestSignAlwaysRefused: approve --always is refused for a signature,
// which keeps waiting; --session then answers it.
func TestSignAlwaysRefused(t *testing.T) {
	r := newRig(t, 0)
	got := r.sign(forge)
	req := <-r.reqs
	if _, err := r.b.Approve(req.ID, Always); !errors.Is(err, ErrAlwaysSign) {
		t.Fatalf("always: %v", err)
	}
	if r.b.Pending() != 1 {
		t.Fatal("the request ended on --always")
	}
	if _, err := r.b.Approve(req.ID, Session); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestSignCap: at the cap of pending requests a signature is refused at
// once.
func TestSignCap(t *testing.T) {
	r := newRig(t, 1)
	got := r.sign(forge)
	<-r.reqs
	other := forge
	other.Key = "SHA256:other"
	if err := r.b.ConfirmSign(other); !errors.Is(err, ErrTooMany) {
		t.Fatalf("at the cap: %v", err)
	}
	r.b.Close()
	<-got
}
