package integration

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// With --allow-domain a connect to a name fails the way it fails for an
// address (issue 30): a name that resolves only to a blocked address (a
// rebind into 10/8) and a closed port are refused at once (ECONNREFUSED),
// a host that does not answer times out, and only a host that accepts
// gives a connected socket. The SNI check still runs before anything of
// the sandbox's reaches the host: a ClientHello for another name on the
// allowed name's address is reset, and the host (dialed at the SYN) reads
// nothing. Before, every one of those connects succeeded at once (the
// SYN was answered before the host was dialed), as `nc -z` showed.
func TestJailDomainConnectLikeKernel(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (scripts/test.sh installs it)")
	}
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		const internal, void = "10.1.2.3", "203.0.113.77"
		ip(t, "-n", l.world, "addr", "add", internal+"/32", "dev", "lo")
		ip(t, "-n", l.world, "route", "add", "blackhole", void+"/32") // SYNs vanish, no ICMP
		d := &namesLab{names: map[string]string{"api.test.": labInternet, "internal.test.": internal, "void.test.": void}}
		l.serveNames(l.world, labDNS+":53", d)
		cert, certPEM := selfSigned(t, "api.test", "other.test")
		l.serveHTTPS(l.world, labInternet+":443", cert)
		l.echoTCP(l.world, labInternet+":7000")
		l.echoTCP(l.world, internal+":80")
		got7443 := make(chan int, 8) // bytes each connection to :7443 read
		l.serveTCP(l.world, labInternet+":7443", func(c net.Conn) {
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			b, _ := io.ReadAll(c)
			got7443 <- len(b)
		})

		dir, err := os.MkdirTemp("/tmp", "claude-sandbox-domconn-")
		must(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		must(t, os.Chmod(dir, 0o777))
		must(t, os.WriteFile(filepath.Join(dir, "ca.pem"), certPEM, 0o644))
		probe := testutil.Build(t, "./integration/probe")
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		// The client's own connect timeout bounds the blackholed case
		// (the jail's dial gives up later, silently).
		script := `P=` + probe + `
echo "rebind:$($P connect internal.test:80 5000)"
echo "refused:$($P connect api.test:7999 5000)"
echo "blackhole:$($P connect void.test:80 1500)"
echo "open:$($P connect api.test:7000 5000)"
A=$($P resolve api.test | cut -d' ' -f1)
echo "https:$(curl -sS --max-time 10 --cacert /tmp/lab/ca.pem https://api.test/ 2>&1)"
echo "mismatch:$(curl -sS --max-time 10 --cacert /tmp/lab/ca.pem --resolve other.test:7443:$A https://other.test:7443/ 2>&1; echo " rc=$?")"
`
		// Control, with the jail off: the rebind target and the name's
		// host answer, so each refusal below is the jail's.
		for _, target := range []string{internal + ":80", labInternet + ":7000"} {
			if got, r := l.probeIn(uid, []string{"--net=host"}, "connect", target, "5000"); got != "ok" {
				t.Fatalf("control: connect %s with --net=host: %s (%v)", target, got, r)
			}
		}

		r, got, logf := l.runLabScript(t, uid, bin, dir, script, ":", "--allow-domain", "api.test", "--allow-domain", "internal.test", "--allow-domain", "void.test")
		check := func(key string, ok bool, want string) {
			t.Helper()
			if !ok {
				t.Errorf("%s: %q, want %s (%v)", key, got[key], want, r)
			}
		}
		check("rebind", got["rebind"] == "err:ECONNREFUSED", "err:ECONNREFUSED")
		check("refused", got["refused"] == "err:ECONNREFUSED", "err:ECONNREFUSED")
		check("blackhole", got["blackhole"] == "err:timeout", "err:timeout (no connect)")
		check("open", got["open"] == "ok", "ok")
		check("https", got["https"] == "hello-https api.test", "hello-https api.test")
		check("mismatch", !strings.HasSuffix(got["mismatch"], "rc=0"), "a failed connection")

		// The mismatched flow's host was connected (at the SYN) and read
		// nothing: the ClientHello never reached it.
		select {
		case n := <-got7443:
			if n != 0 {
				t.Errorf("the host behind the mismatched SNI read %d bytes, want none", n)
			}
		case <-time.After(30 * time.Second): // failsafe
			t.Error("the host behind the mismatched SNI was never connected")
		}

		b, err := os.ReadFile(logf)
		must(t, err)
		var recs []netpolicy.Block
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var rec netpolicy.Block
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("block log line %q: %v", line, err)
			}
			recs = append(recs, rec)
		}
		for _, w := range []struct{ name, rule string }{
			{"internal.test", "resolves only to blocked addresses: 10.1.2.3"},
			{"api.test", "sni mismatch: other.test"},
		} {
			found := false
			for _, rec := range recs {
				if rec.Proto == netpolicy.ProtoTCP && rec.Name == w.name && strings.Contains(rec.Rule, w.rule) {
					found = true
				}
			}
			if !found {
				t.Errorf("no block record tcp %q (%s...) in\n%s", w.name, w.rule, b)
			}
		}
	})
}
