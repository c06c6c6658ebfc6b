package routes

import (
	"net"
	"strings"
	"testing"
)

// linkIndex (one SIOCGIFINDEX) gives every link of the namespace the index
// net.InterfaceByName gives it, and an error naming the link for one that
// does not exist or whose name cannot be a link's. Reads only. Seen failing
// with SIOCGIFMTU asked instead (the MTU came back as the index).
func TestLinkIndexAsInterfaceByName(t *testing.T) {
	ifcs, err := net.Interfaces()
	if err != nil || len(ifcs) == 0 {
		t.Fatalf("interfaces: %v %v", ifcs, err)
	}
	for _, ifc := range ifcs {
		got, err := linkIndex(ifc.Name)
		if err != nil || got != uint32(ifc.Index) {
			t.Errorf("linkIndex(%q) = %d, %v; net says %d", ifc.Name, got, err, ifc.Index)
		}
	}
	for _, bad := range []string{"no-such-link0", strings.Repeat("x", 40)} {
		if i, err := linkIndex(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("linkIndex(%q) = %d, %v; want an error naming it", bad, i, err)
		}
	}
}
