package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// jailUsers runs f for root and for uid 65534, each with a fresh lab.
func jailUsers(t *testing.T, f func(t *testing.T, l *lab, uid int)) {
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			l := newLab(t)
			f(t, l, uid)
		})
	}
}

// probeIn runs the probe in the jail with the given run options and returns
// its output and the launcher's result.
func (l *lab) probeIn(uid int, opts []string, args ...string) (string, testutil.Result) {
	l.t.Helper()
	bin := testutil.Build(l.t, "./cmd/claude-sandbox")
	probe := testutil.Build(l.t, "./integration/probe")
	argv := append(append(append([]string{"run"}, opts...), "--", probe), args...)
	r := testutil.Run(l.t, l.jailCmd(uid, bin, argv...))
	line, _, _ := strings.Cut(r.Stdout, "\n")
	return strings.TrimSpace(line), r
}

// blockedAtOnce reports whether a probe result is a refusal the caller sees
// immediately (not a timeout, not success).
func blockedAtOnce(got string) bool {
	switch got {
	case "err:ECONNREFUSED", "err:ENETUNREACH", "err:EHOSTUNREACH", "err:EACCES", "err:EPERM":
		return true
	}
	return false
}

func TestJailReachability(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		for _, a := range []string{labInternet, labDevice, labCGNAT, labMetadata, labPeer} {
			l.echoTCP(l.world, a+":80")
		}
		l.echoTCP(l.world, labDevice+":22")
		l.echoUDP(l.world, labInternet+":53000")
		l.echoUDP(l.world, labDevice+":5064")
		l.echoUDP(l.world, labDevice+":47123")
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.dns(l.world, labDNS+":53")

		// Controls: from the lab's host namespace itself, with the jail
		// off, every server answers; so a refusal below is the jail's.
		for _, target := range []string{labInternet + ":80", labDevice + ":22", labMetadata + ":80", labPeer + ":80", "127.0.0.1:8080"} {
			if got, r := l.probeIn(uid, []string{"--net=host"}, "tcp", target); got != "ok" {
				t.Fatalf("control: tcp %s with --net=host: %s (%v)", target, got, r)
			}
		}

		// The internet: TCP, UDP, ICMP, DNS over UDP and TCP.
		for _, c := range [][]string{
			{"tcp", labInternet + ":80"},
			{"udp", labInternet + ":53000"},
			{"ping", labInternet},
		} {
			if got, r := l.probeIn(uid, nil, c...); got != "ok" {
				t.Errorf("%v through the jail: %s, want ok (%v)", c, got, r)
			}
		}
		for _, c := range []string{"resolve", "resolve-tcp"} {
			if got, r := l.probeIn(uid, nil, c, "internet.test"); got != labInternet+" ok" && got != labInternet {
				t.Errorf("%s internet.test: %q, want %s (%v)", c, got, labInternet, r)
			}
		}

		// Blocked: the lab device, CGNAT, metadata, the host's own subnet,
		// host loopback (directly and through the gateway), for TCP; the
		// lab device for UDP.
		for _, c := range [][]string{
			{"tcp", labDevice + ":22"},
			{"tcp", labDevice + ":80"},
			{"tcp", labCGNAT + ":80"},
			{"tcp", labMetadata + ":80"},
			{"tcp", labPeer + ":80"},
			{"tcp", "127.0.0.1:8080"},
			{"udp", labDevice + ":5064"},
			{"udp", labDevice + ":47123"},
			{"ping", labDevice},
		} {
			got, r := l.probeIn(uid, nil, c...)
			if !blockedAtOnce(got) {
				t.Errorf("%v through the jail: %s, want an immediate refusal (%v)", c, got, r)
			}
		}

		// --allow-ip punches the lab device through, any port, TCP and UDP.
		allow := []string{"--allow-ip", labDevice}
		for _, c := range [][]string{{"tcp", labDevice + ":22"}, {"udp", labDevice + ":47123"}, {"udp", labDevice + ":5064"}} {
			if got, r := l.probeIn(uid, allow, c...); got != "ok" {
				t.Errorf("%v with --allow-ip: %s, want ok (%v)", c, got, r)
			}
		}
		// ... and only that address: its neighbours stay blocked.
		if got, r := l.probeIn(uid, allow, "tcp", labCGNAT+":80"); !blockedAtOnce(got) {
			t.Errorf("CGNAT with --allow-ip %s: %s (%v)", labDevice, got, r)
		}
		// A CIDR is honoured as a CIDR.
		if got, r := l.probeIn(uid, []string{"--allow-cidr", "10.20.0.0/16"}, "tcp", labDevice+":22"); got != "ok" {
			t.Errorf("lab device with --allow-cidr 10.20.0.0/16: %s (%v)", got, r)
		}
	})
}
