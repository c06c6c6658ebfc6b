package integration

import (
	"os"
	"strings"
	"testing"
	"time"
)

// A subnet the lab host routes through its own default gateway by a more
// specific route (a static route, DHCP option 121) is internal: refused,
// the block's rule and the exit summary say why and point at
// --internet-cidr; exempted with --internet-cidr it is reachable, and the
// exemption lifts host routes only (a private range stays blocked).
func TestJailRouteViaDefaultGatewayInternal(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		ip(t, "-n", l.world, "addr", "add", "198.18.50.10/32", "dev", "lo")
		l.echoTCP(l.world, "198.18.50.10:80")
		l.echoTCP(l.world, labDevice+":22")
		target := "198.18.50.10:80"
		if got, r := l.probeIn(uid, nil, "tcp", target); got != "ok" {
			t.Fatalf("control: %s before the route: %s\n%s", target, got, r.Stderr)
		}
		ip(t, "-n", l.host, "route", "add", "198.18.50.0/24", "via", labPeer)

		got, r := l.probeIn(uid, nil, "tcp", target)
		if !blockedAtOnce(got) {
			t.Errorf("%s routed through the default gateway: %s, want refused at once\n%s", target, got, r.Stderr)
		}
		for _, want := range []string{
			"(host route 198.18.50.0/24 via the default gateway)",
			"through its default gateway by a more specific route: 198.18.50.0/24; if that is internet, exempt it with --internet-cidr",
		} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("exit summary does not say %q:\n%s", want, r.Stderr)
			}
		}

		opts := []string{"--internet-cidr", "198.18.0.0/15", "--internet-cidr", "10.0.0.0/8"}
		if got, r := l.probeIn(uid, opts, "tcp", target); got != "ok" {
			t.Errorf("%s with --internet-cidr 198.18.0.0/15: %s, want ok\n%s", target, got, r.Stderr)
		}
		if got, r := l.probeIn(uid, opts, "tcp", labDevice+":22"); !blockedAtOnce(got) {
			t.Errorf("--internet-cidr 10.0.0.0/8 opened the private %s: %s\n%s", labDevice, got, r.Stderr)
		}

		// The live policy: a route through the default gateway added
		// while two sandboxes run makes its subnet internal in the one
		// without --internet-cidr, not in the one with it.
		ip(t, "-n", l.world, "addr", "add", "198.18.60.10/32", "dev", "lo")
		l.echoTCP(l.world, "198.18.60.10:80")
		live := l.startLive(t, uid, "")
		exempt := l.startLive(t, uid, "", "--internet-cidr", "198.18.60.0/24")
		probe := "tcp 198.18.60.10:80"
		for _, s := range []*liveSandbox{live, exempt} {
			if got := s.try(probe); got != "ok" {
				t.Fatalf("control: %s before the route: %s", probe, got)
			}
		}
		ip(t, "-n", l.host, "route", "add", "198.18.60.0/24", "via", labPeer)
		live.waitLogged("blocked", "198.18.60.0/24", time.Now())
		live.refusedFromNowOn(probe)
		if b, _ := os.ReadFile(live.log); !strings.Contains(string(b), `host route 198.18.60.0/24 via the default gateway`) {
			t.Errorf("the live block does not name the default gateway:\n%s", b)
		}
		// A marker added after the route: once it is blocked, the exempt
		// sandbox's policy has seen the route too.
		ip(t, "-n", l.host, "addr", "add", "198.19.99.1/32", "dev", l.vh)
		exempt.waitLogged("blocked", "198.19.99.1/32", time.Now())
		if got := exempt.try(probe); got != "ok" {
			t.Errorf("%s with --internet-cidr 198.18.60.0/24 after the route was added: %s, want ok", probe, got)
		}
	})
}
