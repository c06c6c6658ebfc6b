package jail

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack"
)

// TestAuditCap: under a flood the log and its one rotation stay within
// twice the cap, and the newest records are kept.
func TestAuditCap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAudit(p, "abc", 4096)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10000; i++ {
		a.block(netpolicy.Block{Proto: netpolicy.ProtoTCP, Dst: netip.MustParseAddrPort("10.1.2.3:22"), Rule: "private range 10.0.0.0/8"})
	}
	a.flow(userstack.Flow{Proto: netpolicy.ProtoTCP, Dst: netip.MustParseAddrPort("203.0.113.9:443"), Target: netip.MustParseAddrPort("203.0.113.9:443"), Rule: "internet"}, time.Time{}, Owner{})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, f := range []string{p, p + ".1"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 4096 {
			t.Errorf("%s: %d bytes, over the cap", f, fi.Size())
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", f, fi.Mode())
		}
		total += fi.Size()
	}
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"verdict":"allowed"`) || !strings.Contains(last, `"sandbox":"abc"`) {
		t.Errorf("the newest record is not last: %s", last)
	}
	if _, err := os.Stat(p + ".2"); err == nil {
		t.Error("more than one rotation kept")
	}
}
