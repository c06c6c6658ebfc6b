package jail

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// HostInternal is the name the sandbox's /etc/hosts gives the jail's
// gateway when host loopback ports are allowed (--allow-host-port): a
// connection to host.internal:PORT reaches the host's 127.0.0.1:PORT.
const HostInternal = "host.internal"

// HostsMarker starts the comment of the sandbox's /etc/hosts that lists
// the allowed host loopback ports ("... 11434/tcp 5353/udp").
const HostsMarker = "# claude-sandbox: host.internal is the host's loopback on the ports (--allow-host-port):"

// HostsFile returns the sandbox's /etc/hosts: the host's entries (hosts,
// its content, as read) with any earlier host.internal line dropped, a
// comment naming the allowed ports (HostsMarker; verify reads it), and a
// line naming gw host.internal. The plan shows it (plan --json); nothing
// is written on the host.
func HostsFile(hosts string, gw netip.Addr, ports []netpolicy.HostPort) mounts.Op {
	var b strings.Builder
	for _, l := range strings.SplitAfter(hosts, "\n") {
		if l == "" {
			continue
		}
		f := strings.Fields(strings.SplitN(l, "#", 2)[0])
		named := false
		for _, n := range f[min(1, len(f)):] {
			if strings.EqualFold(n, HostInternal) {
				named = true
			}
		}
		if named {
			continue
		}
		b.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	b.WriteString(HostsMarker)
	for _, p := range ports {
		b.WriteString(" " + p.String())
	}
	fmt.Fprintf(&b, "\n%s\t%s\n", gw, HostInternal)
	return mounts.Op{Kind: mounts.File, Dst: "/etc/hosts", Data: b.String(), Mode: 0o644}
}

// HostHostsFile is HostsFile over the host's own /etc/hosts (read as
// resolv.conf is, at most 64 KiB; a host without one has no entries to
// keep).
func HostHostsFile(gw netip.Addr, ports []netpolicy.HostPort) (mounts.Op, error) {
	f, err := os.Open("/etc/hosts")
	var hosts string
	switch {
	case err == nil:
		hosts, err = ReadResolvConf(f)
		f.Close()
		if err != nil {
			return mounts.Op{}, fmt.Errorf("read /etc/hosts: %w", err)
		}
	case !os.IsNotExist(err):
		return mounts.Op{}, fmt.Errorf("read /etc/hosts: %w", err)
	}
	return HostsFile(hosts, gw, ports), nil
}
