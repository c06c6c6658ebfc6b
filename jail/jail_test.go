package jail

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// An egress device the stack cannot use refuses the launch at Attach: the
// jail never reports success for a sandbox whose traffic nothing serves.
func TestAttachRefusesUnusableEgressDevice(t *testing.T) {
	egress, err := os.CreateTemp(t.TempDir(), "tun")
	if err != nil {
		t.Fatal(err)
	}
	egress.Close() // closed: nothing can be duplicated from it
	sink, err := os.CreateTemp(t.TempDir(), "blk")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	j := New(&Setup{Policy: netpolicy.MustNew(netpolicy.Config{}), Gateway: netip.MustParseAddr("192.0.2.1")}, Options{})
	// The jail namespace's sockets: any descriptor will do here.
	files := []*os.File{egress, sink, sink, sink}
	if err := j.Attach(files, []byte(`{"links":{}}`)); err == nil || !strings.Contains(err.Error(), "TUN") {
		j.Close()
		t.Fatalf("Attach with a closed egress device: %v, want it refused", err)
	}
}
