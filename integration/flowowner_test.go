package integration

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

func argvOf(r map[string]any) []string {
	var out []string
	a, _ := r["argv"].([]any)
	for _, s := range a {
		str, _ := s.(string)
		out = append(out, str)
	}
	return out
}

// TestFlowOwnerAudit: with --audit-log, a flow let through and a flow
// refused each name the process behind them (its pid, argv and working
// directory, from the sandbox's /proc); an argv holding control
// characters is recorded escaped; the refused flow's process is named in
// the exit summary. The allowed flow's server holds the connection open
// until its record is written (the lookup runs off the packet path,
// after the flow was let through).
func TestFlowOwnerAudit(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		probe := testutil.Build(t, "./integration/probe")
		dir := testutil.MkdirFor(t, uid)

		// Refused: the lab device is a private address.
		audit := filepath.Join(dir, "refused.jsonl")
		hostile := "mark\x1b]52;c;AAAA\x07\r"
		r := testutil.Run(t, l.jailCmd(uid, bin, "run", "--audit-log", audit, "--", probe, "tcp", labDevice+":5064", hostile))
		if !strings.HasPrefix(r.Stdout, "err:") {
			t.Fatalf("the refused flow passed: %+v", r)
		}
		var refused map[string]any
		for _, f := range auditRecords(audit, "flow") {
			if f["verdict"] == "refused" && f["addr"] == labDevice {
				refused = f
			}
		}
		if refused == nil {
			t.Fatalf("no refused flow in the audit log")
		}
		argv := argvOf(refused)
		if pid, _ := refused["pid"].(float64); pid < 1 || len(argv) != 4 || filepath.Base(argv[0]) != "probe" || argv[1] != "tcp" || refused["cwd"] == "" {
			t.Errorf("refused flow's process: %v", refused)
		}
		if len(argv) == 4 && argv[3] != `mark\x1b]52;c;AAAA\x07\x0d` {
			t.Errorf("argv with control characters recorded as %q", argv[3])
		}
		if !strings.Contains(r.Stderr, "tcp "+labDevice+":5064 (") || !strings.Contains(r.Stderr, ") (probe, pid ") {
			t.Errorf("the exit summary does not name the process:\n%s", r.Stderr)
		}
		if strings.Contains(r.Stderr, "\x1b]52") {
			t.Errorf("a control sequence of the sandbox's argv reached the terminal")
		}

		// The block log's record names it too.
		blocked := filepath.Join(dir, "blocked.jsonl")
		testutil.Run(t, l.jailCmd(uid, bin, "run", "--log-blocked", blocked, "--", probe, "tcp", labDevice+":5064", "block-mark"))
		if b, _ := os.ReadFile(blocked); !strings.Contains(string(b), `"pid":`) || !strings.Contains(string(b), `"block-mark"]`) {
			t.Errorf("the block log's record does not name the process:\n%s", b)
		}

		// A refused UDP flow (the socket stays open while the probe
		// waits for its answer).
		audit = filepath.Join(dir, "udp.jsonl")
		r = testutil.Run(t, l.jailCmd(uid, bin, "run", "--audit-log", audit, "--", probe, "udp", labDevice+":5065", "udp-mark"))
		var udp map[string]any
		for _, f := range auditRecords(audit, "flow") {
			if f["verdict"] == "refused" && f["proto"] == "udp" && f["addr"] == labDevice {
				udp = f
			}
		}
		if udp == nil || !slices.Contains(argvOf(udp), "udp-mark") {
			t.Errorf("the refused UDP flow's record: %v\n%s", udp, r.Stderr)
		}

		// Allowed: the lab's internet; the server answers once the
		// audit log holds the flow.
		release := make(chan struct{})
		l.serveTCP(l.world, labInternet+":7000", func(c net.Conn) {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
			_, _ = c.Write([]byte(line))
		})
		audit = filepath.Join(dir, "allowed.jsonl")
		cmd := l.jailCmd(uid, bin, "run", "--audit-log", audit, "--", probe, "tcp", labInternet+":7000", "allowed-mark")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var allowed map[string]any
		for deadline := time.Now().Add(20 * time.Second); allowed == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for _, f := range auditRecords(audit, "flow") {
				if f["verdict"] == "allowed" && f["addr"] == labInternet {
					allowed = f
				}
			}
		}
		close(release)
		if err := cmd.Wait(); err != nil || !strings.HasPrefix(stdout.String(), "ok") {
			t.Errorf("the allowed flow: %v %q\n%s", err, stdout.String(), stderr.String())
		}
		if allowed == nil {
			t.Fatalf("no allowed flow in the audit log")
		}
		argv = argvOf(allowed)
		if pid, _ := allowed["pid"].(float64); pid < 1 || !slices.Contains(argv, "allowed-mark") || filepath.Base(argv[0]) != "probe" {
			t.Errorf("allowed flow's process: %v", allowed)
		}
	})
}

// TestFlowOwnerIPv6: the process behind refused IPv6 flows (TCP and UDP,
// to a unique-local lab device) is found too.
func TestFlowOwnerIPv6(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		probe := testutil.Build(t, "./integration/probe")
		dir := testutil.MkdirFor(t, uid)
		for _, proto := range []string{"tcp", "udp"} {
			audit := filepath.Join(dir, proto+".jsonl")
			r := testutil.Run(t, l.jailCmd(uid, bin, "run", "--audit-log", audit, "--", probe, proto, "["+labDevice6+"]:22", proto+"6-mark"))
			var rec map[string]any
			for _, f := range auditRecords(audit, "flow") {
				if f["verdict"] == "refused" && f["proto"] == proto && f["addr"] == labDevice6 {
					rec = f
				}
			}
			if rec == nil || !slices.Contains(argvOf(rec), proto+"6-mark") {
				t.Errorf("%s: the refused flow's record: %v\n%+v", proto, rec, r)
			}
		}
	})
}
