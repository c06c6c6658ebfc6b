package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// boundCases are attempts to reach a blocked range through an interface
// the program chooses itself; for each, a server listens in the lab (or
// nothing does, and only the kernel's refusal is accepted).
func boundCases() []string {
	var cs []string
	for _, dst := range []string{
		labDevice + ":22",               // private 10/8
		"172.16.5.5:80",                 // private 172.16/12
		"192.168.5.5:80",                // private 192.168/16
		labCGNAT + ":80",                // CGNAT
		labMetadata + ":80",             // link-local, metadata
		labPeer + ":80",                 // the host's connected subnet
		"127.0.0.1:8080",                // loopback (the host's, through the stack)
		"240.0.0.5:80",                  // reserved
		"[" + labDevice6 + "]:22",       // unique-local
		"[" + labPeer6 + "]:80",         // the host's connected IPv6 subnet
		"[64:ff9b::a14:5]:22",           // NAT64 form of the lab device
		"[::ffff:" + labDevice + "]:22", // IPv4-mapped form
	} {
		cs = append(cs, "tcp-bound tun0 "+dst, "tcp-unicast-if tun0 "+dst)
	}
	// Ranges with no lab server: only a refusal is accepted.
	for _, dst := range []string{"0.1.2.3:80", "[fec0::1]:80", "[::1]:8080", "[64:ff9b:1::a14:5]:22", "[fd00:20::5]:80"} {
		cs = append(cs, "tcp-bound tun0 "+dst, "tcp-unicast-if tun0 "+dst)
	}
	cs = append(cs,
		"udp-bound tun0 [ff02::1]:5353",
		"udp-bound tun0 255.255.255.255:5064",
		"udp-bound tun0 "+labDevice+":5064",
		"udp-unicast-if tun0 "+labDevice+":5064",
		"udp-bound tun0 224.0.0.251:5353",
		"tcp-bound tun0 [fe80::1%tun0]:80",
		"tcp [fe80::1%tun0]:80",
		"udp [fe80::1%tun0]:5064",
	)
	return cs
}

// boundLab starts a server on every boundCases destination that can have
// one, so that what gets through is seen as "ok".
func boundLab(l *lab) {
	l.addIPv6()
	ip(l.t, "-n", l.world, "addr", "add", "172.16.5.5/32", "dev", "lo")
	ip(l.t, "-n", l.world, "addr", "add", "192.168.5.5/32", "dev", "lo")
	ip(l.t, "-n", l.world, "addr", "add", "240.0.0.5/32", "dev", "lo")
	l.echoTCP(l.world, labDevice+":22")
	l.echoUDP(l.world, labDevice+":5064")
	for _, a := range []string{"172.16.5.5", "192.168.5.5", labCGNAT, labMetadata, labPeer, "240.0.0.5"} {
		l.echoTCP(l.world, a+":80")
	}
	l.echoTCP(l.world, "["+labDevice6+"]:22")
	l.echoTCP(l.world, "["+labPeer6+"]:80")
	l.echoTCP(l.host, "127.0.0.1:8080")
	l.echoTCP(l.world, labInternet+":80")
}

// runBatch runs egressprobe's batch of cases in one sandbox started through
// embedrun with the given layer, and returns each case's result.
func (l *lab) runBatch(uid int, layer string, cases []string) map[string]string {
	l.t.Helper()
	probe := testutil.Build(l.t, "./integration/egressprobe")
	p, err := plan.Build(plan.Options{Command: append([]string{probe, "batch"}, cases...), UID: uid, GID: uid, HostRoot: uid == 0, Net: plan.NetJail})
	if err != nil {
		l.t.Fatal(err)
	}
	r := testutil.Run(l.t, l.embedRun(uid, []string{"-layer=" + layer}, p))
	got := map[string]string{}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if c, res, ok := strings.Cut(line, " => "); ok {
			got[c] = res
		}
	}
	if len(got) != len(cases) {
		l.t.Fatalf("layer %s: %d results for %d cases: %v", layer, len(got), len(cases), r)
	}
	return got
}

