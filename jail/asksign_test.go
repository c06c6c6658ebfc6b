package jail

import (
	"net/netip"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// TestAskSignChangesNoReach: an ssh signature approved (--ssh-confirm),
// once or for the session, changes nothing of the jail's reach, even
// through the jail's own approve hook.
func TestAskSignChangesNoReach(t *testing.T) {
	facts := HostFacts{Connected: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, ResolvConf: "nameserver 10.0.0.2\n"}
	setup, err := PrepareNames(facts, nil, []string{"allowed.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var changes []netpolicy.Change
	reqs := make(chan ask.Request, 4)
	j := New(setup, Options{
		OnChange: func(c netpolicy.Change) { changes = append(changes, c) },
		Ask:      &AskOptions{Sandbox: "abc", OnRequest: func(q ask.Request) { reqs <- q }},
	})
	defer j.n64.close()
	defer j.ask.Close()
	for _, scope := range []ask.Scope{ask.Once, ask.Session} {
		got := make(chan error, 1)
		go func() { got <- j.Asks().ConfirmSign(ask.Sign{Host: "forge.test", Port: 22, Key: "SHA256:k"}) }()
		q := <-reqs
		if _, err := j.Asks().Approve(q.ID, scope); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	d := ask.Decision{Request: ask.Request{ID: 9, Proto: "ssh", Name: "forge.test", Port: 22, Kind: ask.KindSSHSign, Key: "SHA256:k"}, Approved: true, Scope: ask.Session}
	if err := j.approve(d); err != nil {
		t.Fatalf("the jail's approve hook on an ssh-sign decision: %v", err)
	}
	if a, r := j.ReachEntries(); len(a) != 0 || len(r) != 0 || len(changes) != 0 {
		t.Errorf("reach changed by a signature's approval: allowed %v revoked %v changes %+v", a, r, changes)
	}
	if ok, _ := j.nameConfig().Rules.Allow("forge.test", 22); ok {
		t.Error("forge.test:22 reachable after a signature's approval")
	}
}
