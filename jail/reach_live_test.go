package jail

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// TestChangeReachNames: names allowed and revoked while running reach
// the rules the userstack asks (the launch's entries too), with the
// launch options' validation.
func TestChangeReachNames(t *testing.T) {
	facts := HostFacts{Connected: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, ResolvConf: "nameserver 10.0.0.2\n"}
	setup, err := PrepareNames(facts, nil, []string{"allowed.test"}, []string{"bad.other.test"})
	if err != nil {
		t.Fatal(err)
	}
	var changes []netpolicy.Change
	j := New(setup, Options{OnChange: func(c netpolicy.Change) { changes = append(changes, c) }})
	defer j.n64.close()
	rules := j.nameConfig().Rules
	allowed := func(name string) bool { ok, _ := rules.Allow(name, 443); return ok }
	if !allowed("allowed.test") || allowed("other.test") {
		t.Fatal("launch rules wrong")
	}
	if _, err := j.ChangeReach(true, nil, []string{"*.other.test"}); err != nil {
		t.Fatal(err)
	}
	if !allowed("x.other.test") || allowed("bad.other.test") {
		t.Error("after allow *.other.test: x.other.test must pass, bad.other.test stay denied")
	}
	if _, err := j.ChangeReach(false, nil, []string{"allowed.test"}); err != nil {
		t.Fatal(err)
	}
	if allowed("allowed.test") {
		t.Error("a launch entry revoked still passes")
	}
	if _, err := j.ChangeReach(false, nil, []string{"never.test"}); err == nil {
		t.Error("revoking what was never allowed succeeded")
	}
	// Names are not in the blocked set: each change is logged as one.
	if len(changes) != 2 || changes[0].Event != "allowed" || changes[0].Prefix != "*.other.test" || changes[0].Rule != "allow domain *.other.test" ||
		changes[1].Event != "blocked" || changes[1].Prefix != "allowed.test" || changes[1].Rule != "revoke domain allowed.test" {
		t.Errorf("changes logged: %+v", changes)
	}
	if a, r := j.ReachEntries(); len(a) != 1 || len(r) != 1 {
		t.Errorf("entries: allowed %v revoked %v", a, r)
	}
	if !strings.Contains(j.reachSummary(), "allow domain *.other.test") {
		t.Errorf("summary: %q", j.reachSummary())
	}
	// The launch options' validation.
	for _, bad := range [][2][]string{{{"127.0.0.1"}, nil}, {{"10.1.2.3/8"}, nil}, {nil, {"http://x.test/"}}} {
		if _, err := j.ChangeReach(true, bad[0], bad[1]); err == nil {
			t.Errorf("allow %v accepted", bad)
		}
	}
}

// TestChangeReachNoAllowlist: names need a domain allowlist.
func TestChangeReachNoAllowlist(t *testing.T) {
	setup, err := Prepare(HostFacts{ResolvConf: "nameserver 10.0.0.2\n"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := New(setup, Options{})
	defer j.n64.close()
	if _, err := j.ChangeReach(true, nil, []string{"x.test"}); err == nil || !strings.Contains(err.Error(), "without a domain allowlist") {
		t.Errorf("got %v", err)
	}
}

// TestBuildLiveAllow: entries allowed while running are punched, launch
// entries revoked are not.
func TestBuildLiveAllow(t *testing.T) {
	facts := HostFacts{Connected: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, ResolvConf: "nameserver 10.0.0.2\n"}
	setup, err := Prepare(facts, []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")})
	if err != nil {
		t.Fatal(err)
	}
	pol, rp, err := setup.build(facts, reachState{
		ips:     []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")},
		revoked: []netip.Prefix{netip.MustParsePrefix("10.9.9.9/32")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := pol.Check(1, netip.MustParseAddrPort("10.1.2.3:22")); !v.Allowed {
		t.Errorf("allowed while running: %+v", v)
	}
	if v := pol.Check(1, netip.MustParseAddrPort("10.9.9.9:22")); v.Allowed {
		t.Errorf("revoked: %+v", v)
	}
	if !strings.Contains(rp.String(), "10.1.2.3") {
		t.Errorf("no kernel punch for 10.1.2.3:\n%s", rp.String())
	}
}