// A program that picks its interface (SO_BINDTODEVICE, IP_UNICAST_IF, a
// scoped IPv6 link-local address) still cannot reach a blocked range: the
// kernel layer holds on its own (the userstack's policy taken away through
// the Go API), and the userstack holds on its own (the kernel layer taken
// away). The internet stays reachable through a bound socket (control).
func TestJailBoundInterfaceEachLayer(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		boundLab(l)
		cases := append(boundCases(), "tcp-bound tun0 "+labInternet+":80", "tcp-unicast-if tun0 "+labInternet+":80")
		for _, layer := range []string{"routes-only", "stack-only", "both"} {
			got := l.runBatch(uid, layer, cases)
			for _, c := range cases {
				res := got[c]
				if strings.HasSuffix(c, labInternet+":80") {
					if res != "ok" {
						t.Errorf("%s: %s: %s, want ok (control)", layer, c, res)
					}
					continue
				}
				// "ok" is an escape. With the kernel layer on, the
				// refusal is immediate (the filter's RST or EPERM, or the
				// kernel refusing the attempt itself); the userstack alone
				// may also drop what it cannot route (loopback, multicast
				// sent out of the TUN), which is no escape either.
				ok := strings.HasPrefix(res, "err:")
				if layer != "stack-only" {
					ok = ok && res != "err:timeout"
				}
				if !ok {
					t.Errorf("%s alone: %s: %s, want it refused", layer, c, res)
				}
			}
		}
	})
}

// Nothing inside can change the kernel layer's filter or add a routing
// rule, not even root with every capability in a nested user namespace;
// the bound escape stays refused after the attempts.
func TestJailFilterImmutable(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.world, labDevice+":22")
		got := l.runBatch(uid, "routes-only", []string{"filter-flush", "nested filter-flush", "rule-add", "nested rule-add", "tcp-bound tun0 " + labDevice + ":22"})
		for _, c := range []string{"rule-add", "nested rule-add"} {
			if r := got[c]; r != "err:EPERM" {
				t.Errorf("%s inside the jail: %s, want err:EPERM", c, r)
			}
		}
		if r := got["filter-flush"]; r != "err:EPERM" {
			t.Errorf("filter-flush inside the jail: %s, want err:EPERM", r)
		}
		if r := got["nested filter-flush"]; r != "err:EPERM" {
			t.Errorf("filter-flush from a nested user namespace: %s, want it refused", r)
		}
		if r := got["tcp-bound tun0 "+labDevice+":22"]; r != "err:ECONNREFUSED" {
			t.Errorf("bound connect after the attempts: %s, want err:ECONNREFUSED (the filter's RST)", r)
		}
	})
}

// liveSandbox is a sandbox running egressprobe serve: the test asks it to
// try destinations while it changes the lab host's network.
type liveSandbox struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *strings.Builder
	in     io.WriteCloser
	out    *bufio.Reader
	log    string
}

// startLive starts egressprobe serve in the jail, through the shipped
// binary (layer "", flags are run options) or through embedrun with a
// layer taken away (flags are embedrun's).
func (l *lab) startLive(t *testing.T, uid int, layer string, flags ...string) *liveSandbox {
	probe := testutil.Build(t, "./integration/egressprobe")
	log := filepath.Join(testutil.MkdirFor(t, uid), "blocked.jsonl")
	var cmd *exec.Cmd
	if layer == "" {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		cmd = l.jailCmd(uid, bin, append(append([]string{"run", "--log-blocked", log}, flags...), "--", probe, "serve")...)
	} else {
		p, err := plan.Build(plan.Options{Command: []string{probe, "serve"}, UID: uid, GID: uid, HostRoot: uid == 0, Net: plan.NetJail})
		if err != nil {
			t.Fatal(err)
		}
		cmd = l.embedRun(uid, append([]string{"-layer=" + layer, "-log-blocked", log}, flags...), p)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("sandbox stderr: %s", stderr.String())
		}
	})
	return &liveSandbox{t: t, cmd: cmd, stderr: &stderr, in: in, out: bufio.NewReader(out), log: log}
}

