package sshagent

import (
	"strings"
	"sync"
	"testing"
)

// A session binds each connection to a host key of its own making (one
// line on the caller's terminal each, one place in the exit summary
// each): the lines and the places are bounded, the count is not lost.
func TestRefusalFloodBounded(t *testing.T) {
	l := newLab(t)
	var mu sync.Mutex
	var lines []string
	p := l.policy(t, Config{})
	p.report = func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
	}
	const n = 200
	for i := 0; i < n; i++ {
		a := connect(t, p, l.backing)
		k := newKey(t)
		if err := bind(t, a, k, k.signer, sid(1), false); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil)); err == nil {
			t.Fatal("signed for a host key of the session's")
		}
	}
	mu.Lock()
	shown := len(lines)
	last := ""
	if shown > 0 {
		last = lines[shown-1]
	}
	mu.Unlock()
	if shown > maxShown+1 {
		t.Errorf("%d refusal lines on the caller's terminal for %d refusals, want at most %d", shown, n, maxShown+1)
	}
	if !strings.Contains(last, "counted, not shown") {
		t.Errorf("the last line does not say the rest are only counted: %q", last)
	}
	_, r := p.Counts()
	total := 0
	for _, v := range r {
		total += v
	}
	if len(r) > maxPlaces+1 || total != n || r[otherPlaces] == 0 {
		t.Errorf("%d places counted apart (want at most %d), %d refusals (want %d): %v", len(r), maxPlaces+1, total, n, len(r))
	}
	if s := p.Summary(); len(s) > 4096 {
		t.Errorf("the exit summary's line is %d bytes", len(s))
	}
}

