package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

// The summary names the first process found behind each refused
// destination.
func TestSummaryNamesProcess(t *testing.T) {
	dst := netip.MustParseAddrPort("10.1.2.3:5064")
	var tl Tally
	tl.Add(Block{Proto: ProtoTCP, Dst: dst, Rule: "private range 10.0.0.0/8"})
	tl.Add(Block{Proto: ProtoTCP, Dst: dst, Rule: "private range 10.0.0.0/8", PID: 42, Argv: []string{"/usr/bin/nc", "-z"}})
	tl.Add(Block{Proto: ProtoTCP, Dst: dst, Rule: "private range 10.0.0.0/8", PID: 43, Argv: []string{"curl"}})
	tl.Add(Block{Proto: ProtoUDP, Dst: dst, Rule: "private range 10.0.0.0/8"})
	got := tl.Summary(5)
	want := "4 connections blocked: tcp 10.1.2.3:5064 (private range 10.0.0.0/8) (nc, pid 42) x3, udp 10.1.2.3:5064 (private range 10.0.0.0/8)"
	if !strings.HasPrefix(got, want) {
		t.Errorf("summary:\n%s\nwant\n%s", got, want)
	}
	if p := (Block{PID: 7}).Process(); p != "?, pid 7" {
		t.Errorf("no argv: %q", p)
	}
}