// try runs one probe in the sandbox and returns its result.
func (s *liveSandbox) try(probe string) string {
	s.t.Helper()
	if _, err := io.WriteString(s.in, probe+"\n"); err != nil {
		s.t.Fatalf("ask %q: %v", probe, err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		s.t.Fatalf("answer to %q: %v", probe, err)
	}
	return strings.TrimSpace(line)
}

// waitLogged waits (10 s at most) for the block log to record event
// ("blocked" or "unblocked") for prefix, and returns how long after since
// it was seen.
func (s *liveSandbox) waitLogged(event, prefix string, since time.Time) time.Duration {
	s.t.Helper()
	want := fmt.Sprintf(`"event":%q,"prefix":%q`, event, prefix)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, _ := os.ReadFile(s.log)
		if strings.Contains(string(b), want) {
			return time.Since(since)
		}
	}
	b, _ := os.ReadFile(s.log)
	s.t.Fatalf("the block log never recorded %s %s:\n%s", event, prefix, b)
	return 0
}

// refusedFromNowOn polls probe until it is refused (10 s at most), then
// asserts it stays refused.
func (s *liveSandbox) refusedFromNowOn(probe string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.try(probe) == "ok" {
		if time.Now().After(deadline) {
			s.t.Errorf("%s still gets through 10 s after the change", probe)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		if got := s.try(probe); got == "ok" {
			s.t.Errorf("%s got through after it was refused", probe)
		}
	}
}

// The policy follows the host while the sandbox runs: an address (IPv4
// and IPv6) and a routed "VPN" subnet behind a second gateway, added to
// the lab host, are blocked in both layers soon after (the latency from
// the change to the new policy in force is printed, not asserted); a
// server on each is unreachable from then on, also through a socket bound
// to the TUN; removed again, the VPN subnet is reachable again, and a
// removed route inside a private range leaves the range blocked.
func TestJailLivePolicy(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		l.echoTCP(l.host, ":8090") // the host's own service, on every address
		ip(t, "-n", l.world, "addr", "add", "192.0.2.3/24", "dev", l.vw)
		ip(t, "-n", l.world, "addr", "add", "198.18.50.10/32", "dev", "lo")
		l.echoTCP(l.world, "198.18.50.10:80")
		l.echoTCP(l.world, labDevice+":22")
		s := l.startLive(t, uid, "")

		vpn := "tcp 198.18.50.10:80"
		if got := s.try(vpn); got != "ok" {
			t.Fatalf("control: %s before the VPN route: %s", vpn, got)
		}

		t0 := time.Now()
		ip(t, "-n", l.host, "addr", "add", "198.19.77.1/24", "dev", l.vh)
		t.Logf("uid %d: IPv4 address added: blocked after %v", uid, s.waitLogged("blocked", "198.19.77.0/24", t0))
		for _, p := range []string{"tcp 198.19.77.1:8090", "tcp-bound tun0 198.19.77.1:8090"} {
			s.refusedFromNowOn(p)
		}

		t0 = time.Now()
		ip(t, "-n", l.host, "addr", "add", "2001:db8:77::1/64", "dev", l.vh, "nodad")
		t.Logf("uid %d: IPv6 address added: blocked after %v", uid, s.waitLogged("blocked", "2001:db8:77::/64", t0))
		for _, p := range []string{"tcp [2001:db8:77::1]:8090", "tcp-bound tun0 [2001:db8:77::1]:8090"} {
			s.refusedFromNowOn(p)
		}

		t0 = time.Now()
		ip(t, "-n", l.host, "route", "add", "198.18.50.0/24", "via", "192.0.2.3")
		t.Logf("uid %d: VPN route added: blocked after %v", uid, s.waitLogged("blocked", "198.18.50.0/24", t0))
		for _, p := range []string{vpn, "tcp-bound tun0 198.18.50.10:80", "tcp-unicast-if tun0 198.18.50.10:80"} {
			s.refusedFromNowOn(p)
		}

		// A wider route over the VPN subnet, then the subnet's own route
		// removed: what the wider route covers stays blocked (a marker
		// address, added after the removal, shows when it was seen).
		ip(t, "-n", l.host, "route", "add", "198.18.0.0/16", "via", "192.0.2.3")
		s.waitLogged("blocked", "198.18.0.0-198.18.49.255", time.Now())
		ip(t, "-n", l.host, "route", "del", "198.18.50.0/24", "via", "192.0.2.3")
		ip(t, "-n", l.host, "addr", "add", "198.19.88.1/32", "dev", l.vh)
		s.waitLogged("blocked", "198.19.88.1/32", time.Now())
		if b, _ := os.ReadFile(s.log); strings.Contains(string(b), `"unblocked","prefix":"198.18.50.0/24"`) {
			t.Errorf("198.18.50.0/24 was unblocked while 198.18.0.0/16 still covers it:\n%s", b)
		}
		for _, p := range []string{vpn, "tcp-bound tun0 198.18.50.10:80"} {
			if got := s.try(p); got == "ok" {
				t.Errorf("%s after its own route went: %s, want it refused (198.18.0.0/16 still covers it)", p, got)
			}
		}
		ip(t, "-n", l.host, "route", "del", "198.18.0.0/16", "via", "192.0.2.3")
		ip(t, "-n", l.host, "addr", "del", "198.19.88.1/32", "dev", l.vh)

		// Removed again: the VPN subnet is the internet again.
		s.waitLogged("unblocked", "198.18.0.0/16", time.Now())
		if got := s.try(vpn); got != "ok" {
			t.Errorf("%s after the VPN route went: %s, want ok", vpn, got)
		}
		ip(t, "-n", l.host, "addr", "del", "198.19.77.1/24", "dev", l.vh)
		s.waitLogged("unblocked", "198.19.77.0/24", time.Now())
		ip(t, "-n", l.host, "addr", "del", "2001:db8:77::1/64", "dev", l.vh)
		s.waitLogged("unblocked", "2001:db8:77::/64", time.Now())
	})
}

