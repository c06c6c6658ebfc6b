package jail

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	// Flow ends go through the same cap.
	for i := 0; i < 2000; i++ {
		a.flowEnd(userstack.FlowEnd{Proto: netpolicy.ProtoUDP, Src: netip.MustParseAddrPort("10.0.2.2:5000"), Dst: netip.MustParseAddrPort("203.0.113.9:53"), Up: 1, Down: 2, UpPackets: 1, DownPackets: 1, Start: time.Now(), How: "idle"})
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

// A DNS query's record is a "dns" line (name, qtype, the resolver's
// address). A flow's end is recorded as a "flow-end" line with its bytes each way
// (zeros written, not left out), datagrams for UDP, its duration and how
// it ended, paired with its "flow" line by src.
func TestAuditFlowEnd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAudit(p, "abc", 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src := netip.MustParseAddrPort("10.0.2.2:40000")
	a.flow(userstack.Flow{Proto: netpolicy.ProtoTCP, Src: src, Dst: netip.MustParseAddrPort("203.0.113.9:443"), Target: netip.MustParseAddrPort("203.0.113.9:443"), Rule: "internet"}, start, Owner{})
	a.flowEnd(userstack.FlowEnd{Proto: netpolicy.ProtoTCP, Src: src, Dst: netip.MustParseAddrPort("203.0.113.9:443"), Up: 0, Down: 1234, Start: start, Duration: 2500 * time.Millisecond, How: "closed"})
	a.flowEnd(userstack.FlowEnd{Proto: netpolicy.ProtoUDP, Src: src, Dst: netip.MustParseAddrPort("203.0.113.9:53"), Up: 30, Down: 90, UpPackets: 1, DownPackets: 2, Start: start, Duration: time.Minute, How: "idle"})
	a.flow(userstack.Flow{Proto: netpolicy.ProtoUDP, Dst: netip.MustParseAddrPort("10.0.2.3:53"), Name: "api.test", Rule: "allow-domain api.test", QType: "AAAA"}, start, Owner{PID: 9})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := []string{
		`{"time":"2026-01-01T00:00:00Z","sandbox":"abc","event":"flow","proto":"tcp","addr":"203.0.113.9","port":443,"verdict":"allowed","rule":"internet","src":"10.0.2.2:40000"}`,
		`{"time":"2026-01-01T00:00:02.5Z","sandbox":"abc","event":"flow-end","proto":"tcp","addr":"203.0.113.9","port":443,"src":"10.0.2.2:40000","bytes_out":0,"bytes_in":1234,"duration_ms":2500,"ended":"closed"}`,
		`{"time":"2026-01-01T00:01:00Z","sandbox":"abc","event":"flow-end","proto":"udp","addr":"203.0.113.9","port":53,"src":"10.0.2.2:40000","bytes_out":30,"bytes_in":90,"datagrams_out":1,"datagrams_in":2,"duration_ms":60000,"ended":"idle"}`,
		`{"time":"2026-01-01T00:00:00Z","sandbox":"abc","event":"dns","proto":"udp","name":"api.test","addr":"10.0.2.3","port":53,"verdict":"allowed","rule":"allow-domain api.test","qtype":"AAAA"}`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines: %s", len(lines), b)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}

// The audit log is never written through a link, never blocks on a FIFO
// a session (or anyone who can write the log's directory) planted, and
// is never anything but a regular file: opened at launch and at every
// rotation through the same checks.
func TestAuditRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	// A reader on the FIFO, so that opening it for writing does not
	// fail by itself (ENXIO): the regular-file check must refuse it.
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, p := range []string{fifo, link, dir} {
		if a, err := OpenAudit(p, "x", 0); err == nil {
			a.Close()
			t.Errorf("OpenAudit(%s) opened it", p)
		}
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("written through the link: %q", b)
	}
}
