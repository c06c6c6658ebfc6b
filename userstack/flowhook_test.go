package userstack

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Config.OnFlow is told of each TCP flow let through with the rule its
// admission found: the allowlist's for a name, the policy's for an
// address, and for DNS over TCP to the allowlist's own resolver none of
// the allowlist's refusals (it once asked the allowlist again for the
// empty name, and logged an allowed flow as "domain not allowed").
func TestOnFlowRules(t *testing.T) {
	flows := make(chan Flow, 8)
	h := newNamesHarnessWith(t, map[string][]uint16{"api.test": {7000}}, NameConfig{PeekTimeout: time.Minute},
		func(c *Config) { c.OnFlow = func(f Flow) { flows <- f } }, netip.MustParsePrefix("192.168.1.50/32"))
	h.zone.addA("api.test", "203.0.113.10")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	// The query itself, allowed: one record (not a flow: QType set).
	if got, want := <-flows, (Flow{Proto: netpolicy.ProtoUDP, Dst: netip.AddrPortFrom(dns4, 53), Name: "api.test", Rule: "allow-domain api.test", QType: "A"}); got != want {
		t.Errorf("the query's record: %+v, want %+v", got, want)
	}
	ip := netip.MustParseAddrPort("192.168.1.50:5064")
	for i, tt := range []struct {
		dst  netip.AddrPort
		want Flow
	}{
		{netip.AddrPortFrom(api, 7000), Flow{Proto: netpolicy.ProtoTCP, Dst: netip.AddrPortFrom(api, 7000), Name: "api.test", Rule: "allow-domain api.test"}},
		{ip, Flow{Proto: netpolicy.ProtoTCP, Dst: ip, Target: ip, Rule: h.st.cfg.Policy.Check(netpolicy.ProtoTCP, ip).Rule}},
		{netip.AddrPortFrom(gateway4, 53), Flow{Proto: netpolicy.ProtoTCP, Dst: netip.AddrPortFrom(gateway4, 53), Rule: "dns (the domain allowlist's resolver)"}},
	} {
		src := netip.AddrPortFrom(jail4, uint16(45000+i))
		h.send(tcpSeg{src: src, dst: tt.dst, flags: header.TCPFlagSyn, seq: 1000}.bytes())
		tt.want.Src = src // the sandbox's end, by which its process is found
		if got := <-flows; got != tt.want {
			t.Errorf("flow to %v: %+v, want %+v", tt.dst, got, tt.want)
		}
	}
	if got := h.st.cfg.Policy.Check(netpolicy.ProtoTCP, ip).Rule; got != "allow-ip 192.168.1.50" {
		t.Errorf("the policy's rule for %v: %q", ip, got)
	}
}