// The kernel layer follows the host on its own: with the userstack's
// policy taken away through the Go API, a VPN route added while the
// sandbox runs is refused by the routes and filter alone.
func TestJailLivePolicyKernelAlone(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		ip(t, "-n", l.world, "addr", "add", "192.0.2.3/24", "dev", l.vw)
		ip(t, "-n", l.world, "addr", "add", "198.18.50.10/32", "dev", "lo")
		l.echoTCP(l.world, "198.18.50.10:80")
		s := l.startLive(t, uid, "routes-only")
		vpn := "tcp 198.18.50.10:80"
		if got := s.try(vpn); got != "ok" {
			t.Fatalf("control: %s before the VPN route: %s", vpn, got)
		}
		t0 := time.Now()
		ip(t, "-n", l.host, "route", "add", "198.18.50.0/24", "via", "192.0.2.3")
		t.Logf("uid %d: VPN route added: kernel layer updated after %v", uid, s.waitLogged("blocked", "198.18.50.0/24", t0))
		for _, p := range []string{vpn, "tcp-bound tun0 198.18.50.10:80", "udp-bound tun0 198.18.50.10:80"} {
			s.refusedFromNowOn(p)
		}
	})
}

// Routes present at launch: a VPN subnet behind a second gateway and a
// subnet reached through a policy-routing table are internal from the
// start; an allow-cidr reopens the VPN subnet.
func TestJailHostRoutesAtLaunch(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		ip(t, "-n", l.world, "addr", "add", "192.0.2.3/24", "dev", l.vw)
		for _, a := range []string{"198.18.50.10", "198.18.60.10"} {
			ip(t, "-n", l.world, "addr", "add", a+"/32", "dev", "lo")
			l.echoTCP(l.world, a+":80")
		}
		for _, target := range []string{"198.18.50.10:80", "198.18.60.10:80"} {
			if got, r := l.probeIn(uid, nil, "tcp", target); got != "ok" {
				t.Fatalf("control: tcp %s before the routes: %s (%v)", target, got, r)
			}
		}
		ip(t, "-n", l.host, "route", "add", "198.18.50.0/24", "via", "192.0.2.3")
		ip(t, "-n", l.host, "route", "add", "198.18.60.0/24", "via", "192.0.2.3", "table", "100")
		ip(t, "-n", l.host, "rule", "add", "to", "198.18.60.0/24", "table", "100")
		for _, target := range []string{"198.18.50.10:80", "198.18.60.10:80"} {
			if got, r := l.probeIn(uid, nil, "tcp", target); !blockedAtOnce(got) {
				t.Errorf("tcp %s with a host route to it: %s, want an immediate refusal (%v)", target, got, r)
			}
		}
		if got, r := l.probeIn(uid, []string{"--allow-cidr", "198.18.50.0/24"}, "tcp", "198.18.50.10:80"); got != "ok" {
			t.Errorf("the VPN subnet with --allow-cidr: %s (%v)", got, r)
		}
	})
}

