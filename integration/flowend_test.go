package integration

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// auditRecords returns the audit log's records of event ev.
func auditRecords(path, ev string) []map[string]any {
	b, _ := os.ReadFile(path)
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["event"] == ev {
			out = append(out, r)
		}
	}
	return out
}

// TestAuditFlowEnd: with --audit-log, a TCP flow's record is followed by
// its end's, paired by src, with the exact payload bytes each way (the
// sandbox sends N, the server answers N+1000 and closes) and a duration;
// an allowed UDP flow gets a flow record naming its process, and its
// mapping's end (here the sandbox's end) a flow-end record with its
// datagrams and bytes each way. The sandbox holds its UDP socket open
// (probe flows waits on stdin) until the records are read.
func TestAuditFlowEnd(t *testing.T) {
	const n = 100000
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		probe := testutil.Build(t, "./integration/probe")
		dir := testutil.MkdirFor(t, uid)
		l.serveTCP(l.world, labInternet+":7100", func(c net.Conn) {
			got, err := io.Copy(io.Discard, c)
			if err == nil {
				_, _ = c.Write(make([]byte, got+1000))
			}
		})
		l.echoUDP(l.world, labInternet+":7101")
		audit := filepath.Join(dir, "audit.jsonl")
		cmd := l.jailCmd(uid, bin, "run", "--audit-log", audit, "--", probe, "flows", labInternet+":7100", strconv.Itoa(n), labInternet+":7101")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		find := func(ev, proto string) map[string]any {
			for _, r := range auditRecords(audit, ev) {
				if r["proto"] == proto && r["addr"] == labInternet {
					return r
				}
			}
			return nil
		}
		var tcpFlow, tcpEnd, udpFlow map[string]any
		for deadline := time.Now().Add(30 * time.Second); (tcpEnd == nil || udpFlow == nil) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			tcpFlow, tcpEnd, udpFlow = find("flow", "tcp"), find("flow-end", "tcp"), find("flow", "udp")
		}
		stdin.Close()
		if err := cmd.Wait(); err != nil || !strings.Contains(stdout.String(), "tcp-read "+strconv.Itoa(n+1000)) || !strings.Contains(stdout.String(), "udp-echoed") {
			t.Errorf("the probe: %v %q\n%s", err, stdout.String(), stderr.String())
		}
		if tcpFlow == nil || tcpEnd == nil || udpFlow == nil {
			b, _ := os.ReadFile(audit)
			t.Fatalf("records missing (tcp flow %v, its end %v, udp flow %v):\n%s", tcpFlow != nil, tcpEnd != nil, udpFlow != nil, b)
		}
		if tcpEnd["src"] != tcpFlow["src"] || tcpEnd["port"] != float64(7100) ||
			tcpEnd["bytes_out"] != float64(n) || tcpEnd["bytes_in"] != float64(n+1000) ||
			tcpEnd["ended"] != "closed" || tcpEnd["duration_ms"] == nil || tcpEnd["datagrams_out"] != nil {
			t.Errorf("the TCP flow's end: %v\n(its flow: %v)", tcpEnd, tcpFlow)
		}
		if udpFlow["verdict"] != "allowed" || udpFlow["port"] != float64(7101) || !strings.Contains(strings.Join(argvOf(udpFlow), " "), "flows") {
			t.Errorf("the UDP flow's record: %v", udpFlow)
		}
		udpEnd := find("flow-end", "udp")
		if udpEnd == nil || udpEnd["src"] != udpFlow["src"] || udpEnd["datagrams_out"] != float64(1) || udpEnd["bytes_out"] != float64(5) ||
			udpEnd["datagrams_in"] != float64(1) || udpEnd["bytes_in"] != float64(5) || udpEnd["ended"] != "stack closed" {
			b, _ := os.ReadFile(audit)
			t.Errorf("the UDP flow's end: %v\n%s", udpEnd, b)
		}
	})
}
