package jail

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// What the NAT64 answer may depend on, as discoverNetwork reads it from a
// real namespace (a child's own, which the test configures): notifications
// that change nothing (an address's lifetimes refreshed, a default route
// announced again, with another protocol) leave it the same; a new
// address, a new default gateway, a link down change it.
func TestNAT64DepsRead(t *testing.T) {
	const name = "TestNAT64DepsRead"
	rerun, isolated := testutil.RerunInOwnNetns()
	if !rerun {
		testutil.NeedsRoot(t)
		if _, err := exec.LookPath("ip"); err != nil {
			t.Skip("iproute2 is needed")
		}
		testutil.RunTestInOwnNetns(t, name, 60*time.Second)
		return
	}
	if !isolated {
		t.Fatal("the child is in its parent's network namespace: it must not configure that one")
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("link", "set", "lo", "up")
	// A veth pair (its far end, d0p, in the same namespace), with no
	// link-local addresses (whose duplicate address detection would end
	// in the middle of the test: a change).
	ip("link", "add", "d0", "type", "veth", "peer", "name", "d0p")
	for _, l := range []string{"d0", "d0p"} {
		ip("link", "set", l, "addrgenmode", "none")
		ip("link", "set", l, "up")
	}
	ip("addr", "add", "192.0.2.2/24", "dev", "d0")
	ip("addr", "add", "2001:db8:1::2/64", "dev", "d0", "nodad")
	ip("route", "add", "default", "via", "192.0.2.1")
	ip("-6", "route", "add", "default", "via", "2001:db8:1::1")
	read := func() nat64Deps {
		t.Helper()
		f, err := discoverNetwork()
		if err != nil {
			t.Fatal(err)
		}
		if !f.deps.known {
			t.Fatal("the read is not complete")
		}
		return f.deps
	}
	base := read()
	defaults := strings.Join(base.defaults, "\n")
	if len(base.links) == 0 || len(base.addrs) == 0 || !strings.Contains(defaults, "via 192.0.2.1 ") || !strings.Contains(defaults, "via 2001:db8:1::1 ") {
		t.Fatalf("read %+v, want links, addresses and the two default routes", base)
	}
	if again := read(); !again.same(base) {
		t.Fatalf("two reads of the same namespace differ:\n%+v\n%+v", base, again)
	}
	for _, c := range [][]string{
		{"addr", "change", "2001:db8:1::2/64", "dev", "d0", "nodad", "preferred_lft", "forever", "valid_lft", "forever"},
		{"addr", "change", "192.0.2.2/24", "dev", "d0", "preferred_lft", "forever", "valid_lft", "forever"},
		{"-6", "route", "replace", "default", "via", "2001:db8:1::1"},
		{"route", "replace", "default", "via", "192.0.2.1", "proto", "static"},
		{"link", "set", "d0", "mtu", "1400"},
	} {
		ip(c...)
		if now := read(); !now.same(base) {
			t.Errorf("after ip %s (no change of the network):\n%+v\nwant\n%+v", strings.Join(c, " "), now, base)
		}
	}
	for _, c := range []struct{ do, undo []string }{
		{[]string{"addr", "add", "192.0.2.3/24", "dev", "d0"}, []string{"addr", "del", "192.0.2.3/24", "dev", "d0"}},
		{[]string{"route", "replace", "default", "via", "192.0.2.254"}, []string{"route", "replace", "default", "via", "192.0.2.1", "proto", "static"}},
		{[]string{"-6", "route", "replace", "default", "via", "2001:db8:1::1", "metric", "1"}, []string{"-6", "route", "del", "default", "via", "2001:db8:1::1", "metric", "1"}},
		{[]string{"route", "add", "0.0.0.0/1", "dev", "d0"}, []string{"route", "del", "0.0.0.0/1", "dev", "d0"}},
		{[]string{"route", "add", "198.18.0.0/15", "via", "192.0.2.9"}, []string{"route", "del", "198.18.0.0/15", "via", "192.0.2.9"}},
		{[]string{"link", "add", "d1", "type", "veth", "peer", "name", "d1p"}, []string{"link", "del", "d1"}},
	} {
		ip(c.do...)
		if now := read(); now.same(base) {
			t.Errorf("after ip %s: the read is the same as before", strings.Join(c.do, " "))
		}
		ip(c.undo...)
		if now := read(); !now.same(base) {
			t.Errorf("after ip %s (undone):\n%+v\nwant\n%+v", strings.Join(c.undo, " "), now, base)
		}
	}
	ip("link", "set", "d0", "down")
	if now := read(); now.same(base) {
		t.Error("after the link went down: the read is the same as before")
	}
}