// When the jail can no longer follow the host (the watch failed), it
// fails closed: new flows are refused in both layers, also to the
// internet, the block log says so, and a warning names the cause.
func TestJailLivePolicyFailsClosed(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.world, labInternet+":80")
		s := l.startLive(t, uid, "both", "-fail-watch-on-usr2")
		if got := s.try("tcp " + labInternet + ":80"); got != "ok" {
			t.Fatalf("control: the internet before the failure: %s", got)
		}
		_ = s.cmd.Process.Signal(syscall.SIGUSR2)
		s.waitLogged("blocked", "0.0.0.0/0 ::/0", time.Now())
		for _, p := range []string{"tcp " + labInternet + ":80", "tcp-bound tun0 " + labInternet + ":80"} {
			if got := s.try(p); got == "ok" {
				t.Errorf("%s after the watch failed: %s, want it refused", p, got)
			}
		}
		s.in.Close()
		_ = s.cmd.Wait()
		if !strings.Contains(s.stderr.String(), "every new connection is refused") {
			t.Errorf("no warning on stderr: %q", s.stderr.String())
		}
	})
}

// dns64 serves, on UDP addr in namespace ns, what a DNS64 resolver with
// the network-specific NAT64 prefix 2001:db8:64::/96 answers for
// ipv4only.arpa (RFC 7050): its two addresses embedded under the prefix.
// Each answer leaves after delay (a slow resolver); the returned counter
// counts the queries for ipv4only.arpa.
func (l *lab) dns64(ns, addr string, delay time.Duration) *atomic.Int32 {
	var on atomic.Bool
	on.Store(true)
	return l.dns64Switch(ns, addr, delay, &on)
}

// dns64Switch is dns64 on a network that does DNS64 only while on is set
// (otherwise ipv4only.arpa has no AAAA record).
func (l *lab) dns64Switch(ns, addr string, delay time.Duration, on *atomic.Bool) *atomic.Int32 {
	var n atomic.Int32
	l.serveUDP(ns, addr, func(req []byte) ([]byte, error) {
		resp, nat64Query, err := dns64Answer(req, on.Load())
		if nat64Query {
			n.Add(1)
			time.Sleep(delay)
		}
		return resp, err
	})
	return &n
}

