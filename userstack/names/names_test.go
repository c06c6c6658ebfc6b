package names

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// fakeRules allows every name.
type fakeRules struct{}

func (fakeRules) AllowName(string) (bool, string)     { return true, "allow" }
func (fakeRules) Allow(string, uint16) (bool, string) { return true, "allow" }

func itoa(i int) string { return strconv.Itoa(i) }

func TestNamesPool(t *testing.T) {
	n, err := New(Config{Rules: fakeRules{}, Pool4: netip.MustParsePrefix("198.18.0.0/23")})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]string{}
	for i := range 600 {
		name := "n" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "-" + itoa(i) + ".test"
		a, err := n.synthetic(name, false)
		if errors.Is(err, errPoolFull) {
			// 512 addresses, less the pool's first and last, .0 and .255.
			if i != 508 {
				t.Fatalf("pool full after %d names, want 508", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if b := a.As4(); b[3] == 0 || b[3] == 255 || !n.cfg.Pool4.Contains(a) {
			t.Fatalf("allocated %v", a)
		}
		if other, dup := seen[a]; dup {
			t.Fatalf("%v given to %s and %s", a, other, name)
		}
		seen[a] = name
		if again, _ := n.synthetic(name, false); again != a {
			t.Fatalf("%s: %v then %v", name, a, again)
		}
		if got, ok := n.nameOf(a); !ok || got != name {
			t.Fatalf("nameOf(%v) = %q", a, got)
		}
	}
	a6, _ := n.synthetic("v6.test", true)
	b6, _ := n.synthetic("other.test", true)
	if a6 == b6 || !DefaultPool6.Contains(a6) || !DefaultPool6.Contains(b6) {
		t.Fatalf("v6: %v %v", a6, b6)
	}
	n2, _ := New(Config{Rules: fakeRules{}})
	n2.synthetic("one.test", false)
	if _, ok := n2.nameOf(netip.MustParseAddr("198.18.1.200")); ok {
		t.Fatal("an address never handed out maps to a name")
	}
}

// TestNamesAttachOnce: a names side serves one stack; a second stack
// attaching it is refused (two stacks would share one pool and cache
// while each thinks it owns their workers and records).
func TestNamesAttachOnce(t *testing.T) {
	n, err := New(Config{Rules: fakeRules{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Attach(Deps{}); err != nil {
		t.Fatalf("first attach: %v", err)
	}
	if err := n.Attach(Deps{}); err == nil {
		t.Fatal("second attach accepted")
	}
}
