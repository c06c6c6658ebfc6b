package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DomainRule is one --allow-domain or --deny-domain entry: a host name,
// optionally a wildcard over its subdomains, optionally limited to one
// destination port.
//
// Matching rule: "example.com" matches exactly the name example.com.
// "*.example.com" matches the strict subdomains of example.com at any depth
// (api.example.com, a.b.example.com) and never example.com itself: to allow
// the apex as well, write example.com as a second rule. Names compare
// case-insensitively and without a trailing dot. Internationalised names are
// written in their ASCII (punycode, "xn--") form.
//
// A wildcard directly over a top-level domain ("*.com") is refused. There is
// no public suffix list: "*.co.uk" is accepted, so take care to write the
// registered domain under such suffixes.
type DomainRule struct {
	// Name is canonical: lower case, ASCII, no trailing dot. For a wildcard
	// it is the suffix without "*." (example.com for *.example.com).
	Name string
	// Wildcard: the rule matches the strict subdomains of Name only.
	Wildcard bool
	// Port limits the rule to one destination port; 0 means any port.
	Port uint16
}

// String renders the rule as it is written ("*.example.com:443"); the
// result parses back to r with [ParseDomain].
func (r DomainRule) String() string {
	s := r.Name
	if r.Wildcard {
		s = "*." + s
	}
	if r.Port != 0 {
		s += ":" + strconv.Itoa(int(r.Port))
	}
	return s
}

// ParseDomain parses one domain rule: "example.com", "*.example.com",
// either with an optional ":PORT" ("api.example.com:443"). Surrounding
// space is ignored, the name is lower-cased and one trailing dot is
// dropped. It refuses, with a one-line error that says what to write
// instead: an empty entry, IP literals (use --allow-ip), URLs (give the host
// name only), non-ASCII names (give the xn-- form), empty labels, a "*"
// anywhere but as the whole first label, a wildcard over a top-level domain,
// characters other than letters, digits, '-' and '.', labels longer than 63
// or starting or ending with '-', names longer than 253, a last label that is
// all digits (it reads as an address), and a port outside 1..65535.
func ParseDomain(s string) (DomainRule, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return DomainRule{}, fmt.Errorf("empty domain: give a host name such as example.com or *.example.com")
	}
	if strings.Contains(in, "://") || strings.ContainsAny(in, "/?#@") {
		return DomainRule{}, fmt.Errorf("domain %q looks like a URL: give the host name only%s", s, urlHostHint(in))
	}
	if isIPLiteral(in) {
		return DomainRule{}, fmt.Errorf("domain %q is an IP address: use --allow-ip for addresses", s)
	}
	name, port := in, uint16(0)
	if i := strings.LastIndexByte(in, ':'); i >= 0 {
		if strings.Count(in, ":") > 1 {
			return DomainRule{}, fmt.Errorf("domain %q: a name has at most one \":PORT\" suffix, as in example.com:443", s)
		}
		ps := in[i+1:]
		p, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || p == 0 || ps[0] == '+' || ps[0] == '-' {
			return DomainRule{}, fmt.Errorf("domain %q: port %q is not a number from 1 to 65535 (write e.g. example.com:443, or no port for any)", s, ps)
		}
		name, port = in[:i], uint16(p)
		if isIPLiteral(name) {
			return DomainRule{}, fmt.Errorf("domain %q is an IP address: use --allow-ip for addresses", s)
		}
	}
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			hint := ""
			if a, ok := toASCII(name); ok {
				if _, err := ParseDomain(a); err == nil {
					hint = ", probably " + a
				}
			}
			return DomainRule{}, fmt.Errorf("domain %q is not ASCII: give its punycode (xn--) form%s", s, hint)
		}
	}
	r := DomainRule{Port: port}
	switch {
	case name == "*" || name == "*.":
		return DomainRule{}, fmt.Errorf("domain %q would match every name: list the domains to allow (to turn the jail off use the egress-jail = 0 setting)", s)
	case strings.HasPrefix(name, "*."):
		r.Wildcard = true
		name = name[2:]
	}
	if strings.Contains(name, "*") {
		return DomainRule{}, fmt.Errorf("domain %q: '*' may only be the whole first label, as in *.example.com", s)
	}
	if rest := strings.TrimLeft(name, "."); rest != name {
		if cn, err := checkName(rest); err == nil && strings.Contains(cn, ".") {
			return DomainRule{}, fmt.Errorf("domain %q starts with a dot: write *.%s for its subdomains, %s for the name itself", s, cn, cn)
		}
	}
	cn, err := checkName(name)
	if err != nil {
		return DomainRule{}, fmt.Errorf("domain %q: %v", s, err)
	}
	if isIPLiteral(cn) {
		return DomainRule{}, fmt.Errorf("domain %q is an IP address: use --allow-ip for addresses", s)
	}
	last := cn[strings.LastIndexByte(cn, '.')+1:]
	if strings.Trim(last, "0123456789") == "" {
		return DomainRule{}, fmt.Errorf("domain %q ends in a numeric label, which reads as an IP address: use --allow-ip for addresses", s)
	}
	if r.Wildcard && !strings.Contains(cn, ".") {
		return DomainRule{}, fmt.Errorf("domain %q is a wildcard over a whole top-level domain: name the registered domain, as in *.example.%s", s, cn)
	}
	r.Name = cn
	return r, nil
}