func dns64Answer(req []byte, synthesize bool) (resp []byte, nat64Query bool, err error) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, false, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, false, err
	}
	nat64Query = strings.EqualFold(q.Name.String(), "ipv4only.arpa.")
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	if nat64Query && q.Type == dnsmessage.TypeAAAA && synthesize {
		for _, last := range []byte{0xaa, 0xab} {
			a := netip.MustParseAddr("2001:db8:64::c000:0").As16()
			a[15] = last
			_ = b.AAAAResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AAAAResource{AAAA: a})
		}
	}
	resp, err = b.Finish()
	return resp, nat64Query, err
}

// A host whose resolver does DNS64 with a network-specific prefix: the
// jail discovers the prefix (RFC 7050) before the sandbox's first IPv6
// flow leaves and blocks the embedded form of a private address under
// it, in both layers, from the very first connection on (the resolver
// takes its time: a flow that did not wait for it would get through),
// while an embedded internet address stays reachable.
func TestJailNAT64NetworkSpecific(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		queries := l.dns64(l.world, labDNS+":53", time.Second)
		embeddedPrivate := "2001:db8:64::a01:203"    // 10.1.2.3
		embeddedInternet := "2001:db8:64::cb00:710a" // 203.0.113.10
		for _, a := range []string{embeddedPrivate, embeddedInternet} {
			ip(t, "-n", l.world, "addr", "add", a+"/128", "dev", "lo", "nodad")
			l.echoTCP(l.world, "["+a+"]:22")
		}
		if got, r := l.probeIn(uid, []string{"--net=host"}, "tcp", "["+embeddedPrivate+"]:22"); got != "ok" {
			t.Fatalf("control: the embedded 10.1.2.3 with --net=host: %s (%v)", got, r)
		}
		// Each probe is the first connection of a sandbox of its own.
		for _, p := range []string{"tcp [" + embeddedPrivate + "]:22", "tcp-bound tun0 [" + embeddedPrivate + "]:22"} {
			t0 := time.Now()
			s := l.startLive(t, uid, "")
			if got := s.try(p); !blockedAtOnce(got) {
				t.Errorf("%s, the sandbox's very first connection: %s, want it refused", p, got)
			}
			for i := 0; i < 3; i++ {
				if got := s.try(p); got == "ok" {
					t.Errorf("%s got through after it was refused", p)
				}
			}
			t.Logf("uid %d: NAT64 prefix found and applied %v after the start", uid, s.waitLogged("blocked", "2001:db8:64::a00:0/104", t0))
			if got := s.try("tcp [" + embeddedInternet + "]:22"); got != "ok" {
				t.Errorf("203.0.113.10 under the NAT64 prefix: %s, want ok", got)
			}
		}
		if n := queries.Load(); n < 2 {
			t.Errorf("the resolver saw %d queries for ipv4only.arpa, want one a sandbox at least", n)
		}
	})
}

// A jailed sandbox asks the host's resolver for ipv4only.arpa only when
// it makes an IPv6 flow: one that does nothing, or uses IPv4 only, sends
// no query at all (control: one IPv6 connection makes the query, once
// for several connections).
func TestJailNAT64NoQueryWithoutIPv6(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		queries := l.dns64(l.world, labDNS+":53", 0)
		l.echoTCP(l.world, labInternet+":80")
		l.echoTCP(l.world, "["+labInternet6+"]:80")
		l.echoUDP(l.world, labInternet+":53000")

		s := l.startLive(t, uid, "")
		for _, p := range []string{"tcp " + labInternet + ":80", "udp " + labInternet + ":53000", "tcp " + labDevice + ":22"} {
			_ = s.try(p)
		}
		if got := s.try("tcp " + labInternet + ":80"); got != "ok" {
			t.Errorf("control: the internet over IPv4: %s, want ok", got)
		}
		// Room for a query a launch would have sent in the background.
		time.Sleep(2 * time.Second)
		if n := queries.Load(); n != 0 {
			t.Errorf("a sandbox that made IPv4 flows only: the resolver saw %d queries for ipv4only.arpa, want none", n)
		}
		l.startLive(t, uid, "") // does nothing until the test ends
		time.Sleep(2 * time.Second)
		if n := queries.Load(); n != 0 {
			t.Errorf("a sandbox that made no flow: the resolver saw %d queries for ipv4only.arpa, want none", n)
		}

		for i := 0; i < 3; i++ {
			if got := s.try("tcp [" + labInternet6 + "]:80"); got != "ok" {
				t.Errorf("control: the internet over IPv6: %s, want ok", got)
			}
		}
		if n := queries.Load(); n != 1 {
			t.Errorf("after three IPv6 connections: the resolver saw %d queries for ipv4only.arpa, want one", n)
		}
	})
}

