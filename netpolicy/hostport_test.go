package netpolicy

import (
	"strings"
	"testing"
)

func TestParseHostPort(t *testing.T) {
	for in, want := range map[string]HostPort{
		"11434": {ProtoTCP, 11434}, "8080/tcp": {ProtoTCP, 8080}, "5353/udp": {ProtoUDP, 5353}, " 1/UDP ": {ProtoUDP, 1}, "65535": {ProtoTCP, 65535},
	} {
		got, err := ParseHostPort(in)
		if err != nil || got != want {
			t.Errorf("ParseHostPort(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "65536", "http", "80/sctp", "-1", "80/", "/udp", "127.0.0.1:80"} {
		if got, err := ParseHostPort(in); err == nil {
			t.Errorf("ParseHostPort(%q) = %v, want an error", in, got)
		}
	}
}

// Loopback in an allow entry would be the sandbox's own loopback and do
// nothing: refused, naming --allow-host-port.
func TestAllowLoopbackRefused(t *testing.T) {
	for _, in := range []string{"127.0.0.1", "127.0.0.53", "::1", "::ffff:127.0.0.1", "127.0.0.0/8", "127.5.0.0/16", "64.0.0.0/2", "::/127"} {
		_, err := ParseAllow(in)
		if err == nil || !strings.Contains(err.Error(), "--allow-host-port") {
			t.Errorf("ParseAllow(%q): %v, want a refusal naming --allow-host-port", in, err)
		}
	}
	for _, in := range []string{"10.1.2.3", "128.0.0.0/8", "::2", "fd00::/8"} {
		if _, err := ParseAllow(in); err != nil {
			t.Errorf("ParseAllow(%q): %v", in, err)
		}
	}
}