// urlHostHint returns ", e.g. HOST" for a string that looks like a URL whose
// host part is a plausible name, or "".
func urlHostHint(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return ""
	}
	r, err := ParseDomain(s)
	if err != nil {
		return ""
	}
	return ", e.g. " + r.String()
}

// isIPLiteral reports whether s is an IPv4 or IPv6 address, bracketed or
// not, with or without a zone.
func isIPLiteral(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if strings.HasPrefix(s, "[") {
		if ap, err := netip.ParseAddrPort(s); err == nil && ap.IsValid() {
			return true
		}
		if strings.HasSuffix(s, "]") {
			if _, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
				return true
			}
		}
	}
	return false
}

// checkName lower-cases s, drops one trailing dot and validates it as a
// host name. The error says what is wrong, without the name.
func checkName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", fmt.Errorf("empty name")
	}
	if len(s) > 253 {
		return "", fmt.Errorf("name is %d characters long, more than DNS allows (253)", len(s))
	}
	var b []byte // allocated only if s has upper case
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			label := s[start:i]
			switch {
			case label == "":
				return "", fmt.Errorf("empty label (two dots in a row, or a dot at the start)")
			case len(label) > 63:
				return "", fmt.Errorf("label %q is %d characters long, more than DNS allows (63)", label, len(label))
			case label[0] == '-' || label[len(label)-1] == '-':
				return "", fmt.Errorf("label %q starts or ends with '-'", label)
			}
			start = i + 1
			continue
		}
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c >= 'A' && c <= 'Z':
			if b == nil {
				b = []byte(s)
			}
			b[i] = c + ('a' - 'A')
		default:
			return "", fmt.Errorf("character %q is not allowed in a host name (letters, digits, '-' and '.' only)", rune(c))
		}
	}
	if b != nil {
		return string(b), nil
	}
	return s, nil
}

// CanonicalName returns s lower-cased and without one trailing dot, and
// whether it is a valid host name: labels of 1 to 63 letters, digits and
// '-' that do not start or end with '-', at most 253 characters in all.
// Single-label names are valid. It is the form [Domains] matches, used for
// DNS query names and for the names a flow claims (TLS SNI, HTTP Host).
func CanonicalName(s string) (string, bool) {
	n, err := checkName(s)
	if err != nil {
		return "", false
	}
	return n, true
}

// ExpandDomains parses a list of domain specs, in order, each either a rule
// for [ParseDomain] or the name of a preset ("@github", see [Presets]),
// which stands for the preset's rules. Exact duplicates are dropped. An
// unknown preset is an error that lists the known ones.
func ExpandDomains(specs []string) ([]DomainRule, error) {
	var out []DomainRule
	seen := map[DomainRule]bool{}
	add := func(r DomainRule) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, spec := range specs {
		s := strings.TrimSpace(spec)
		if strings.HasPrefix(s, "@") {
			p, ok := lookupPreset(s)
			if !ok {
				return nil, fmt.Errorf("unknown domain preset %q: known presets are %s", s, strings.Join(presetNames(), ", "))
			}
			for _, e := range p.Entries {
				r, err := ParseDomain(e.Rule)
				if err != nil {
					return nil, fmt.Errorf("preset %s: %v", p.Name, err) // a bug in the table; the tests catch it
				}
				add(r)
			}
			continue
		}
		r, err := ParseDomain(s)
		if err != nil {
			return nil, err
		}
		add(r)
	}
	return out, nil
}

// Domains is a compiled set of allow and deny domain rules. It is immutable
// and safe for concurrent use. A nil *Domains has no rules.
type Domains struct {
	allow, deny ruleIndex
	nAllow      int
}

