package jail

import (
	"net/netip"
	"testing"
)

func TestHostsFile(t *testing.T) {
	op := HostsFile("127.0.0.1 localhost\n10.0.0.9 host.internal # old\n::1 ip6-localhost", netip.MustParseAddr("192.0.2.1"))
	want := "127.0.0.1 localhost\n::1 ip6-localhost\n# written by claude-sandbox: the host's loopback ports allowed with --allow-host-port\n192.0.2.1\thost.internal\n"
	if op.Dst != "/etc/hosts" || op.Data != want {
		t.Errorf("HostsFile: %s %q, want /etc/hosts %q", op.Dst, op.Data, want)
	}
}
