package netpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBlockString(t *testing.T) {
	for _, tt := range []struct {
		b    Block
		want string
	}{
		{Block{Proto: ProtoTCP, Dst: ap("10.1.2.3:22"), Rule: "private range 10.0.0.0/8"}, "tcp 10.1.2.3:22 (private range 10.0.0.0/8)"},
		{Block{Proto: ProtoUDP, Dst: ap("[fd00::1]:5064"), Rule: "unique-local fc00::/7"}, "udp [fd00::1]:5064 (unique-local fc00::/7)"},
		{Block{Proto: ProtoICMP, Dst: ap("169.254.169.254:0"), Rule: "link-local/metadata 169.254.0.0/16"}, "icmp 169.254.169.254 (link-local/metadata 169.254.0.0/16)"},
	} {
		if got := tt.b.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestJSONLWriter(t *testing.T) {
	var buf bytes.Buffer
	w := NewJSONLWriter(&buf)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	blocks := []Block{
		{Time: ts, Proto: ProtoTCP, Dst: ap("10.1.2.3:22"), Rule: "private range 10.0.0.0/8"},
		{Time: ts, Proto: ProtoUDP, Dst: ap("[fd00::1]:5064"), Rule: "unique-local fc00::/7"},
	}
	for _, b := range blocks {
		if err := w.Record(b); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"time":"2026-01-02T03:04:05Z","proto":"tcp","dst":"10.1.2.3:22","rule":"private range 10.0.0.0/8"}
{"time":"2026-01-02T03:04:05Z","proto":"udp","dst":"[fd00::1]:5064","rule":"unique-local fc00::/7"}
`
	if buf.String() != want {
		t.Fatalf("JSONL:\n%s\nwant:\n%s", buf.String(), want)
	}
	// Decodes back.
	for i, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var b Block
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			t.Fatal(err)
		}
		if !b.Time.Equal(blocks[i].Time) || b.Proto != blocks[i].Proto || b.Dst != blocks[i].Dst || b.Rule != blocks[i].Rule {
			t.Errorf("line %d decodes to %+v, want %+v", i, b, blocks[i])
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

func TestJSONLWriterError(t *testing.T) {
	if err := NewJSONLWriter(failWriter{}).Record(Block{Proto: ProtoTCP}); err == nil {
		t.Error("write error not returned")
	}
	if _, err := AppendJSONL(nil, Block{Proto: Proto(0)}); err != nil {
		t.Errorf("unknown proto must still encode: %v", err)
	}
}

func TestJSONLWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w := NewJSONLWriter(&buf)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Record(Block{Proto: ProtoTCP, Dst: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(i)), Rule: "r"})
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d lines, want 20", len(lines))
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("interleaved line %q", l)
		}
	}
}

func TestSummary(t *testing.T) {
	tcp22 := Block{Proto: ProtoTCP, Dst: ap("10.1.2.3:22"), Rule: "private range 10.0.0.0/8"}
	udp := Block{Proto: ProtoUDP, Dst: ap("192.168.1.9:5064"), Rule: "private range 192.168.0.0/16"}
	icmp := Block{Proto: ProtoICMP, Dst: ap("169.254.169.254:0"), Rule: "link-local/metadata 169.254.0.0/16"}
	var many []Block
	for i := range 8 {
		many = append(many, Block{Proto: ProtoTCP, Dst: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(1000+i)), Rule: "r"})
	}
	tests := []struct {
		name   string
		blocks []Block
		limit  int
		want   string
	}{
		{"none", nil, 5, ""},
		{"one", []Block{tcp22}, 5, "1 connection blocked: tcp 10.1.2.3:22 (private range 10.0.0.0/8)"},
		{"dedupe", []Block{tcp22, udp, tcp22, icmp}, 5,
			"4 connections blocked: tcp 10.1.2.3:22 (private range 10.0.0.0/8) x2, udp 192.168.1.9:5064 (private range 192.168.0.0/16), icmp 169.254.169.254 (link-local/metadata 169.254.0.0/16)"},
		{"cap", many, 3, "8 connections blocked: tcp 10.0.0.1:1000 (r), tcp 10.0.0.1:1001 (r), tcp 10.0.0.1:1002 (r), and 5 more"},
		{"default cap", many, 0, "8 connections blocked: tcp 10.0.0.1:1000 (r), tcp 10.0.0.1:1001 (r), tcp 10.0.0.1:1002 (r), tcp 10.0.0.1:1003 (r), tcp 10.0.0.1:1004 (r), and 3 more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summary(tt.blocks, tt.limit); got != tt.want {
				t.Errorf("Summary() =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestTallyBounded(t *testing.T) {
	var tl Tally
	n := tallyLimit + 10
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		tl.Add(Block{Proto: ProtoUDP, Dst: netip.AddrPortFrom(a, 1), Rule: "r"})
	}
	tl.Add(Block{Proto: ProtoUDP, Dst: ap("10.0.0.0:1"), Rule: "r"}) // a repeat
	if tl.Total() != n+1 {
		t.Errorf("Total() = %d, want %d", tl.Total(), n+1)
	}
	if len(tl.order) != tallyLimit {
		t.Errorf("remembers %d destinations, want %d", len(tl.order), tallyLimit)
	}
	s := tl.Summary(2)
	if !strings.HasSuffix(s, fmt.Sprintf(", and %d more", n-2)) || !strings.Contains(s, "(r) x2") {
		t.Errorf("Summary = %q", s)
	}
}

// Blocks by name are summed up by name and port, whatever the address.
func TestSummaryByName(t *testing.T) {
	var tl Tally
	for _, b := range []Block{
		{Proto: ProtoUDP, Dst: netip.MustParseAddrPort("198.51.100.1:53"), Name: "evil.example", Rule: "domain not allowed"},
		{Proto: ProtoTCP, Dst: netip.MustParseAddrPort("198.51.100.1:53"), Name: "evil.example", Rule: "domain not allowed"},
		{Proto: ProtoUDP, Dst: netip.MustParseAddrPort("198.51.100.1:53"), Name: "evil.example", Rule: "domain not allowed"},
		{Proto: ProtoTCP, Dst: netip.MustParseAddrPort("198.18.0.1:443"), Name: "api.test", Rule: "sni mismatch: other.test"},
		{Proto: ProtoTCP, Dst: netip.MustParseAddrPort("[2001:2::1]:443"), Name: "api.test", Rule: "sni mismatch: other.test"},
	} {
		tl.Add(b)
	}
	want := "5 connections blocked: dns evil.example (domain not allowed) x3, tcp api.test:443 (sni mismatch: other.test) x2"
	if got := tl.Summary(5); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	b, _ := AppendJSONL(nil, Block{Proto: ProtoTCP, Dst: netip.MustParseAddrPort("198.18.0.1:443"), Name: "evil.example", Rule: "r"})
	if !strings.Contains(string(b), `"name":"evil.example","rule":"r"`) {
		t.Errorf("json %s", b)
	}
}
