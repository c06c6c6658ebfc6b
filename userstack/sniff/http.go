package sniff

import "bytes"

// MaxHTTPHeader bounds what [HTTPHost] reads: a request whose header block
// (request line included) does not end within the stream's first
// MaxHTTPHeader bytes is Malformed.
const MaxHTTPHeader = 16 << 10

// HTTPHost reads the host a plain HTTP/1.x request names, from the first
// bytes b of a TCP stream.
//
// The first line must be a strict HTTP/1.x request line (method SP
// request-target SP "HTTP/1." digit CRLF). One that is not, but that a
// lenient server may still take for a request in another spelling (runs
// of spaces or tabs, a lower-case version, HTTP/0.9's missing version,
// another version, a known method in any case: see looseRequestLine), is
// Malformed. Only a line no server would read as a request is NotThis, and
// HTTP/2 with prior knowledge ("PRI * HTTP/2.0" and the rest of its
// preface), which the caller decides on. After a strict request line it
// waits for the whole header block, up to the empty line, and then returns
// Found with the Host header's host: the port is stripped and an IPv6 literal's
// brackets removed, and otherwise it is as sent (the caller canonicalises
// and validates it). It waits for the end of the headers even when the Host
// line came early, so that a second Host header cannot follow the one it
// saw; clients send the whole header block before they wait for an answer.
//
// Malformed, for requests a lenient server might read differently from
// this parser: no Host header, two of them, an empty host or one with
// characters outside letters, digits, "-._~" (an IPv6 literal in brackets
// aside) or with a non-numeric port, line endings other than CRLF, control
// characters in a header, a folded header line, white space before a
// header's colon, a request-target in absolute or authority form (a proxy
// request, "GET http://h/ HTTP/1.1" or "CONNECT h:443 HTTP/1.1") whose host
// differs from the Host header's, and a header block that does not end
// within MaxHTTPHeader bytes.
//
// Empty lines (CR and LF bytes) before the request line are skipped, as
// servers do (RFC 9112 section 2.2 says they should ignore at least one):
// otherwise "\r\nGET / HTTP/1.1" would be NotThis here and still a request
// to nginx.
//
// Only the first request of a connection is seen: later requests on a
// kept-alive connection may name other hosts.
func HTTPHost(b []byte) (host string, res Result) {
	if len(b) > MaxHTTPHeader {
		b = b[:MaxHTTPHeader]
	}
	lead := 0
	for lead < len(b) && (b[lead] == '\r' || b[lead] == '\n') {
		lead++
	}
	if lead == len(b) {
		return httpMore(b)
	}
	host, res = httpHost(b[lead:])
	if res == NeedMore && len(b) >= MaxHTTPHeader {
		res = Malformed // the empty lines count toward the limit
	}
	return host, res
}

func httpHost(b []byte) (host string, res Result) {
	method, target, i, res := requestLine(b)
	if res == NotThis {
		res = looseRequestLine(b)
	}
	if res != Found {
		return "", res
	}
	var hostVal []byte
	seenHost := false
	for {
		rest := b[i:]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			if bytes.IndexByte(rest, '\r') >= 0 && (rest[len(rest)-1] != '\r' || bytes.IndexByte(rest[:len(rest)-1], '\r') >= 0) {
				return "", Malformed // a bare CR
			}
			return httpMore(b)
		}
		if nl == 0 || rest[nl-1] != '\r' {
			return "", Malformed // a bare LF
		}
		line := rest[:nl-1]
		i += nl + 1
		if len(line) == 0 {
			break // end of the header block
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "", Malformed // obsolete line folding
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return "", Malformed
		}
		for _, c := range line[:colon] {
			if !isTchar(c) {
				return "", Malformed
			}
		}
		val := bytes.Trim(line[colon+1:], " \t")
		for _, c := range val {
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return "", Malformed
			}
		}
		if len(line[:colon]) == 4 && bytes.EqualFold(line[:colon], []byte("host")) {
			if seenHost {
				return "", Malformed
			}
			seenHost, hostVal = true, val
		}
	}
	if !seenHost {
		return "", Malformed
	}
	h, ok := splitHostPort(hostVal)
	if !ok {
		return "", Malformed
	}
	// A proxy request's target names the host, and a server that takes
	// both must use the target's (RFC 9112 section 3.2.2): they must agree.
	var auth []byte
	switch {
	case string(method) == "CONNECT":
		auth = target
	case target[0] == '/' || string(target) == "*":
	default:
		k := bytes.Index(target, []byte("://"))
		if k <= 0 {
			return "", Malformed
		}
		auth = target[k+3:]
		if e := bytes.IndexAny(auth, "/?#"); e >= 0 {
			auth = auth[:e]
		}
	}
	if auth != nil {
		th, ok := splitHostPort(auth)
		if !ok || !bytes.EqualFold(th, h) {
			return "", Malformed
		}
	}
	return string(h), Found
}

