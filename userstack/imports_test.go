package userstack

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/link/channel"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// TestRelayImports: the relay (this package, without its tests) depends
// on neither the names side (package names), nor the first-bytes
// inspection (inspect), nor its parsers (sniff), directly or through
// another package (issue 34): the embedder builds the names side and
// gives it to Config.Names, and the relay knows it only through
// NameService and package relayapi's types.
func TestRelayImports(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	const mod = "github.com/claude-sandbox/claude-sandbox/"
	if !deps[mod+"userstack"] || !deps[mod+"userstack/relayapi"] {
		t.Fatalf("go list -deps did not list the relay and relayapi:\n%s", out)
	}
	for _, p := range []string{"userstack/names", "userstack/inspect", "userstack/sniff"} {
		if deps[mod+p] {
			t.Errorf("the relay (package userstack) imports %s", p)
		}
	}
}

// TestNamesOneStack: the names side the embedder builds serves one stack;
// a second stack given the same one refuses to start (both would spawn
// its lookups and record its blocks, and the first one's Close would end
// the second one's lookups).
func TestNamesOneStack(t *testing.T) {
	n := newNames(t, NameConfig{Rules: fakeRules{allow: map[string][]uint16{"api.test": nil}}})
	h := &harness{blocks: &blocks{}}
	h.start(t, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), VirtualDNS: []netip.Addr{dns4}, Names: n})
	ep := channel.New(64, 65520, "")
	defer ep.Close()
	if st, err := New(ep, Config{Policy: netpolicy.MustNew(netpolicy.Config{}), VirtualDNS: []netip.Addr{dns4}, Names: n}); err == nil {
		st.Close()
		t.Fatal("a second stack took the names side of the first")
	}
}