// A host that moves onto a DNS64 network while the sandbox runs: the
// change of its network drops the jail's NAT64 answer, and the next IPv6
// flow waits for a new one, so the very first connection to a private
// address embedded under the new prefix is refused.
func TestJailNAT64AfterNetworkChange(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		var on atomic.Bool
		queries := l.dns64Switch(l.world, labDNS+":53", 0, &on)
		embeddedPrivate := "2001:db8:64::a01:203" // 10.1.2.3
		ip(t, "-n", l.world, "addr", "add", embeddedPrivate+"/128", "dev", "lo", "nodad")
		l.echoTCP(l.world, "["+embeddedPrivate+"]:22")
		l.echoTCP(l.world, "["+labInternet6+"]:80")

		s := l.startLive(t, uid, "")
		if got := s.try("tcp [" + labInternet6 + "]:80"); got != "ok" {
			t.Fatalf("control: the internet over IPv6: %s, want ok", got)
		}
		if n := queries.Load(); n != 1 {
			t.Errorf("after the first IPv6 flow: %d queries for ipv4only.arpa, want 1", n)
		}
		// No DNS64 yet: 2001:db8:64::/96 is an address like any other.
		if got := s.try("tcp [" + embeddedPrivate + "]:22"); got != "ok" {
			t.Errorf("control: 2001:db8:64::a01:203 before the network does NAT64: %s, want ok", got)
		}

		on.Store(true)
		t0 := time.Now()
		ip(t, "-n", l.host, "addr", "add", "198.19.77.1/24", "dev", l.vh) // a new connected subnet
		s.waitLogged("blocked", "198.19.77.0/24", t0)
		if got := s.try("tcp [" + embeddedPrivate + "]:22"); !blockedAtOnce(got) {
			t.Errorf("the first connection to the embedded 10.1.2.3 after the host moved onto a DNS64 network: %s, want it refused", got)
		}
		if got := s.try("tcp [" + labInternet6 + "]:80"); got != "ok" {
			t.Errorf("the internet over IPv6 after the change: %s, want ok", got)
		}
		// (The change may come as more than one batch of notifications,
		// each dropping the answer.)
		if n := queries.Load(); n < 2 {
			t.Errorf("after the change: %d queries for ipv4only.arpa, want another one", n)
		}
	})
}

