package netpolicy

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseDomain(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want DomainRule
		str  string
	}{
		{"example.com", DomainRule{Name: "example.com"}, "example.com"},
		{"  Example.COM.\t", DomainRule{Name: "example.com"}, "example.com"},
		{"*.example.com", DomainRule{Name: "example.com", Wildcard: true}, "*.example.com"},
		{"*.Example.com.", DomainRule{Name: "example.com", Wildcard: true}, "*.example.com"},
		{"api.example.com:443", DomainRule{Name: "api.example.com", Port: 443}, "api.example.com:443"},
		{"*.example.com:8443", DomainRule{Name: "example.com", Wildcard: true, Port: 8443}, "*.example.com:8443"},
		{"example.com.:80", DomainRule{Name: "example.com", Port: 80}, "example.com:80"},
		{"example.com:65535", DomainRule{Name: "example.com", Port: 65535}, "example.com:65535"},
		{"xn--bcher-kva.de", DomainRule{Name: "xn--bcher-kva.de"}, "xn--bcher-kva.de"},
		{"XN--BCHER-KVA.DE", DomainRule{Name: "xn--bcher-kva.de"}, "xn--bcher-kva.de"},
		{"*.xn--r8jz45g.xn--zckzah", DomainRule{Name: "xn--r8jz45g.xn--zckzah", Wildcard: true}, "*.xn--r8jz45g.xn--zckzah"},
		{"localhost", DomainRule{Name: "localhost"}, "localhost"},
		{"intranet:8080", DomainRule{Name: "intranet", Port: 8080}, "intranet:8080"},
		{"a-b.c-d.e", DomainRule{Name: "a-b.c-d.e"}, "a-b.c-d.e"},
		{"1.2.3.example", DomainRule{Name: "1.2.3.example"}, "1.2.3.example"},
		{"123.com", DomainRule{Name: "123.com"}, "123.com"},
		{"*.co.uk", DomainRule{Name: "co.uk", Wildcard: true}, "*.co.uk"}, // no public suffix list (documented)
		{strings.Repeat("a", 63) + ".com", DomainRule{Name: strings.Repeat("a", 63) + ".com"}, strings.Repeat("a", 63) + ".com"},
	} {
		got, err := ParseDomain(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDomain(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.str {
			t.Errorf("ParseDomain(%q).String() = %q, want %q", tt.in, s, tt.str)
		}
		back, err := ParseDomain(got.String())
		if err != nil || back != got {
			t.Errorf("ParseDomain(%q) does not round-trip: %+v, %v", got.String(), back, err)
		}
	}
}

func TestParseDomainErrors(t *testing.T) {
	long := strings.Repeat("a", 64)
	name253 := strings.Repeat(strings.Repeat("a", 49)+".", 5)[:250] + "com" // 253 chars
	for _, tt := range []struct {
		in, want string // want: the exact error
	}{
		{"", `empty domain: give a host name such as example.com or *.example.com`},
		{"   ", `empty domain: give a host name such as example.com or *.example.com`},
		{"a..b", `domain "a..b": empty label (two dots in a row, or a dot at the start)`},
		{"example.com..", `domain "example.com..": empty label (two dots in a row, or a dot at the start)`},
		{".example.com", `domain ".example.com" starts with a dot: write *.example.com for its subdomains, example.com for the name itself`},
		{"a.*.com", `domain "a.*.com": '*' may only be the whole first label, as in *.example.com`},
		{"*foo.com", `domain "*foo.com": '*' may only be the whole first label, as in *.example.com`},
		{"foo.*", `domain "foo.*": '*' may only be the whole first label, as in *.example.com`},
		{"*.*.example.com", `domain "*.*.example.com": '*' may only be the whole first label, as in *.example.com`},
		{"*", `domain "*" would match every name: list the domains to allow (to turn the jail off use the egress-jail = 0 setting)`},
		{"*.", `domain "*." would match every name: list the domains to allow (to turn the jail off use the egress-jail = 0 setting)`},
		{"*.com", `domain "*.com" is a wildcard over a whole top-level domain: name the registered domain, as in *.example.com`},
		{"*.com.", `domain "*.com." is a wildcard over a whole top-level domain: name the registered domain, as in *.example.com`},
		{"exa_mple.com", `domain "exa_mple.com": character '_' is not allowed in a host name (letters, digits, '-' and '.' only)`},
		{"exa mple.com", `domain "exa mple.com": character ' ' is not allowed in a host name (letters, digits, '-' and '.' only)`},
		{"example.com,foo.com", `domain "example.com,foo.com": character ',' is not allowed in a host name (letters, digits, '-' and '.' only)`},
		{"-a.com", `domain "-a.com": label "-a" starts or ends with '-'`},
		{"a-.com", `domain "a-.com": label "a-" starts or ends with '-'`},
		{long + ".com", `domain "` + long + `.com": label "` + long + `" is 64 characters long, more than DNS allows (63)`},
		{name253 + "a", `domain "` + name253 + `a": name is 254 characters long, more than DNS allows (253)`},
		{"example.com:0", `domain "example.com:0": port "0" is not a number from 1 to 65535 (write e.g. example.com:443, or no port for any)`},
		{"example.com:65536", `domain "example.com:65536": port "65536" is not a number from 1 to 65535 (write e.g. example.com:443, or no port for any)`},
		{"example.com:https", `domain "example.com:https": port "https" is not a number from 1 to 65535 (write e.g. example.com:443, or no port for any)`},
		{"example.com:", `domain "example.com:": port "" is not a number from 1 to 65535 (write e.g. example.com:443, or no port for any)`},
		{"example.com:+443", `domain "example.com:+443": port "+443" is not a number from 1 to 65535 (write e.g. example.com:443, or no port for any)`},
		{"example.com:443:80", `domain "example.com:443:80": a name has at most one ":PORT" suffix, as in example.com:443`},
		{":443", `domain ":443": empty name`},
		{"1.2.3.4", `domain "1.2.3.4" is an IP address: use --allow-ip for addresses`},
		{"1.2.3.4:443", `domain "1.2.3.4:443" is an IP address: use --allow-ip for addresses`},
		{"1.2.3.4.", `domain "1.2.3.4." is an IP address: use --allow-ip for addresses`},
		{"2001:db8::1", `domain "2001:db8::1" is an IP address: use --allow-ip for addresses`},
		{"[2001:db8::1]", `domain "[2001:db8::1]" is an IP address: use --allow-ip for addresses`},
		{"[2001:db8::1]:443", `domain "[2001:db8::1]:443" is an IP address: use --allow-ip for addresses`},
		{"::ffff:1.2.3.4", `domain "::ffff:1.2.3.4" is an IP address: use --allow-ip for addresses`},
		{"fe80::1%eth0", `domain "fe80::1%eth0" is an IP address: use --allow-ip for addresses`},
		{"1.2.3", `domain "1.2.3" ends in a numeric label, which reads as an IP address: use --allow-ip for addresses`},
		{"010.1.1.1", `domain "010.1.1.1" ends in a numeric label, which reads as an IP address: use --allow-ip for addresses`},
		{"https://x.com/path", `domain "https://x.com/path" looks like a URL: give the host name only, e.g. x.com`},
		{"http://user@X.com:8080/", `domain "http://user@X.com:8080/" looks like a URL: give the host name only, e.g. x.com:8080`},
		{"x.com/path", `domain "x.com/path" looks like a URL: give the host name only, e.g. x.com`},
		{"https://", `domain "https://" looks like a URL: give the host name only`},
		{"bücher.de", `domain "bücher.de" is not ASCII: give its punycode (xn--) form, probably xn--bcher-kva.de`},
		{"*.München.de", `domain "*.München.de" is not ASCII: give its punycode (xn--) form, probably *.xn--mnchen-3ya.de`},
		{"例え.テスト", `domain "例え.テスト" is not ASCII: give its punycode (xn--) form, probably xn--r8jz45g.xn--zckzah`},
		{"a\xffb.com", `domain "a\xffb.com" is not ASCII: give its punycode (xn--) form`},
	} {
		got, err := ParseDomain(tt.in)
		if err == nil {
			t.Errorf("ParseDomain(%q) = %+v, want error %q", tt.in, got, tt.want)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("ParseDomain(%q) error\n got %q\nwant %q", tt.in, err, tt.want)
		}
		if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "netpolicy") {
			t.Errorf("ParseDomain(%q) error is not one plain line: %q", tt.in, err)
		}
	}
}

