package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// namesLab is the lab's DNS for the allowlist tests: every name it is
// asked for is logged (to prove a refused name never reaches it).
type namesLab struct {
	mu    sync.Mutex
	asked []string
	names map[string]string // lower-case name with the dot -> IPv4 (an A record) or IPv6 (AAAA)
	// dropAAAA: names whose AAAA queries get no answer at all (a
	// resolver or authority that drops them: the query times out).
	dropAAAA map[string]bool
}

func (d *namesLab) log() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

func (d *namesLab) answer(q []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil, errors.New("one question expected")
	}
	name := strings.ToLower(qs[0].Name.String())
	d.mu.Lock()
	d.asked = append(d.asked, name)
	a, known := d.names[name]
	drop := d.dropAAAA[name] && qs[0].Type == dnsmessage.TypeAAAA
	d.mu.Unlock()
	if drop {
		return nil, errors.New("dropped")
	}
	hdr := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}
	if !known {
		hdr.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, hdr)
	_ = b.StartQuestions()
	_ = b.Question(qs[0])
	_ = b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 60}
	v6 := strings.Contains(a, ":")
	if known && qs[0].Type == dnsmessage.TypeA && !v6 {
		_ = b.AResource(rh, dnsmessage.AResource{A: [4]byte(net.ParseIP(a).To4())})
	}
	if known && qs[0].Type == dnsmessage.TypeAAAA && v6 {
		_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: [16]byte(net.ParseIP(a).To16())})
	}
	return b.Finish()
}

// serveNames serves d on addr (UDP and TCP) in namespace ns.
func (l *lab) serveNames(ns, addr string, d *namesLab) {
	l.serveUDP(ns, addr, d.answer)
	l.serveTCP(ns, addr, func(c net.Conn) {
		var hdr [2]byte
		for {
			if _, err := readFull(c, hdr[:]); err != nil {
				return
			}
			q := make([]byte, int(hdr[0])<<8|int(hdr[1]))
			if _, err := readFull(c, q); err != nil {
				return
			}
			resp, err := d.answer(q)
			if err != nil {
				return
			}
			_, _ = c.Write(append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...))
		}
	})
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// selfSigned returns a certificate for names and its PEM.
func selfSigned(t *testing.T, names ...string) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// serveHTTPS serves "hello-https" over TLS with cert on addr in ns.
func (l *lab) serveHTTPS(ns, addr string, cert tls.Certificate) {
	var ln net.Listener
	if err := inNetns(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		l.t.Fatalf("listen %s: %v", addr, err)
	}
	l.track(ln)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hello-https " + r.Host))
	}), ReadHeaderTimeout: 10 * time.Second}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		_ = srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}))
	}()
}

