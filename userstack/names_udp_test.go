package userstack

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/userstack/names"
)

// failType makes the zone's upstream fail name's queries of type typ
// ("A", "AAAA"): it closes its socket without an answer.
func (z *zoneDialer) failType(name, typ string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.fail == nil {
		z.fail = map[string]bool{}
	}
	z.fail[name+" "+typ] = true
}

// setTTL makes the zone answer name's records with ttl.
func (z *zoneDialer) setTTL(name string, ttl uint32) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.ttl == nil {
		z.ttl = map[string]uint32{}
	}
	z.ttl[name] = ttl
}

// countAsked counts the queries upstream for "name type".
func (z *zoneDialer) countAsked(q string) int {
	n := 0
	for _, a := range z.asked() {
		if a == q {
			n++
		}
	}
	return n
}

// UDP to a name whose AAAA lookup fails upstream (a resolver that drops
// AAAA queries, a timeout) is relayed over its A answer: only the family
// dialed waits to be fresh, and the failure is cached for a while rather
// than asked again for each datagram or query (issue 34 bug 6).
func TestNamesUDPOtherFamilyFails(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10")
	h.zone.failType("api.test", "AAAA")
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	d := sendUntilDial(t, h, netip.AddrPortFrom(jail4, 45300), netip.AddrPortFrom(api, 5000), []byte("ping"))
	d.peer.Close()
	if d.network != "udp" || d.address != "203.0.113.10:5000" {
		t.Fatalf("dialed %s %s", d.network, d.address)
	}
	// The sandbox asks for AAAA three times: SERVFAIL each time, from
	// one failed lookup upstream (the prefetch's or the first query's:
	// the exchange's two tries), not one per query.
	for range 3 {
		if m := h.query(t, "api.test.", dnsmessage.TypeAAAA); m.Header.RCode != dnsmessage.RCodeServerFailure {
			t.Fatalf("AAAA: %v", m.Header.RCode)
		}
	}
	if n := h.zone.countAsked("api.test AAAA"); n != 2 {
		t.Fatalf("upstream asked %d times for api.test AAAA (%q); want 2, one lookup's tries", n, h.zone.asked())
	}
}

// An answer with TTL 0 is cached for 5: UDP to the name is
// relayed, from one lookup upstream, instead of each datagram asking
// again for an answer that expires as it is written (issue 34 bug 6).
func TestNamesUDPTTLZero(t *testing.T) {
	h := newNamesHarness(t, map[string][]uint16{"api.test": nil}, NameConfig{})
	h.zone.addA("api.test", "203.0.113.10")
	h.zone.setTTL("api.test", 0)
	api := answerAddrs(t, h.query(t, "api.test.", dnsmessage.TypeA), "api.test.")[0]
	d := sendUntilDial(t, h, netip.AddrPortFrom(jail4, 45310), netip.AddrPortFrom(api, 5000), []byte("ping"))
	d.peer.Close()
	if d.address != "203.0.113.10:5000" {
		t.Fatalf("dialed %s %s", d.network, d.address)
	}
	if n := h.zone.countAsked("api.test A"); n != 1 {
		t.Fatalf("upstream asked %d times for api.test A (%q); want 1", n, h.zone.asked())
	}
	if m := h.query(t, "api.test.", dnsmessage.TypeA); len(m.Answers) != 1 || m.Answers[0].Header.TTL != names.TTLMin {
		t.Fatalf("synthetic answer %+v, want TTL %d", m.Answers, names.TTLMin)
	}
	if n := h.zone.countAsked("api.test A"); n != 1 {
		t.Fatalf("asked upstream again: %q", h.zone.asked())
	}
}