func httpMore(b []byte) (string, Result) {
	if len(b) >= MaxHTTPHeader {
		return "", Malformed
	}
	return "", NeedMore
}

// requestLine parses "method SP target SP HTTP/1.d CRLF" at the start of
// b and returns the method, the target and the offset after the CRLF.
func requestLine(b []byte) (method, target []byte, next int, res Result) {
	i := 0
	for i < len(b) && isTchar(b[i]) {
		i++
	}
	if i == len(b) {
		_, r := httpMore(b)
		return nil, nil, 0, r
	}
	if i == 0 || b[i] != ' ' {
		return nil, nil, 0, NotThis
	}
	method = b[:i]
	i++
	t := i
	for i < len(b) && b[i] > ' ' && b[i] != 0x7f {
		i++
	}
	if i == len(b) {
		_, r := httpMore(b)
		return nil, nil, 0, r
	}
	if i == t || b[i] != ' ' {
		return nil, nil, 0, NotThis
	}
	target = b[t:i]
	i++
	const version = "HTTP/1."
	for k := 0; k < len(version); k++ {
		if i+k == len(b) {
			_, r := httpMore(b)
			return nil, nil, 0, r
		}
		if b[i+k] != version[k] {
			return nil, nil, 0, NotThis
		}
	}
	i += len(version)
	if i == len(b) {
		_, r := httpMore(b)
		return nil, nil, 0, r
	}
	if b[i] < '0' || b[i] > '9' {
		return nil, nil, 0, NotThis
	}
	i++
	for _, c := range []byte("\r\n") {
		if i == len(b) {
			_, r := httpMore(b)
			return nil, nil, 0, r
		}
		if b[i] != c {
			return nil, nil, 0, Malformed
		}
		i++
	}
	return method, target, i, Found
}

// httpMethods are the request methods a first line is taken for a request
// by whatever follows them, in any case (servers differ on case).
var httpMethods = []string{
	"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
	"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "SEARCH",
	"REPORT", "MKCALENDAR", "ACL", "PURGE", "QUERY",
}

// h2Preface opens an HTTP/2 connection with prior knowledge (RFC 9113
// section 3.4): NotThis, for the caller to decide on.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// looseRequestLine decides on a first line b that is not a strict request
// line (requestLine said NotThis): Malformed when a lenient server may
// still read it as a request, NotThis when none would, NeedMore until it
// can tell. A line is taken for a request when its first word is a known
// method in any case ("GET  /", "get\t/", "GET /" of HTTP/0.9), or when
// it names an HTTP version anywhere ("x  / HTTP/1.1", " GET / http/1.1",
// "GET / HTTP/2.0"). The line ends at a CR, an LF or another control
// character; one that does not end within MaxHTTPHeader bytes is judged
// on those bytes. HTTP/2's prior-knowledge preface alone stays NotThis.
func looseRequestLine(b []byte) Result {
	if n := min(len(b), len(h2Preface)); bytes.Equal(b[:n], []byte(h2Preface[:n])) {
		if n == len(h2Preface) {
			return NotThis
		}
		return NeedMore
	}
	if c := b[0]; !isTchar(c) && c != ' ' && c != '\t' {
		return NotThis // binary: no server reads a request line here
	}
	w := 0
	for w < len(b) && isTchar(b[w]) {
		w++
	}
	if w < len(b) {
		for _, m := range httpMethods {
			if bytes.EqualFold(b[:w], []byte(m)) {
				return Malformed
			}
		}
	}
	const version = "http/"
	for j, c := range b {
		if c == '\r' || c == '\n' || (c < 0x20 && c != '\t') || c == 0x7f {
			return NotThis
		}
		if j+len(version) <= len(b) && bytes.EqualFold(b[j:j+len(version)], []byte(version)) {
			return Malformed
		}
	}
	if len(b) >= MaxHTTPHeader {
		return NotThis
	}
	return NeedMore
}

// splitHostPort splits a Host value or an authority into its host, without
// an IPv6 literal's brackets, and checks the parts.
func splitHostPort(v []byte) ([]byte, bool) {
	var host, port []byte
	if len(v) > 0 && v[0] == '[' {
		end := bytes.IndexByte(v, ']')
		if end < 0 {
			return nil, false
		}
		host, port = v[1:end], v[end+1:]
		for _, c := range host {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.') {
				return nil, false
			}
		}
		if len(port) > 0 {
			if port[0] != ':' {
				return nil, false
			}
			port = port[1:]
		}
	} else {
		host = v
		if c := bytes.IndexByte(v, ':'); c >= 0 {
			host, port = v[:c], v[c+1:]
		}
		for _, c := range host {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '.' || c == '_' || c == '~') {
				return nil, false
			}
		}
	}
	if len(host) == 0 {
		return nil, false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return nil, false
		}
	}
	return host, true
}

// isTchar reports whether c may appear in an HTTP token (RFC 9110 section
// 5.6.2): a method or a header name.
func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