func TestCanonicalName(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"Example.COM", "example.com", true},
		{"example.com.", "example.com", true},
		{"example.com..", "", false},
		{"localhost", "localhost", true},
		{"xn--bcher-kva.de", "xn--bcher-kva.de", true},
		{"", "", false},
		{".", "", false},
		{"a..b", "", false},
		{"*.example.com", "", false},
		{"exa_mple.com", "", false},
		{"bücher.de", "", false},
		{"a\x00b", "", false},
		{"-a.com", "", false},
		{strings.Repeat("a", 64), "", false},
		{strings.Repeat("a", 63), strings.Repeat("a", 63), true},
	} {
		got, ok := CanonicalName(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("CanonicalName(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func mustRules(t *testing.T, specs ...string) []DomainRule {
	t.Helper()
	rs, err := ExpandDomains(specs)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestDomainsAllow(t *testing.T) {
	d := NewDomains(
		mustRules(t, "example.com", "*.cdn.example.net", "api.corp.test:443", "*.Svc.Test.:8443", "both.test", "*.both.test", "XN--BCHER-KVA.de", "*.deep.test", "x.y.deep.test:22"),
		mustRules(t, "bad.cdn.example.net", "*.evil.cdn.example.net", "both.test:25", "admin.deep.test", "*.ports.deep.test:443"),
	)
	for _, tt := range []struct {
		name string
		port uint16
		ok   bool
		rule string
	}{
		// exact
		{"example.com", 443, true, "example.com"},
		{"example.com", 80, true, "example.com"},
		{"EXAMPLE.com.", 443, true, "example.com"},
		{"www.example.com", 443, false, DomainNotAllowed},
		{"xample.com", 443, false, DomainNotAllowed},
		{"example.com.evil", 443, false, DomainNotAllowed},
		// wildcard: strict subdomains only
		{"a.cdn.example.net", 443, true, "*.cdn.example.net"},
		{"a.b.cdn.example.net", 443, true, "*.cdn.example.net"},
		{"cdn.example.net", 443, false, DomainNotAllowed},
		{"xcdn.example.net", 443, false, DomainNotAllowed},
		// apex and wildcard both given
		{"both.test", 443, true, "both.test"},
		{"www.both.test", 443, true, "*.both.test"},
		// port restriction
		{"api.corp.test", 443, true, "api.corp.test:443"},
		{"api.corp.test", 80, false, DomainNotAllowed},
		{"x.svc.test", 8443, true, "*.svc.test:8443"},
		{"x.svc.test", 443, false, DomainNotAllowed},
		// a port-specific rule is more specific than a port-less wildcard
		{"x.y.deep.test", 22, true, "x.y.deep.test:22"},
		{"x.y.deep.test", 443, true, "*.deep.test"},
		// punycode
		{"xn--bcher-kva.de", 443, true, "xn--bcher-kva.de"},
		{"bücher.de", 443, false, DomainNotAllowed},
		// deny beats allow, without a port
		{"bad.cdn.example.net", 443, false, DomainDenied},
		{"x.bad.cdn.example.net", 443, true, "*.cdn.example.net"}, // deny of a name is exact
		{"evil.cdn.example.net", 443, true, "*.cdn.example.net"},  // *.evil: subdomains only
		{"a.evil.cdn.example.net", 443, false, DomainDenied},
		{"admin.deep.test", 443, false, DomainDenied},
		// deny with a port: only that port
		{"both.test", 25, false, DomainDenied},
		{"both.test", 587, true, "both.test"},
		{"a.ports.deep.test", 443, false, DomainDenied},
		{"a.ports.deep.test", 80, true, "*.deep.test"},
		// invalid names
		{"", 443, false, DomainNotAllowed},
		{"a..example.com", 443, false, DomainNotAllowed},
		{"*.cdn.example.net", 443, false, DomainNotAllowed},
	} {
		ok, rule := d.Allow(tt.name, tt.port)
		if ok != tt.ok || rule != tt.rule {
			t.Errorf("Allow(%q, %d) = %v, %q; want %v, %q", tt.name, tt.port, ok, rule, tt.ok, tt.rule)
		}
	}
}

func TestDomainsAllowName(t *testing.T) {
	d := NewDomains(
		mustRules(t, "example.com", "*.example.com", "api.corp.test:443", "both.test"),
		mustRules(t, "bad.example.com", "both.test:25", "*.ports.example.com:443"),
	)
	for _, tt := range []struct {
		name string
		ok   bool
		rule string
	}{
		{"example.com", true, "example.com"},
		{"www.Example.com.", true, "*.example.com"},
		{"api.corp.test", true, "api.corp.test:443"}, // allowed on some port: resolvable
		{"bad.example.com", false, DomainDenied},
		{"both.test", true, "both.test"},               // denied on port 25 only
		{"a.ports.example.com", true, "*.example.com"}, // denied on port 443 only
		{"other.test", false, DomainNotAllowed},
		{"corp.test", false, DomainNotAllowed},
		{"", false, DomainNotAllowed},
	} {
		ok, rule := d.AllowName(tt.name)
		if ok != tt.ok || rule != tt.rule {
			t.Errorf("AllowName(%q) = %v, %q; want %v, %q", tt.name, ok, rule, tt.ok, tt.rule)
		}
	}
}

func TestDomainsEmpty(t *testing.T) {
	var nilD *Domains
	if !nilD.Empty() {
		t.Error("nil Domains not Empty")
	}
	if ok, rule := nilD.Allow("example.com", 443); ok || rule != DomainNotAllowed {
		t.Errorf("nil Domains Allow = %v, %q", ok, rule)
	}
	if ok, _ := nilD.AllowName("example.com"); ok {
		t.Error("nil Domains AllowName = true")
	}
	if !NewDomains(nil, nil).Empty() {
		t.Error("NewDomains(nil, nil) not Empty")
	}
	denyOnly := NewDomains(nil, mustRules(t, "example.com"))
	if !denyOnly.Empty() {
		t.Error("deny rules alone make Domains non-Empty")
	}
	if ok, _ := denyOnly.Allow("other.com", 443); ok {
		t.Error("deny-only Domains allows a name")
	}
	if NewDomains(mustRules(t, "example.com"), nil).Empty() {
		t.Error("Domains with an allow rule is Empty")
	}
}

func TestDenyRule(t *testing.T) {
	d := NewDomains(mustRules(t, "*.example.com"), mustRules(t, "*.bad.example.com", "x.example.com:25"))
	if r, ok := d.DenyRule("a.bad.example.com", 443); !ok || r.String() != "*.bad.example.com" {
		t.Errorf("DenyRule = %v, %v", r, ok)
	}
	if r, ok := d.DenyRule("x.example.com", 25); !ok || r.String() != "x.example.com:25" {
		t.Errorf("DenyRule = %v, %v", r, ok)
	}
	if r, ok := d.DenyRule("x.example.com", 0); ok {
		t.Errorf("DenyRule(port 0) = %v, want none (port-less rules only)", r)
	}
}

// reference is the obvious linear implementation of Allow, to cross-check
// the indexed one.
func reference(allow, deny []DomainRule, name string, port uint16) bool {
	n, ok := CanonicalName(name)
	if !ok {
		return false
	}
	covers := func(r DomainRule) bool {
		nameOK := n == r.Name
		if r.Wildcard {
			nameOK = strings.HasSuffix(n, "."+r.Name)
		}
		return nameOK && (r.Port == 0 || r.Port == port)
	}
	for _, r := range deny {
		if covers(r) {
			return false
		}
	}
	for _, r := range allow {
		if covers(r) {
			return true
		}
	}
	return false
}

func TestDomainsAgreeWithReference(t *testing.T) {
	labels := []string{"a", "b", "example", "com"}
	var names []string
	var gen func(prefix string, depth int)
	gen = func(prefix string, depth int) {
		if depth == 0 {
			return
		}
		for _, l := range labels {
			n := l
			if prefix != "" {
				n = l + "." + prefix
			}
			names = append(names, n)
			gen(n, depth-1)
		}
	}
	gen("", 3)
	ports := []uint16{0, 80, 443}
	var rules []DomainRule
	for _, n := range names {
		for _, w := range []bool{false, true} {
			for _, p := range ports {
				if w && !strings.Contains(n, ".") {
					continue
				}
				rules = append(rules, DomainRule{Name: n, Wildcard: w, Port: p})
			}
		}
	}
	// Deterministic pseudo-random subsets of the rules.
	seed := uint32(1)
	rnd := func() uint32 { seed = seed*1664525 + 1013904223; return seed >> 8 }
	for round := 0; round < 200; round++ {
		var allow, deny []DomainRule
		for _, r := range rules {
			switch rnd() % 40 {
			case 0:
				allow = append(allow, r)
			case 1:
				deny = append(deny, r)
			}
		}
		d := NewDomains(allow, deny)
		for _, n := range names {
			for _, p := range ports {
				want := reference(allow, deny, n, p)
				got, rule := d.Allow(n, p)
				if got != want {
					t.Fatalf("round %d: Allow(%q, %d) = %v (%s), reference %v; allow %v deny %v", round, n, p, got, rule, want, allow, deny)
				}
				if got {
					r, err := ParseDomain(rule)
					if err != nil || !reference([]DomainRule{r}, nil, n, p) {
						t.Fatalf("Allow(%q, %d) names rule %q, which does not cover it", n, p, rule)
					}
				}
			}
		}
	}
}

func TestExpandDomains(t *testing.T) {
	rs, err := ExpandDomains([]string{"example.com", "@npm", " @pypi ", "registry.npmjs.org", "*.example.com:443"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.String())
	}
	want := "example.com registry.npmjs.org pypi.org files.pythonhosted.org *.example.com:443"
	if strings.Join(got, " ") != want {
		t.Errorf("ExpandDomains = %v, want %v", got, want)
	}
	for _, tt := range []struct {
		in   []string
		want string
	}{
		{[]string{"@nope"}, `unknown domain preset "@nope": known presets are @claude-code, @github, @go, @npm, @pypi`},
		{[]string{"@"}, `unknown domain preset "@": known presets are @claude-code, @github, @go, @npm, @pypi`},
		{[]string{"ok.com", "a..b"}, `domain "a..b": empty label (two dots in a row, or a dot at the start)`},
		{[]string{""}, `empty domain: give a host name such as example.com or *.example.com`},
	} {
		if _, err := ExpandDomains(tt.in); err == nil || err.Error() != tt.want {
			t.Errorf("ExpandDomains(%q) error %v, want %q", tt.in, err, tt.want)
		}
	}
	if rs, err := ExpandDomains(nil); err != nil || len(rs) != 0 {
		t.Errorf("ExpandDomains(nil) = %v, %v", rs, err)
	}
}

func TestPresets(t *testing.T) {
	ps := Presets()
	if len(ps) == 0 {
		t.Fatal("no presets")
	}
	seenPreset := map[string]bool{}
	inPreset := map[DomainRule]string{} // no rule in two presets
	for i, p := range ps {
		if i > 0 && ps[i-1].Name >= p.Name {
			t.Errorf("presets not sorted: %s before %s", ps[i-1].Name, p.Name)
		}
		if !strings.HasPrefix(p.Name, "@") || seenPreset[p.Name] {
			t.Errorf("bad or duplicate preset name %q", p.Name)
		}
		seenPreset[p.Name] = true
		if len(p.Entries) == 0 {
			t.Errorf("preset %s is empty", p.Name)
		}
		seen := map[DomainRule]bool{}
		for _, e := range p.Entries {
			r, err := ParseDomain(e.Rule)
			if err != nil {
				t.Errorf("preset %s: %v", p.Name, err)
				continue
			}
			if r.String() != e.Rule {
				t.Errorf("preset %s: rule %q is not canonical (%q)", p.Name, e.Rule, r.String())
			}
			if seen[r] {
				t.Errorf("preset %s: duplicate rule %q", p.Name, e.Rule)
			}
			if other, ok := inPreset[r]; ok && other != p.Name {
				t.Errorf("rule %q is in both %s and %s", e.Rule, other, p.Name)
			}
			inPreset[r] = p.Name
			seen[r] = true
			if e.Reason == "" || strings.Contains(e.Reason, "\n") {
				t.Errorf("preset %s: rule %q needs a one-line reason", p.Name, e.Rule)
			}
		}
		rs, err := ExpandDomains([]string{p.Name})
		if err != nil || len(rs) != len(p.Entries) {
			t.Errorf("ExpandDomains(%s) = %v, %v", p.Name, rs, err)
		}
	}
	// Presets returns a copy.
	ps[0].Entries[0].Rule = "changed.example"
	if Presets()[0].Entries[0].Rule == "changed.example" {
		t.Error("Presets returns the table itself")
	}
}

func TestPunycode(t *testing.T) {
	// Vectors from RFC 3492 section 7.1 and well-known names.
	for _, tt := range []struct{ in, want string }{
		{"bücher", "bcher-kva"},
		{"münchen", "mnchen-3ya"},
		{"例え", "r8jz45g"},
		{"テスト", "zckzah"},
		{"ليهمابتكلموشعربي؟", "egbpdaj6bu4bxfgehfvwxn"},                      // (A) Arabic
		{"他们为什么不说中文", "ihqwcrb4cv8a8dqg056pqjye"},                            // (B) Chinese
		{"почемужеонинеговорятпорусски", "b1abfaaepdrnnbgefbadotcwatmq2g4l"}, // (I) Russian
		{"3年b組金八先生", "3b-ww4c5e180e575a65lsy2b"},                             // (L)
		{"-> $1.00 <-", "-> $1.00 <--"},                                      // (S) all basic
	} {
		got, ok := punyEncode(tt.in)
		if !ok || got != tt.want {
			t.Errorf("punyEncode(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

func ExampleParseDomain() {
	for _, s := range []string{"*.Example.com:443", "https://example.com/x"} {
		r, err := ParseDomain(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(r.Name, r.Wildcard, r.Port)
	}
	// Output:
	// example.com true 443
	// domain "https://example.com/x" looks like a URL: give the host name only, e.g. example.com
}

// FuzzParseDomain: no panics; an accepted rule is canonical, round-trips
// through String, and its name is a valid CanonicalName; errors are one
// line.
func FuzzParseDomain(f *testing.F) {
	for _, s := range []string{"example.com", "*.Example.com.:443", "a..b", "*.com", "1.2.3.4", "[::1]:80", "https://x.com/p", "bücher.de", "*", "x:0", "@github"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseDomain(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error has a newline: %q", err)
			}
			return
		}
		if n, ok := CanonicalName(r.Name); !ok || n != r.Name {
			t.Fatalf("ParseDomain(%q).Name = %q, not canonical", s, r.Name)
		}
		if r.Wildcard && !strings.Contains(r.Name, ".") {
			t.Fatalf("ParseDomain(%q) is a wildcard over a TLD", s)
		}
		back, err := ParseDomain(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseDomain(%q) = %+v does not round-trip: %+v, %v", s, r, back, err)
		}
		d := NewDomains([]DomainRule{r}, nil)
		probe := r.Name
		if r.Wildcard {
			probe = "x." + r.Name
		}
		if ok, rule := d.Allow(probe, r.Port); !ok || rule != r.String() {
			t.Fatalf("rule %q does not allow %q: %v", r, probe, rule)
		}
		if r.Wildcard {
			if ok, _ := d.AllowName(r.Name); ok {
				t.Fatalf("wildcard %q allows its apex", r)
			}
		}
	})
}

func TestDomainsConcurrent(t *testing.T) {
	d := NewDomains(mustRules(t, "@github", "*.example.com"), mustRules(t, "bad.example.com"))
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 1000; i++ {
				if ok, _ := d.Allow("api.github.com", 443); !ok {
					t.Error("api.github.com refused")
				}
				if ok, _ := d.AllowName("bad.example.com"); ok {
					t.Error("bad.example.com allowed")
				}
			}
			done <- true
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}
