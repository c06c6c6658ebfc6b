package jail

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/jaillayers"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// The test seam that rewrites the userstack's policy (embedrun's
// routes-only layer) is applied to every rule set the jail puts in force,
// not once at attach (issue 34 bug 8): a copy of the policy the stack
// no longer used (Options.Policy) kept allowing after the jail failed
// closed or followed a live update. Here the seam passes each rule set
// through unchanged, so the stack's policy must follow the jail's.
func TestStackPolicySeamFollowsTheJail(t *testing.T) {
	var calls int
	jaillayers.Set(jaillayers.Layers{StackPolicy: func(p *netpolicy.Policy) *netpolicy.Policy { calls++; return p }})
	t.Cleanup(func() { jaillayers.Set(jaillayers.Layers{}) })
	setup := &Setup{Policy: netpolicy.MustNew(netpolicy.Config{}), Gateway: netip.MustParseAddr("192.0.2.1")}
	j := New(setup, Options{})
	jaillayers.Set(jaillayers.Layers{}) // read once, by New
	internet := netip.MustParseAddrPort("203.0.113.9:443")
	if j.stackPol == setup.Policy || !j.stackPol.Check(netpolicy.ProtoTCP, internet).Allowed {
		t.Fatalf("the stack's policy: %p (the jail's %p), internet allowed %v; want its own, allowing",
			j.stackPol, setup.Policy, j.stackPol.Check(netpolicy.ProtoTCP, internet).Allowed)
	}
	j.setPolicy(netpolicy.MustNew(netpolicy.Config{HostRoutes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}))
	if v := j.stackPol.Check(netpolicy.ProtoTCP, internet); v.Allowed {
		t.Fatalf("after a live update the stack's policy still allows %v (%s)", internet, v.Rule)
	}
	j.FailClosed(errors.New("test"))
	if v := j.stackPol.Check(netpolicy.ProtoTCP, netip.MustParseAddrPort("198.51.100.1:443")); v.Allowed || v.Kind != netpolicy.KindBlock {
		t.Fatalf("after failing closed the stack's policy: %+v", v)
	}
	if calls != 3 {
		t.Fatalf("the seam saw %d rule sets, want 3 (attach, update, fail-closed)", calls)
	}
	// Without the seam the stack shares the jail's policy itself.
	if j2 := New(setup, Options{}); j2.stackPol != setup.Policy || j2.stackPolicy != nil || j2.routePlan != nil {
		t.Fatal("a jail without the seam has one")
	}
}