// Notifications of the host's network that change nothing the NAT64
// answer may depend on (the lifetimes of its addresses refreshed, its
// default routes announced again) keep the jail's answer: the next IPv6
// flow goes on at once, the host's resolver sees no second query, and the
// embedded private address stays refused. A real change (a new address)
// still drops it (control).
func TestJailNAT64KeptWhileNetworkUnchanged(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		queries := l.dns64(l.world, labDNS+":53", 0)
		embeddedPrivate := "2001:db8:64::a01:203" // 10.1.2.3
		ip(t, "-n", l.world, "addr", "add", embeddedPrivate+"/128", "dev", "lo", "nodad")
		l.echoTCP(l.world, "["+embeddedPrivate+"]:22")
		l.echoTCP(l.world, "["+labInternet6+"]:80")
		// The lab's link-local addresses come into use (duplicate
		// address detection ends) a moment after the link is up: a
		// real change of the host's addresses and routes, before the
		// test's changes.
		l.waitNoTentative(l.host)

		s := l.startLive(t, uid, "")
		if got := s.try("tcp [" + labInternet6 + "]:80"); got != "ok" {
			t.Fatalf("control: the internet over IPv6: %s, want ok", got)
		}
		if got := s.try("tcp [" + embeddedPrivate + "]:22"); !blockedAtOnce(got) {
			t.Fatalf("control: the embedded 10.1.2.3 on a DNS64 network: %s, want it refused", got)
		}
		if n := queries.Load(); n != 1 {
			t.Fatalf("after the first IPv6 flows: %d queries for ipv4only.arpa, want 1", n)
		}

		// Past the second after a discovery in which notifications still
		// drop its answer (they may be of a change it saw half done).
		time.Sleep(1500 * time.Millisecond)
		// Each of these sends rtnetlink notifications (RTM_NEWADDR,
		// RTM_NEWROUTE) and leaves the host's network as it was.
		for _, c := range [][]string{
			{"addr", "change", labHost6 + "/64", "dev", l.vh, "nodad", "preferred_lft", "forever", "valid_lft", "forever"},
			{"addr", "change", labHostAddr + "/24", "dev", l.vh, "preferred_lft", "forever", "valid_lft", "forever"},
			{"-6", "route", "replace", "default", "via", labPeer6},
			{"route", "replace", "default", "via", labPeer, "proto", "static"},
			{"route", "replace", "default", "via", labPeer, "proto", "boot"},
		} {
			ip(t, append([]string{"-n", l.host}, c...)...)
		}
		// Room for the jail to re-read the host (it did drop the answer
		// here, before it compared what it read).
		time.Sleep(2 * time.Second)
		for i := 0; i < 3; i++ {
			if got := s.try("tcp [" + labInternet6 + "]:80"); got != "ok" {
				t.Errorf("the internet over IPv6 after notifications that change nothing: %s, want ok", got)
			}
		}
		if got := s.try("tcp [" + embeddedPrivate + "]:22"); !blockedAtOnce(got) {
			t.Errorf("the embedded 10.1.2.3 after notifications that change nothing: %s, want it refused", got)
		}
		if n := queries.Load(); n != 1 {
			t.Errorf("after notifications that change nothing: %d queries for ipv4only.arpa, want still 1 (the answer kept)", n)
		}

		// Control: a new address is a change; the next IPv6 flow asks.
		t0 := time.Now()
		ip(t, "-n", l.host, "addr", "add", "198.19.77.1/24", "dev", l.vh)
		s.waitLogged("blocked", "198.19.77.0/24", t0)
		if got := s.try("tcp [" + labInternet6 + "]:80"); got != "ok" {
			t.Errorf("the internet over IPv6 after the change: %s, want ok", got)
		}
		if n := queries.Load(); n < 2 {
			t.Errorf("after a new address: %d queries for ipv4only.arpa, want another one", n)
		}
	})
}

// A refusal of a socket bound to the TUN is recorded like the routes'
// refusals: the filter sends a copy to the sink.
func TestJailBoundRefusalRecorded(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.world, labDevice+":22")
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		probe := testutil.Build(t, "./integration/egressprobe")
		log := filepath.Join(testutil.MkdirFor(t, uid), "blocked.jsonl")
		r := testutil.Run(t, l.jailCmd(uid, bin, "run", "--log-blocked", log, "--", probe, "batch", "tcp-bound tun0 "+labDevice+":22", "udp-unicast-if tun0 "+labDevice+":5064"))
		if !strings.Contains(r.Stdout, "tcp-bound tun0 "+labDevice+":22 => err:ECONNREFUSED") {
			t.Errorf("bound connect: %v, want ECONNREFUSED", r)
		}
		b, _ := os.ReadFile(log)
		for _, want := range []string{`"proto":"tcp","dst":"` + labDevice + `:22","rule":"private range 10.0.0.0/8"`, `"proto":"udp","dst":"` + labDevice + `:5064"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("the block log lacks %s:\n%s", want, b)
			}
		}
	})
}
