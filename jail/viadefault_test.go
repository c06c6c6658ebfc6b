package jail

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Flows refused by a host route through the default gateway get a line
// of their own in the summary, naming each route once (at most
// maxViaDefaultNamed) and the option that exempts it; other refusals do
// not.
func TestSummaryNamesRoutesViaDefaultGateway(t *testing.T) {
	var sum bytes.Buffer
	j := New(&Setup{Policy: netpolicy.MustNew(netpolicy.Config{})}, Options{Summary: &sum})
	j.record(netpolicy.Block{Proto: netpolicy.ProtoTCP, Dst: netip.MustParseAddrPort("10.1.2.3:22"), Rule: "private range 10.0.0.0/8"})
	j.Close()
	if strings.Contains(sum.String(), "--internet-cidr") {
		t.Errorf("a private range's block points at --internet-cidr:\n%s", sum.String())
	}

	sum.Reset()
	j = New(&Setup{Policy: netpolicy.MustNew(netpolicy.Config{})}, Options{Summary: &sum})
	for i := range 2 * maxViaDefaultNamed {
		rule := fmt.Sprintf("host route 198.18.%d.0/24 via the default gateway", i)
		via := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 0}), 24)
		for range 2 {
			j.record(netpolicy.Block{Proto: netpolicy.ProtoTCP, Dst: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 1}), 443), Rule: rule, ViaDefault: via})
		}
	}
	j.Close()
	want := "claude-sandbox: refused as internal because the host routes it through its default gateway by a more specific route: 198.18.0.0/24, 198.18.1.0/24,"
	if !strings.Contains(sum.String(), want) || strings.Count(sum.String(), "198.18.0.0/24,") != 1 {
		t.Errorf("summary:\n%s\nwant a line starting %q naming each route once", sum.String(), want)
	}
	if strings.Contains(sum.String(), fmt.Sprintf("198.18.%d.0/24", maxViaDefaultNamed)) {
		t.Errorf("summary names more than %d routes:\n%s", maxViaDefaultNamed, sum.String())
	}
}

// The summary goes by the block's typed route (Block.ViaDefault, from
// the policy's verdict), not by its text: a rule that only reads like
// one (a name's refusal quoting it, a record made elsewhere) is not
// named, and the sink's own records carry the route.
func TestSummaryViaDefaultTyped(t *testing.T) {
	var sum bytes.Buffer
	j := New(&Setup{Policy: netpolicy.MustNew(netpolicy.Config{})}, Options{Summary: &sum})
	j.record(netpolicy.Block{Proto: netpolicy.ProtoTCP, Dst: netip.MustParseAddrPort("198.18.9.1:443"), Rule: "host route 198.18.9.0/24 via the default gateway"})
	j.Close()
	if strings.Contains(sum.String(), "--internet-cidr") {
		t.Errorf("a block without a typed route was named from its text:\n%s", sum.String())
	}

	route := netip.MustParsePrefix("198.18.9.0/24")
	pol := netpolicy.MustNew(netpolicy.Config{HostRoutes: []netip.Prefix{route}, ViaDefault: []netip.Prefix{route}})
	var got []netpolicy.Block
	s := &sink{pol: pol, record: func(b netpolicy.Block) { got = append(got, b) }}
	s.note(netpolicy.ProtoTCP, netip.MustParseAddrPort("10.0.2.100:40000"), netip.MustParseAddrPort("[::ffff:198.18.9.1]:443"))
	if len(got) != 1 || got[0].ViaDefault != route {
		t.Errorf("sink's record: %+v, want ViaDefault %v", got, route)
	}
}
