package jail

import (
	"net/netip"
	"testing"
	"time"
)

// The lookups a second are bounded in number and in time.
func TestOwnerBound(t *testing.T) {
	j := &Jail{}
	n := 0
	for j.ownerAllowed() {
		n++
		if n > maxOwnerLookups+1 {
			break
		}
	}
	if n > maxOwnerLookups {
		t.Errorf("%d lookups allowed in a second, want at most %d", n, maxOwnerLookups)
	}
	j = &Jail{}
	j.own.window.Store(time.Now().Unix())
	j.own.spent.Store(int64(maxOwnerTime))
	if j.ownerAllowed() && j.own.spent.Load() != 0 { // (allowed only if a new second began)
		t.Error("a lookup allowed past the second's time bound")
	}
	if _, ok := j.FlowOwner("tcp", netipAddrPort(), netipAddrPort()); ok {
		t.Error("an owner found by a jail never attached")
	}
}

func netipAddrPort() netip.AddrPort { return netip.MustParseAddrPort("10.0.0.2:1000") }
