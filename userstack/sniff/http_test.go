package sniff

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

func TestHTTPHost(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     string
		res      Result
	}{
		{"simple", "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com", Found},
		{"leading empty lines", "\r\n\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", "evil.test", Found},
		{"leading empty lines only", "\r\n\r\n", "", NeedMore},
		{"leading empty lines, not http", "\r\nSSH-2.0-x\r\n", "", NotThis},
		{"port stripped", "GET /x?y HTTP/1.1\r\nHost: Example.COM:8080\r\nAccept: */*\r\n\r\n", "Example.COM", Found},
		{"host not first", "POST /api HTTP/1.1\r\nUser-Agent: t\r\nhOsT:   a.test  \r\nContent-Length: 3\r\n\r\nabc", "a.test", Found},
		{"ipv6", "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", "2001:db8::1", Found},
		{"ipv6 no port", "GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n", "::1", Found},
		{"http/1.0", "GET / HTTP/1.0\r\nHost: old.test\r\n\r\n", "old.test", Found},
		{"trailing dot", "GET / HTTP/1.1\r\nHost: dot.test.\r\n\r\n", "dot.test.", Found},
		{"empty port", "GET / HTTP/1.1\r\nHost: a.test:\r\n\r\n", "a.test", Found},
		{"options star", "OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n", "a.test", Found},
		{"absolute form agrees", "GET http://A.test:80/x HTTP/1.1\r\nHost: a.test\r\n\r\n", "a.test", Found},
		{"absolute form differs", "GET http://evil.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"absolute form userinfo", "GET http://a.test@evil.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"absolute form empty host", "GET http:///x HTTP/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"relative target", "GET a.test HTTP/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"connect agrees", "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", "a.test", Found},
		{"connect differs", "CONNECT evil.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", "", Malformed},
		{"http/1.0 no host", "GET / HTTP/1.0\r\n\r\n", "", Malformed},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nHost: evil.test\r\n\r\n", "", Malformed},
		{"two hosts same", "GET / HTTP/1.1\r\nHost: a.test\r\nHOST: a.test\r\n\r\n", "", Malformed},
		{"empty host", "GET / HTTP/1.1\r\nHost: \r\n\r\n", "", Malformed},
		{"host list", "GET / HTTP/1.1\r\nHost: a.test, evil.test\r\n\r\n", "", Malformed},
		{"host userinfo", "GET / HTTP/1.1\r\nHost: a.test@evil.test\r\n\r\n", "", Malformed},
		{"host path", "GET / HTTP/1.1\r\nHost: a.test/x\r\n\r\n", "", Malformed},
		{"host bad port", "GET / HTTP/1.1\r\nHost: a.test:80x\r\n\r\n", "", Malformed},
		{"host two colons", "GET / HTTP/1.1\r\nHost: a.test:80:81\r\n\r\n", "", Malformed},
		{"host unclosed bracket", "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", "", Malformed},
		{"host bracket garbage", "GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n", "", Malformed},
		{"host bracket name", "GET / HTTP/1.1\r\nHost: [evil.test]\r\n\r\n", "", Malformed},
		{"host nul", "GET / HTTP/1.1\r\nHost: a.test\x00evil.test\r\n\r\n", "", Malformed},
		{"host non-ascii", "GET / HTTP/1.1\r\nHost: bücher.de\r\n\r\n", "", Malformed},
		{"space before colon", "GET / HTTP/1.1\r\nHost : evil.test\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"folded line", "GET / HTTP/1.1\r\nX: y\r\n Host: evil.test\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"bare lf in headers", "GET / HTTP/1.1\r\nHost: a.test\r\nX: y\nHost: evil.test\r\n\r\n", "", Malformed},
		{"bare cr in headers", "GET / HTTP/1.1\r\nHost: a.test\r\nX: y\rHost: evil.test\r\n\r\n", "", Malformed},
		{"bare lf hides a header", "GET / HTTP/1.1\r\nX: y\nHost: evil.test\r\n\r\n", "", Malformed},
		{"bare lf ends request line", "GET / HTTP/1.1\nHost: a.test\n\n", "", Malformed},
		{"bare lf ends headers", "GET / HTTP/1.1\r\nHost: a.test\n\n", "", Malformed},
		{"no colon", "GET / HTTP/1.1\r\nHost a.test\r\n\r\n", "", Malformed},
		{"version junk", "GET / HTTP/1.1x\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"waits for end of headers", "GET / HTTP/1.1\r\nHost: a.test\r\n", "", NeedMore},
		{"partial method", "GE", "", NeedMore},
		{"partial version", "GET / HTT", "", NeedMore},
		{"empty", "", "", NeedMore},
		{"http2 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", NotThis},
		{"http/0.9", "GET /\r\n", "", Malformed},
		{"http/0.9 lower case", "get /\r\n", "", Malformed},
		{"tls", "\x16\x03\x01\x02\x00\x01", "", NotThis},
		{"ssh", "SSH-2.0-OpenSSH_9.6 Ubuntu-3\r\n", "", NotThis},
		{"ssh with a tab", "SSH-2.0-x\tcomment\r\n", "", NotThis},
		{"lower-case version", "GET / http/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: other.test\r\n\r\n", "", Malformed},
		{"two spaces, line only", "GET  / HTTP/1.1\r\n", "", Malformed},
		{"two spaces, method only", "GET  ", "", Malformed},
		{"two spaces before version", "GET /  HTTP/1.1\r\nHost: other.test\r\n\r\n", "", Malformed},
		{"space before crlf", "GET / HTTP/1.1 \r\nHost: other.test\r\n\r\n", "", Malformed},
		{"unknown method, two spaces", "FOO  / HTTP/1.1\r\nHost: other.test\r\n\r\n", "", Malformed},
		{"unknown method, waits for the version", "FOO  / HT", "", NeedMore},
		{"leading space", " GET / HTTP/1.1\r\n", "", Malformed},
		{"leading tab", "\tGET / HTTP/1.1\r\n", "", Malformed},
		{"leading crlf", "\r\nGET / HTTP/1.1\r\n", "", NeedMore}, // nginx skips the empty line
		{"leading crlf, two spaces", "\r\nGET  / HTTP/1.1\r\n", "", Malformed},
		{"tab separator", "GET\t/ HTTP/1.1\r\n", "", Malformed},
		{"tabs everywhere", "GET\t/\tHTTP/1.1\r\nHost: other.test\r\n\r\n", "", Malformed},
		{"lower-case method, two spaces", "get  / HTTP/1.1\r\n", "", Malformed},
		{"lower-case method", "get / HTTP/1.1\r\nHost: a.test\r\n\r\n", "a.test", Found},
		{"no version", "GET / \r\nHost: other.test\r\n\r\n", "", Malformed},
		{"no target", "GET HTTP/1.1\r\nHost: other.test\r\n\r\n", "", Malformed},
		{"absolute form, two spaces", "GET  http://other.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"absolute form, upper-case scheme", "GET HTTP://other.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", "", Malformed},
		{"http/1.0, two spaces", "GET  / HTTP/1.0\r\nHost: other.test\r\n\r\n", "", Malformed},
		{"http/2.0 version", "GET / HTTP/2.0\r\n", "", Malformed},
		{"http/1 version", "GET / HTTP/1\r\n", "", Malformed},
		{"bare lf after two spaces", "GET  / HTTP/1.1\nHost: other.test\n\n", "", Malformed},
		{"smtp-like", "EHLO mail.test\r\n", "", NotThis},
		{"redis inline", "SET key value\r\n", "", NotThis},
		{"text, then binary", "HELLO x\x00HTTP/1.1", "", NotThis},
		{"text without an end", "HELLO x", "", NeedMore},
		{"binary", "\x00\x01GET  / HTTP/1.1\r\n", "", NotThis},
		{"h2 preface begun", "PRI * HTTP/2.0\r\n", "", NeedMore},
		{"h2 preface, then other bytes", "PRI * HTTP/2.0\r\nHost: other.test\r\n\r\n", "", Malformed},
	} {
		host, res := HTTPHost([]byte(tt.in))
		if host != tt.want || res != tt.res {
			t.Errorf("%s: HTTPHost(%q) = %q, %v; want %q, %v", tt.name, tt.in, host, res, tt.want, tt.res)
		}
		goHost, parsed := goRequestHost([]byte(tt.in))
		switch {
		case res == Found && parsed && !strings.EqualFold(goHost, host):
			t.Errorf("%s: net/http reads host %q, HTTPHost %q", tt.name, goHost, host)
		case res == Malformed && parsed:
			t.Logf("%s: Malformed here, net/http reads host %q", tt.name, goHost)
		case res == NotThis && parsed && !strings.HasPrefix(tt.in, h2Preface):
			t.Errorf("%s: NotThis here, net/http reads a request for %q", tt.name, goHost)
		}
	}
}

func TestHTTPHostSplitEveryOffset(t *testing.T) {
	req := "GET /index.html HTTP/1.1\r\nUser-Agent: curl/8\r\nHost: split.example.com:8080\r\nAccept: */*\r\n\r\n"
	for i := 0; i < len(req); i++ {
		if host, res := HTTPHost([]byte(req[:i])); res != NeedMore {
			t.Fatalf("HTTPHost(first %d of %d bytes) = %q, %v; want NeedMore", i, len(req), host, res)
		}
	}
	for _, more := range []string{"", "body bytes", "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"} {
		if host, res := HTTPHost([]byte(req + more)); host != "split.example.com" || res != Found {
			t.Fatalf("HTTPHost(req+%q) = %q, %v", more, host, res)
		}
	}
}

func TestHTTPHostLimit(t *testing.T) {
	head := "GET / HTTP/1.1\r\nHost: a.test\r\n"
	pad := "X-Pad: " + strings.Repeat("p", MaxHTTPHeader-len(head)-len("X-Pad: ")-4) + "\r\n"
	ok := head + pad + "\r\n" // exactly MaxHTTPHeader bytes
	if len(ok) != MaxHTTPHeader {
		t.Fatalf("test request is %d bytes", len(ok))
	}
	if host, res := HTTPHost([]byte(ok)); host != "a.test" || res != Found {
		t.Errorf("request of MaxHTTPHeader bytes: %q, %v", host, res)
	}
	over := head + "X-Pad: p" + pad[7:] + "\r\n"
	if _, res := HTTPHost([]byte(over)); res != Malformed {
		t.Errorf("request of MaxHTTPHeader+1 bytes: %v, want Malformed", res)
	}
	if _, res := HTTPHost([]byte(over[:MaxHTTPHeader])); res != Malformed {
		t.Errorf("first MaxHTTPHeader bytes of it: %v, want Malformed", res)
	}
	if _, res := HTTPHost([]byte(over[:MaxHTTPHeader-1])); res != NeedMore {
		t.Errorf("first MaxHTTPHeader-1 bytes of it: %v, want NeedMore", res)
	}
	longLine := "GET /" + strings.Repeat("a", MaxHTTPHeader)
	if _, res := HTTPHost([]byte(longLine)); res != Malformed {
		t.Errorf("request line over the limit: %v, want Malformed", res)
	}
}

// What net/http's client writes is read back with the host it was sent to.
func TestHTTPHostGoClient(t *testing.T) {
	for _, tt := range []struct{ url, host, want string }{
		{"http://go.example.com/path?q=1", "", "go.example.com"},
		{"http://go.example.com:8080/", "", "go.example.com"},
		{"http://[2001:db8::5]:8080/", "", "2001:db8::5"},
		{"http://192.0.2.1/", "virtual.example.com", "virtual.example.com"},
	} {
		req, err := http.NewRequest("POST", tt.url, strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host
		req.Header.Set("X-Test", "1")
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		if err := req.Write(w); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		if host, res := HTTPHost(buf.Bytes()); host != tt.want || res != Found {
			t.Errorf("%s: HTTPHost = %q, %v; want %q\n%s", tt.url, host, res, tt.want, buf.Bytes())
		}
	}
}

// goRequestHost is the host net/http's server would use for the request at
// the start of b (the port and IPv6 brackets stripped), if it reads one.
func goRequestHost(b []byte) (string, bool) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return "", false
	}
	h := req.Host
	if req.URL != nil && req.URL.Host != "" {
		h = req.URL.Host
	}
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[1:i], true
		}
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	return h, true
}
