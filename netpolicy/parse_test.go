package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseAllow(t *testing.T) {
	tests := []struct {
		in      string
		want    string // prefix, or "" on error
		wantErr string
	}{
		{"10.1.2.3", "10.1.2.3/32", ""},
		{"  10.1.2.3\t", "10.1.2.3/32", ""},
		{"10.1.0.0/16", "10.1.0.0/16", ""},
		{"10.1.2.3/32", "10.1.2.3/32", ""},
		{"2001:db8::7", "2001:db8::7/128", ""},
		{"2001:db8::/32", "2001:db8::/32", ""},
		{"::ffff:10.1.2.3", "10.1.2.3/32", ""},
		{"::ffff:10.1.0.0/112", "10.1.0.0/16", ""},
		{"", "", "empty allow entry"},
		{"   ", "", "empty allow entry"},
		{"lab-device.local", "", "not an IP address or CIDR"},
		{"10.1.2", "", "not an IP address or CIDR"},
		{"10.1.2.3/33", "", "not an IP address or CIDR"},
		{"10.1.2.3/", "", "not an IP address or CIDR"},
		{"256.1.1.1", "", "not an IP address or CIDR"},
		{"10.1.2.3/8", "", "host bits set: write 10.0.0.0/8 for the network or 10.1.2.3/32 for the single host"},
		{"fe80::1%eth0", "", "zones are not supported"},
		{"0.0.0.0/0", "", "allow everything"},
		{"::/0", "", "allow everything"},
		{"::ffff:0.0.0.0/96", "", "allow everything"},
		{"::ffff:0:0/64", "", "IPv4-mapped CIDR must be /96 or longer"},
		{"10.1.2.3,10.1.2.4", "", "not an IP address or CIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAllow(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseAllow(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != netip.MustParsePrefix(tt.want) {
				t.Fatalf("ParseAllow(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzParseAllow(f *testing.F) {
	for _, s := range []string{"10.1.2.3", "10.0.0.0/8", "::1", "fe80::1%x", "::ffff:1.2.3.4/120", "garbage", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseAllow(s)
		if err != nil {
			return
		}
		if !p.IsValid() || p.Masked() != p || p.Bits() == 0 || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			t.Fatalf("ParseAllow(%q) = %v: not canonical", s, p)
		}
		// Round trip.
		if q, err := ParseAllow(p.String()); err != nil || q != p {
			t.Fatalf("ParseAllow(%q) round trip: %v, %v", p.String(), q, err)
		}
		if _, err := New(Config{Allow: []netip.Prefix{p}}); err != nil {
			t.Fatalf("New rejects parsed %v: %v", p, err)
		}
	})
}
