package integration

import (
	"os"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// --allow-host-port: a server on the lab host's loopback (the loopback of
// the network namespace the test made and runs the launcher in, never the
// machine's) is reached on its allowed port through the jail's gateway
// and through host.internal, TCP and UDP; the same server's other ports,
// the other protocol, and 127.0.0.1 itself stay refused at once, and the
// refusals are recorded.
func TestReachHostPort(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.echoTCP(l.host, "127.0.0.1:8081")
		l.echoUDP(l.host, "127.0.0.1:5353")
		l.echoUDP(l.host, "127.0.0.1:5354")
		l.echoUDP(l.host, "127.0.0.1:8080")
		allow := []string{"--allow-host-port", "8080", "--allow-host-port", "5353/udp"}
		for _, c := range [][]string{
			{"tcp", labGateway + ":8080"},
			{"tcp", "host.internal:8080"},
			{"udp", labGateway + ":5353"},
			{"udp", "host.internal:5353"},
		} {
			if got, r := l.probeIn(uid, allow, c...); got != "ok" {
				t.Errorf("%v with %v: %s, want ok (%v)", c, allow, got, r)
			}
		}
		dir := testutil.MkdirFor(t, uid)
		log := dir + "/blocked.jsonl"
		withLog := append([]string{"--log-blocked", log}, allow...)
		for _, c := range [][]string{
			{"tcp", labGateway + ":8081"},
			{"tcp", "host.internal:8081"},
			{"udp", labGateway + ":5354"},
			{"udp", labGateway + ":8080"}, // allowed for TCP only
			{"tcp", labGateway + ":5353"}, // allowed for UDP only
			{"tcp", "127.0.0.1:8080"},
		} {
			if got, r := l.probeIn(uid, withLog, c...); !blockedAtOnce(got) {
				t.Errorf("%v with %v: %s, want an immediate refusal (%v)", c, allow, got, r)
			}
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"tcp","dst":"` + labGateway + `:8081"`, `"udp","dst":"` + labGateway + `:5354"`, `"udp","dst":"` + labGateway + `:8080"`, `"tcp","dst":"` + labGateway + `:5353"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("block log %q lacks %s", b, want)
			}
		}
		// Without the option, the gateway's ports are all refused.
		if got, r := l.probeIn(uid, nil, "tcp", labGateway+":8080"); !blockedAtOnce(got) {
			t.Errorf("tcp %s:8080 without --allow-host-port: %s (%v)", labGateway, got, r)
		}
		// The exit summary names the opening.
		_, r := l.probeIn(uid, allow, "tcp", labGateway+":8080")
		if !strings.Contains(r.Stderr, "host loopback port 8080/tcp, 5353/udp") || !strings.Contains(r.Stderr, labGateway) {
			t.Errorf("exit summary %q does not name the opening", r.Stderr)
		}
	})
}

// --allow-ip and --allow-cidr refuse loopback at parse time, pointing to
// --allow-host-port: inside the jail loopback is the sandbox's own, so
// the entry would otherwise do nothing, silently.
func TestReachAllowLoopbackRefused(t *testing.T) {
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, args := range [][]string{
		{"--allow-ip", "127.0.0.1"},
		{"--allow-ip", "::1"},
		{"--allow-ip", "::ffff:127.0.0.1"},
		{"--allow-cidr", "127.0.0.0/8"},
		{"--allow-cidr", "127.1.0.0/16"},
	} {
		argv := append(append([]string{"run"}, args...), "--", "/bin/echo", "started")
		r := testutil.Run(t, testutil.As(0, nil, append([]string{bin}, argv...)...))
		if r.Code != 2 || strings.Contains(r.Stdout, "started") || !strings.Contains(r.Stderr, "--allow-host-port") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("%v: %v, want exit 2, one line naming --allow-host-port", args, r)
		}
	}
}
