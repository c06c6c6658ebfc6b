package jail

import (
	"net/netip"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

func TestHostsFile(t *testing.T) {
	op := HostsFile("127.0.0.1 localhost\n10.0.0.9 host.internal # old\n::1 ip6-localhost", netip.MustParseAddr("192.0.2.1"), []netpolicy.HostPort{{Proto: netpolicy.ProtoTCP, Port: 11434}, {Proto: netpolicy.ProtoUDP, Port: 5353}})
	want := "127.0.0.1 localhost\n::1 ip6-localhost\n" + HostsMarker + " 11434/tcp 5353/udp\n192.0.2.1\thost.internal\n"
	if op.Dst != "/etc/hosts" || op.Data != want {
		t.Errorf("HostsFile: %s %q, want /etc/hosts %q", op.Dst, op.Data, want)
	}
}