// ruleIndex finds the rules that cover a name by walking its suffixes.
type ruleIndex struct {
	exact map[string][]DomainRule // by Name, non-wildcard rules
	wild  map[string][]DomainRule // by Name (the suffix), wildcard rules
}

func (x *ruleIndex) add(r DomainRule) {
	m := &x.exact
	if r.Wildcard {
		m = &x.wild
	}
	if *m == nil {
		*m = map[string][]DomainRule{}
	}
	if !slices.Contains((*m)[r.Name], r) {
		(*m)[r.Name] = append((*m)[r.Name], r)
	}
}

// match returns the most specific rule covering name whose port is 0 or
// equal to port; port < 0 accepts any rule port, port == -2 accepts only
// port-less rules. Exact rules beat wildcards, longer wildcard suffixes
// beat shorter ones, and a port-specific rule beats a port-less one of the
// same name.
func (x *ruleIndex) match(name string, port int) (DomainRule, bool) {
	pick := func(rs []DomainRule) (DomainRule, bool) {
		var best DomainRule
		found := false
		for _, r := range rs {
			ok := false
			switch {
			case port == anyPort:
				ok = true
			case port == portless:
				ok = r.Port == 0
			default:
				ok = r.Port == 0 || int(r.Port) == port
			}
			if ok && (!found || (best.Port == 0 && r.Port != 0)) {
				best, found = r, true
			}
		}
		return best, found
	}
	if r, ok := pick(x.exact[name]); ok {
		return r, true
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			if r, ok := pick(x.wild[name[i+1:]]); ok {
				return r, true
			}
		}
	}
	return DomainRule{}, false
}

const (
	anyPort  = -1
	portless = -2
)

// NewDomains compiles allow and deny rules. Duplicates are harmless.
func NewDomains(allow, deny []DomainRule) *Domains {
	d := &Domains{}
	for _, r := range allow {
		d.allow.add(r)
		d.nAllow++
	}
	for _, r := range deny {
		d.deny.add(r)
	}
	return d
}

// Empty reports whether d has no allow rules (deny rules alone allow
// nothing, so a caller treats an Empty set as "no domain allowlist").
func (d *Domains) Empty() bool { return d == nil || d.nAllow == 0 }

// Verdicts that are not a rule's name.
const (
	DomainNotAllowed = "domain not allowed"
	DomainDenied     = "domain denied"
)

// AllowName reports whether name may be resolved at all: some allow rule
// covers it (on any port) and no port-less deny rule does. A deny rule
// limited to a port does not stop resolution, since the name may still be
// reached on other ports. name is canonicalised first ([CanonicalName]); an
// invalid name is not allowed. rule is the most specific allow rule's
// String(), or [DomainDenied] or [DomainNotAllowed].
func (d *Domains) AllowName(name string) (ok bool, rule string) {
	n, valid := CanonicalName(name)
	if d == nil || !valid {
		return false, DomainNotAllowed
	}
	if _, denied := d.deny.match(n, portless); denied {
		return false, DomainDenied
	}
	if r, allowed := d.allow.match(n, anyPort); allowed {
		return true, r.String()
	}
	return false, DomainNotAllowed
}

// Allow reports whether a flow to name:port may leave: some allow rule
// covers the name with that port (or any port), and no deny rule covers
// the name with that port or without a port. Deny wins over allow whatever
// their specificity. name is canonicalised first; an invalid name is not
// allowed. rule is the most specific matching allow rule's String(), or
// [DomainDenied] or [DomainNotAllowed].
func (d *Domains) Allow(name string, port uint16) (ok bool, rule string) {
	n, valid := CanonicalName(name)
	if d == nil || !valid {
		return false, DomainNotAllowed
	}
	if _, denied := d.deny.match(n, int(port)); denied {
		return false, DomainDenied
	}
	if r, allowed := d.allow.match(n, int(port)); allowed {
		return true, r.String()
	}
	return false, DomainNotAllowed
}

// DenyRule returns the deny rule that refuses name:port, if any (port 0:
// only port-less deny rules), for logging which rule refused a flow.
func (d *Domains) DenyRule(name string, port uint16) (DomainRule, bool) {
	n, valid := CanonicalName(name)
	if d == nil || !valid {
		return DomainRule{}, false
	}
	p := int(port)
	if port == 0 {
		p = portless
	}
	return d.deny.match(n, p)
}