// TestJailDomainAllowlist: with --allow-domain the sandbox reaches the
// allowed names (HTTPS with curl, raw TCP on another port, UDP), and
// nothing else: the name's IP literal, a name not on the list (NXDOMAIN,
// and the lab's DNS server never asked), an SNI naming another host on
// the allowed address, an allowed name that resolves into a private range,
// and UDP 443; every refusal is logged by name.
func TestJailDomainAllowlist(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (scripts/test.sh installs it)")
	}
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		const internal = "10.1.2.3"
		ip(t, "-n", l.world, "addr", "add", internal+"/32", "dev", "lo")
		d := &namesLab{names: map[string]string{
			"api.test.": labInternet, "other.test.": labInternet, "evil.test.": labInternet, "internal.test.": internal,
			"no-aaaa.test.": labInternet,
		}, dropAAAA: map[string]bool{"no-aaaa.test.": true}}
		l.serveNames(l.world, labDNS+":53", d)
		cert, certPEM := selfSigned(t, "api.test", "other.test")
		l.serveHTTPS(l.world, labInternet+":443", cert)
		l.echoTCP(l.world, labInternet+":7000")
		l.echoUDP(l.world, labInternet+":7001")
		l.echoUDP(l.world, labInternet+":443")
		l.echoUDP(l.world, labInternet+":5000")
		l.echoTCP(l.world, internal+":80")

		dir, err := os.MkdirTemp("/tmp", "claude-sandbox-domains-")
		must(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		must(t, os.Chmod(dir, 0o777))
		must(t, os.WriteFile(filepath.Join(dir, "ca.pem"), certPEM, 0o644))
		probe := testutil.Build(t, "./integration/probe")
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		script := `P=` + probe + `
echo "https:$(curl -sS --max-time 10 --cacert /tmp/lab/ca.pem https://api.test/ 2>&1)"
echo "tcp:$($P tcp api.test:7000)"
echo "udp:$($P udp api.test:7001)"
echo "literal-tcp:$($P tcp ` + labInternet + `:7000)"
echo "literal-udp:$($P udp ` + labInternet + `:7001)"
echo "evil:$($P resolve evil.test)"
A=$($P resolve api.test | cut -d' ' -f1)
echo "synthetic:$A"
echo "mismatch:$(curl -sS --max-time 10 --cacert /tmp/lab/ca.pem --resolve other.test:443:$A https://other.test/ 2>&1; echo " rc=$?")"
echo "same-address:$(curl -sS --max-time 10 --cacert /tmp/lab/ca.pem --resolve api.test:443:$A https://api.test/ 2>&1)"
echo "internal:$($P tcp internal.test:80)"
echo "quic:$($P udp api.test:443)"
echo "udp-5000:$($P udp api.test:5000)"
echo "udp-no-aaaa:$($P udp no-aaaa.test:5000)"
`
		// Controls, with the jail off: every server answers, so each
		// refusal below is the allowlist's.
		for _, target := range []string{labInternet + ":7000", internal + ":80"} {
			if got, r := l.probeIn(uid, []string{"--net=host"}, "tcp", target); got != "ok" {
				t.Fatalf("control: tcp %s with --net=host: %s (%v)", target, got, r)
			}
		}
		ctl := testutil.Run(t, l.jailCmd(uid, bin, "run", "--net=host", "--ro-bind", dir, "/tmp/lab", "--",
			"curl", "-sS", "--max-time", "10", "--cacert", "/tmp/lab/ca.pem", "--resolve", "other.test:443:"+labInternet, "https://other.test/"))
		if !strings.Contains(ctl.Stdout, "hello-https other.test") {
			t.Fatalf("control: https other.test with --net=host: %v", ctl)
		}

		r, got, logf := l.runLabScript(t, uid, bin, dir, script, ":", "--allow-domain", "api.test", "--allow-domain", "internal.test", "--allow-domain", "no-aaaa.test")
		check := func(key string, ok bool, want string) {
			t.Helper()
			if !ok {
				t.Errorf("%s: %q, want %s (%v)", key, got[key], want, r)
			}
		}
		check("https", got["https"] == "hello-https api.test", "hello-https api.test")
		check("tcp", got["tcp"] == "ok", "ok")
		check("udp", got["udp"] == "ok", "ok")
		check("literal-tcp", blockedAtOnce(got["literal-tcp"]), "an immediate refusal")
		check("literal-udp", blockedAtOnce(got["literal-udp"]), "an immediate refusal")
		check("evil", strings.Contains(got["evil"], "no such host"), "no such host (NXDOMAIN)")
		syn := net.ParseIP(got["synthetic"])
		_, pool, _ := net.ParseCIDR("198.18.0.0/15")
		check("synthetic", syn != nil && pool.Contains(syn), "an address of 198.18.0.0/15")
		check("mismatch", !strings.Contains(got["mismatch"], "hello-https") && !strings.HasSuffix(got["mismatch"], "rc=0"), "a failed connection")
		check("same-address", got["same-address"] == "hello-https api.test", "hello-https api.test (control for mismatch)")
		check("internal", got["internal"] != "ok" && strings.HasPrefix(got["internal"], "err:"), "a refusal")
		check("quic", got["quic"] == "err:ECONNREFUSED", "err:ECONNREFUSED (ICMP port unreachable)")
		check("udp-5000", got["udp-5000"] == "ok", "ok (UDP to an allowed name on another port than 443 is relayed)")
		check("udp-no-aaaa", got["udp-no-aaaa"] == "ok", "ok (relayed over the A answer while the AAAA query times out)")

		// The lab's DNS server: asked for the allowed names, never for
		// evil.test (nor other.test, which the sandbox never resolved).
		asked := d.log()
		if !contains(asked, "api.test.") {
			t.Errorf("the lab DNS was never asked for api.test: %v", asked)
		}
		for _, n := range asked {
			if n == "evil.test." || n == "other.test." {
				t.Errorf("the lab DNS was asked for %s: %v", n, asked)
			}
		}

		// The block log names the domains.
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
		want := []struct{ proto, name, rule string }{
			{"udp", "evil.test", netpolicy.DomainNotAllowed},
			{"tcp", "api.test", "sni mismatch: other.test"},
			{"tcp", "internal.test", "resolves only to blocked addresses: 10.1.2.3"},
			{"udp", "api.test", "QUIC"},
			{"tcp", "", "not on the domain allowlist"},
			{"udp", "", "not on the domain allowlist"},
		}
		for _, w := range want {
			found := false
			for _, rec := range recs {
				if rec.Proto.String() == w.proto && rec.Name == w.name && strings.Contains(rec.Rule, w.rule) {
					found = true
				}
			}
			if !found {
				t.Errorf("no block record %s %q (%s...) in\n%s", w.proto, w.name, w.rule, b)
			}
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// BenchmarkJailDomains compares the jail with and without the domain
// allowlist: connection rate and per-connection time to first byte
// (connect, send a zero byte, read its echo, close: the client speaks
// first, so the allowlist's peek ends with that byte, which is neither TLS
// nor HTTP), a server that speaks
// first (the allowlist dials only after its 250 ms peek timeout), and
// 1-byte request/response on one connection. Every connection dials a
// name, as a client would (Go's resolver asks the jail's DNS each time);
// "literal" dials the address; "allowlist, resolved once" resolves the
// name once and dials its synthetic address (the allowlist's connect path
// without a query per connection). One launch per row and iteration,
// each printed; nothing asserted. Run: go test ./integration/ -run '^$'
// -bench JailDomains -benchtime 1x. CLAUDE_SANDBOX_BENCH_BASE, when set,
// names another claude-sandbox binary (one built before a change) whose
// allowlist rows are measured too, interleaved ("base: ...").
func BenchmarkJailDomains(b *testing.B) {
	l := newLab(b)
	d := &namesLab{names: map[string]string{"api.test.": labInternet}}
	l.serveNames(l.world, labDNS+":53", d)
	l.serveTCP(l.world, labInternet+":5103", func(c net.Conn) { // 1-byte echo
		var x [1]byte
		for {
			if _, err := c.Read(x[:]); err != nil {
				return
			}
			if _, err := c.Write(x[:]); err != nil {
				return
			}
		}
	})
	l.serveTCP(l.world, labInternet+":5104", func(c net.Conn) { // greets, waits for the close
		_, _ = c.Write([]byte{'g'})
		var x [1]byte
		_, _ = c.Read(x[:])
	})
	client := testutil.Build(b, "./integration/netbench")
	probe := testutil.Build(b, "./integration/probe")
	bin := testutil.Build(b, "./cmd/claude-sandbox")
	type row struct {
		name string
		opts []string
		host string // "": the synthetic address, resolved once
		bin  string
	}
	rows := []row{
		{"jail, literal", nil, labInternet, bin},
		{"jail, by name", nil, "api.test", bin},
		{"allowlist, by name", []string{"--allow-domain", "api.test"}, "api.test", bin},
		{"allowlist, resolved once", []string{"--allow-domain", "api.test"}, "", bin},
	}
	if base := os.Getenv("CLAUDE_SANDBOX_BENCH_BASE"); base != "" {
		for _, r := range rows[2:] {
			rows = append(rows, row{"base: " + r.name, r.opts, r.host, base})
		}
	}
	out := map[string][][]string{}
	for i := 0; i < b.N; i++ {
		order := rows
		if i%2 == 1 && len(rows) == 6 {
			// The base's rows first every other time: a row's place in
			// the sequence is not to favour either binary.
			order = []row{rows[0], rows[1], rows[4], rows[5], rows[2], rows[3]}
		}
		for _, r := range order {
			host := r.host
			if host == "" {
				host = "$A"
			}
			steps := "cpse " + host + ":5103 500 cps " + host + ":5104 8 rr " + host + ":5103 2000"
			args := append(append([]string{"run"}, r.opts...), "--", "sh", "-c",
				"A=$("+probe+" resolve api.test | cut -d' ' -f1) && exec "+client+" "+steps)
			res := testutil.Run(b, l.jailCmd(0, r.bin, args...))
			if res.Code != 0 {
				b.Fatalf("%s: %v", r.name, res)
			}
			out[r.name] = append(out[r.name], strings.Split(strings.TrimSpace(res.Stdout), "\n"))
		}
	}
	// cps/cpse: "cps ADDR CONN_PER_S FAILED P50_US P99_US MAX_US"; rr: "rr MEAN_US P50_US".
	field := func(line string, i int) string {
		f := strings.Fields(line)
		if i < len(f) {
			return f[i]
		}
		return "?"
	}
	b.Logf("%-26s %12s %12s %12s %18s %12s", "", "conn/s", "p50 us", "p99 us", "server-first p50", "rr p50 us")
	for _, r := range rows {
		for _, o := range out[r.name] {
			if len(o) < 3 {
				b.Fatalf("%s: output %q", r.name, o)
			}
			b.Logf("%-26s %12s %12s %12s %18s %12s", r.name, field(o[0], 2), field(o[0], 4), field(o[0], 5), field(o[1], 4), field(o[2], 2))
		}
	}
}

// sandbox.Spec.AllowDomains, through examples/embed: the allowed name
// connects, its address and a name not on the list are refused, and the
// embedder's events name the domain. As root and as nobody.
func TestEmbedDomainAllowlist(t *testing.T) {
	bin := testutil.Build(t, "./examples/embed")
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		d := &namesLab{names: map[string]string{"api.test.": labInternet, "evil.test.": labInternet}}
		l.serveNames(l.world, labDNS+":53", d)
		l.echoTCP(l.world, labInternet+":80")
		dir := testutil.MkdirFor(t, uid)
		dial := strings.Join([]string{"api.test:80", labInternet + ":80", "evil.test:80"}, ",")
		r := testutil.Run(t, l.jailCmd(uid, bin, "-dir", dir, "-dial", dial, "-allow-domain", "api.test"))
		if r.Code != 0 {
			t.Fatalf("examples/embed: %v", r)
		}
		for _, want := range []string{
			"inside: api.test:80: connected\n",
			"blocked: tcp " + labInternet + ":80 (not on the domain allowlist",
			"inside: " + labInternet + ":80: dial tcp " + labInternet + ":80: connect: connection refused\n",
			"blocked: dns evil.test (domain not allowed)\n",
			"inside: evil.test:80: dial tcp: lookup evil.test",
		} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("output lacks %q:\n%v", want, r)
			}
		}
		if contains(d.log(), "evil.test.") {
			t.Errorf("the lab DNS was asked for evil.test: %v", d.log())
		}
	})
}

// runLabScript runs script (sh, written to dir, which the sandbox sees at
// /tmp/lab) in a jail of uid's with args, its block log at
// dir/blocked.jsonl. It returns the run, the script's output lines
// keyed by what comes before sep (the rest trimmed), and the block log's
// path.
func (l *lab) runLabScript(t *testing.T, uid int, bin, dir, script, sep string, args ...string) (testutil.Result, map[string]string, string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(dir, "lab.sh"), []byte(script), 0o755))
	logf := filepath.Join(dir, "blocked.jsonl")
	argv := append(append([]string{"run"}, args...), "--log-blocked", logf, "--ro-bind", dir, "/tmp/lab", "--", "sh", "/tmp/lab/lab.sh")
	r := testutil.Run(t, l.jailCmd(uid, bin, argv...))
	t.Logf("inside:\n%s", r.Stdout)
	got := map[string]string{}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if k, v, ok := strings.Cut(line, sep); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	return r, got, logf
}
