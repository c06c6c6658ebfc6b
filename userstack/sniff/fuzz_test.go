package sniff

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// bytesConn is a net.Conn that reads b and discards what is written.
type bytesConn struct {
	net.Conn // nil: the methods not overridden are not used by the handshake
	r        *bytes.Reader
}

func (c bytesConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c bytesConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c bytesConn) Close() error                     { return nil }
func (c bytesConn) SetDeadline(time.Time) error      { return nil }
func (c bytesConn) SetReadDeadline(time.Time) error  { return nil }
func (c bytesConn) SetWriteDeadline(time.Time) error { return nil }

// goServerName runs crypto/tls's server on b and returns the ServerName it
// parsed from the ClientHello, if it got that far.
func goServerName(b []byte) (name string, parsed bool) {
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, parsed = h.ServerName, true
		return nil, errors.New("stop")
	}}
	tls.Server(bytesConn{r: bytes.NewReader(b)}, cfg).Handshake()
	return name, parsed
}

func clientHelloSeeds(f *testing.F) [][]byte {
	seeds := [][]byte{
		defaultHello(sniExt("example.com")).record(),
		records(defaultHello(ext{16, vec16(append([]byte{2}, "h2"...))}, sniExt("frag.example.com")).body(), 30),
		defaultHello().record(),
		defaultHello(sniExt("a.test", "b.test")).record(),
		defaultHello(ext{0xfe0d, []byte{0, 0, 1, 0, 1, 1}}, sniExt("public.test")).record(),
		hello{version: 0x0301, suites: []uint16{0x2f}, comp: []byte{0}, noExts: true}.record(),
		{0x16, 3, 1, 0, 4, 1, 0, 0, 0},
		[]byte("GET / HTTP/1.1\r\n"),
		goClientHello(f, &tls.Config{ServerName: "pq.example.com", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}}),
	}
	return seeds
}

// FuzzClientHello: no panics; the input is not written; a decision is final
// (more bytes never change it, and a prefix gives NeedMore or the same); a
// name is part of the input; and crypto/tls's server, when it parses the
// same hello, sees the same name.
func FuzzClientHello(f *testing.F) {
	for _, s := range clientHelloSeeds(f) {
		f.Add(s, []byte{0x17, 3, 3, 0, 1, 0}, uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, b, extra []byte, cut uint16) {
		orig := bytes.Clone(b)
		name, res := ClientHello(b)
		if !bytes.Equal(b, orig) {
			t.Fatal("input changed")
		}
		if res != Found && name != "" {
			t.Fatalf("%v with name %q", res, name)
		}
		if name != "" && !bytes.Contains(b, []byte(name)) {
			t.Fatalf("name %q is not in the input", name)
		}
		if res != NeedMore {
			n2, r2 := ClientHello(append(bytes.Clone(b), extra...))
			if n2 != name || r2 != res {
				t.Fatalf("appending %d bytes changed %q, %v to %q, %v", len(extra), name, res, n2, r2)
			}
		}
		if k := int(cut); k <= len(b) {
			n2, r2 := ClientHello(b[:k])
			if r2 != NeedMore && (r2 != res || n2 != name) {
				t.Fatalf("prefix of %d bytes gives %q, %v; the whole %q, %v", k, n2, r2, name, res)
			}
		}
		if res == Found && len(b) < 1<<14 {
			goName, parsed := goServerName(b)
			if parsed && goName != name {
				t.Fatalf("crypto/tls sees server name %q, ClientHello %q", goName, name)
			}
		}
	})
}

func httpSeeds() []string {
	return []string{
		"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"POST /x HTTP/1.0\r\nHost: [::1]:80\r\nContent-Length: 1\r\n\r\nx",
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nX: y\nHost: b\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"\x16\x03\x01\x00\x05",
		// Other spellings of a request line, each Malformed.
		"GET  / HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET\t/\tHTTP/1.1\r\nHost: other.test\r\n\r\n",
		"get  / http/1.1\r\nHost: other.test\r\n\r\n",
		" GET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET  http://other.test/ HTTP/1.0\r\nHost: a.test\r\n\r\n",
		"GET /\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: other.test\r\n\r\n",
		"SSH-2.0-OpenSSH_9.6 Ubuntu-3\r\n",
	}
}

// FuzzHTTPHost: no panics; a decision is final; a Found host is a part of
// the input without white space; and when net/http's server reads a
// request HTTPHost found, it sees the same host.
func FuzzHTTPHost(f *testing.F) {
	for _, s := range httpSeeds() {
		f.Add([]byte(s), []byte("GET / HTTP/1.1\r\nHost: evil\r\n\r\n"), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, b, extra []byte, cut uint16) {
		orig := bytes.Clone(b)
		host, res := HTTPHost(b)
		if !bytes.Equal(b, orig) {
			t.Fatal("input changed")
		}
		if res != Found && host != "" {
			t.Fatalf("%v with host %q", res, host)
		}
		if res == Found && (host == "" || !bytes.Contains(b, []byte(host)) || strings.ContainsAny(host, " \t\r\n,@/")) {
			t.Fatalf("bad host %q", host)
		}
		if res != NeedMore {
			h2, r2 := HTTPHost(append(bytes.Clone(b), extra...))
			if h2 != host || r2 != res {
				t.Fatalf("appending %q changed %q, %v to %q, %v", extra, host, res, h2, r2)
			}
		}
		if k := int(cut); k <= len(b) {
			h2, r2 := HTTPHost(b[:k])
			if r2 != NeedMore && (r2 != res || h2 != host) {
				t.Fatalf("prefix of %d bytes gives %q, %v; the whole %q, %v", k, h2, r2, host, res)
			}
		}
		if res == Found {
			if goHost, ok := goRequestHost(b); ok && !strings.EqualFold(goHost, host) {
				t.Fatalf("net/http reads host %q, HTTPHost %q", goHost, host)
			}
		}
		if res == NotThis && !bytes.HasPrefix(bytes.TrimLeft(b, "\r\n"), []byte(h2Preface)) {
			if goHost, ok := goRequestHost(b); ok {
				t.Fatalf("net/http reads a request for %q, HTTPHost says not HTTP", goHost)
			}
		}
	})
}
