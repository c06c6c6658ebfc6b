package sniff

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"net"
	"testing"
)

// hello builds ClientHello messages by hand.
type hello struct {
	version   uint16
	sessionID []byte
	suites    []uint16
	comp      []byte
	noExts    bool // omit the extensions block entirely
	exts      []ext
}

type ext struct {
	typ  uint16
	data []byte
}

func u16(v int) []byte { return []byte{byte(v >> 8), byte(v)} }

func vec16(b ...[]byte) []byte {
	body := bytes.Join(b, nil)
	return append(u16(len(body)), body...)
}

// sniExt is a server_name extension with one entry per name (type 0).
func sniExt(names ...string) ext {
	var list [][]byte
	for _, n := range names {
		list = append(list, append([]byte{0}, vec16([]byte(n))...))
	}
	return ext{0, vec16(list...)}
}

func defaultHello(exts ...ext) hello {
	return hello{version: 0x0303, sessionID: bytes.Repeat([]byte{7}, 32), suites: []uint16{0x1301, 0x1302, 0xc02f}, comp: []byte{0}, exts: exts}
}

// body is the handshake message, with its 4-byte header.
func (h hello) body() []byte {
	var b []byte
	b = append(b, u16(int(h.version))...)
	b = append(b, bytes.Repeat([]byte{0xab}, 32)...)
	b = append(b, byte(len(h.sessionID)))
	b = append(b, h.sessionID...)
	var s []byte
	for _, c := range h.suites {
		s = binary.BigEndian.AppendUint16(s, c)
	}
	b = append(b, vec16(s)...)
	b = append(b, byte(len(h.comp)))
	b = append(b, h.comp...)
	if !h.noExts {
		var e []byte
		for _, x := range h.exts {
			e = append(e, u16(int(x.typ))...)
			e = append(e, vec16(x.data)...)
		}
		b = append(b, vec16(e)...)
	}
	return append([]byte{1, byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
}

// records wraps a handshake message in TLS records of at most frag bytes.
func records(msg []byte, frag int) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(frag, len(msg))
		out = append(out, 0x16, 3, 1)
		out = append(out, u16(n)...)
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

func (h hello) record() []byte { return records(h.body(), 1<<14) }

// goClientHello captures what crypto/tls's client writes first.
func goClientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		done <- tls.Client(c, cfg).Handshake()
	}()
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		n, err := s.Read(tmp)
		if err != nil {
			t.Fatal(err)
		}
		buf = append(buf, tmp[:n]...)
		if _, res := ClientHello(buf); res != NeedMore {
			break
		}
	}
	s.Close()
	<-done
	return buf
}

func TestClientHelloHandBuilt(t *testing.T) {
	alpn := ext{16, vec16(append([]byte{2}, "h2"...))}
	grease := ext{0x0a0a, nil}
	ech := ext{0xfe0d, append([]byte{0, 0, 1, 0, 1, 0x42}, append(vec16(bytes.Repeat([]byte{9}, 32)), vec16(bytes.Repeat([]byte{5}, 200))...)...)}
	for _, tt := range []struct {
		name string
		b    []byte
		want string
		res  Result
	}{
		{"sni only", defaultHello(sniExt("example.com")).record(), "example.com", Found},
		{"several extensions", defaultHello(grease, alpn, sniExt("Example.COM."), ext{43, []byte{2, 3, 4}}, ext{0x1a1a, []byte{0}}).record(), "Example.COM.", Found},
		{"no sni", defaultHello(alpn).record(), "", Found},
		{"no extensions block", hello{version: 0x0301, suites: []uint16{0x2f}, comp: []byte{0}, noExts: true}.record(), "", Found},
		{"empty extensions block", defaultHello().record(), "", Found},
		{"ech outer name", defaultHello(grease, sniExt("public.example.net"), ech, alpn).record(), "public.example.net", Found},
		{"sni with another name type", defaultHello(ext{0, vec16([]byte{7, 0, 2, 'x', 'y'}, append([]byte{0}, vec16([]byte("a.test"))...))}).record(), "a.test", Found},
		{"sni with only another name type", defaultHello(ext{0, vec16([]byte{7, 0, 2, 'x', 'y'})}).record(), "", Found},
		{"two host_names", defaultHello(sniExt("a.test", "b.test")).record(), "", Malformed},
		{"two sni extensions", defaultHello(sniExt("a.test"), sniExt("b.test")).record(), "", Malformed},
		{"duplicate other extension", defaultHello(alpn, sniExt("a.test"), alpn).record(), "", Malformed},
		{"empty sni list", defaultHello(ext{0, vec16()}).record(), "", Malformed},
		{"empty sni extension", defaultHello(ext{0, nil}).record(), "", Malformed},
		{"empty host_name", defaultHello(sniExt("")).record(), "", Malformed},
		{"sni list longer than extension", defaultHello(ext{0, append(u16(20), append([]byte{0}, vec16([]byte("a.test"))...)...)}).record(), "", Malformed},
		{"sni list shorter than extension", defaultHello(ext{0, append(vec16(append([]byte{0}, vec16([]byte("a.test"))...)), 0)}).record(), "", Malformed},
		{"host_name longer than list", defaultHello(ext{0, vec16(append([]byte{0, 0, 50}, "a.test"...))}).record(), "", Malformed},
		{"session id too long", hello{version: 0x0303, sessionID: make([]byte, 33), suites: []uint16{1}, comp: []byte{0}}.record(), "", Malformed},
		{"no cipher suites", hello{version: 0x0303, comp: []byte{0}}.record(), "", Malformed},
		{"no compression", hello{version: 0x0303, suites: []uint16{1}}.record(), "", Malformed},
		{"bad legacy version", hello{version: 0x0203, suites: []uint16{1}, comp: []byte{0}}.record(), "", Malformed},
		{"empty record", []byte{0x16, 3, 1, 0, 0}, "", Malformed},
		{"record too long", []byte{0x16, 3, 1, 0x40, 0x01}, "", Malformed},
		{"not a client hello", records([]byte{2, 0, 0, 4, 3, 3, 0, 0}, 100), "", Malformed},
		{"hello over MaxClientHello", records([]byte{1, 1, 0, 0}, 100), "", Malformed},
		{"hello at MaxClientHello", records([]byte{1, 0, 0xff, 0xfc}, 100), "", NeedMore},
		{"http", []byte("GET / HTTP/1.1\r\n"), "", NotThis},
		{"ssh", []byte("SSH-2.0-OpenSSH_9.6\r\n"), "", NotThis},
		{"alert record", []byte{0x15, 3, 3, 0, 2, 2, 40}, "", NotThis},
		{"sslv2 hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, "", NotThis},
		{"handshake type, not tls version", []byte{0x16, 0x17, 0, 0, 0}, "", NotThis},
		{"empty", nil, "", NeedMore},
	} {
		name, res := ClientHello(tt.b)
		if name != tt.want || res != tt.res {
			t.Errorf("%s: ClientHello = %q, %v; want %q, %v", tt.name, name, res, tt.want, tt.res)
		}
		// crypto/tls's server agrees on the name when it parses the hello,
		// and refuses what this parser calls Malformed.
		goName, parsed := goServerName(tt.b)
		switch {
		case res == Found && parsed && goName != name:
			t.Errorf("%s: crypto/tls sees %q, ClientHello %q", tt.name, goName, name)
		case res == Malformed && parsed:
			t.Logf("%s: Malformed here, crypto/tls parses it (server name %q)", tt.name, goName)
		case res == Found && !parsed:
			t.Logf("%s: Found %q here, crypto/tls refuses it", tt.name, name)
		}
	}
}

// trailing data inside the lengths: each length that bounds a part gets
// one byte more than the part, and the byte is there.
func TestClientHelloTrailingGarbage(t *testing.T) {
	good := defaultHello(sniExt("a.test")).body()
	if _, res := ClientHello(records(good, 1<<14)); res != Found {
		t.Fatal("good hello not Found")
	}
	// Extension block with one stray byte, lengths adjusted to include it.
	h := defaultHello(sniExt("a.test"))
	b := h.body()
	b = append(b, 0x00)
	b[3]++ // handshake length covers the stray byte
	if _, res := ClientHello(records(b, 1<<14)); res != Malformed {
		t.Errorf("stray byte after the extensions: %v, want Malformed", res)
	}
	// The stray byte inside the extensions block, its length adjusted.
	noExt := h
	noExt.noExts = true
	eoff := len(noExt.body()) // where the extensions block's length is
	b = append(h.body(), 0x00)
	b[3]++
	binary.BigEndian.PutUint16(b[eoff:], binary.BigEndian.Uint16(b[eoff:])+1)
	if _, res := ClientHello(records(b, 1<<14)); res != Malformed {
		t.Errorf("stray byte inside the extensions block: %v, want Malformed", res)
	}
	// A second handshake message after the hello, in the same record.
	b = append(h.body(), 20, 0, 0, 0)
	if _, res := ClientHello(records(b, 1<<14)); res != Malformed {
		t.Errorf("data after the hello in its record: %v, want Malformed", res)
	}
	// Application data before the hello is complete.
	r := records(h.body(), 10)
	r = append(r[:15:15], append([]byte{0x17, 3, 3, 0, 1, 0}, r[15:]...)...)
	if _, res := ClientHello(r); res != Malformed {
		t.Errorf("application data inside the hello: %v, want Malformed", res)
	}
}

func TestClientHelloSplitEveryOffset(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"one record", defaultHello(sniExt("split.example.com")).record()},
		{"two records", records(defaultHello(sniExt("split.example.com")).body(), 40)},
		{"one byte records", records(defaultHello(sniExt("split.example.com")).body(), 1)},
	} {
		for i := 0; i < len(tt.b); i++ {
			if name, res := ClientHello(tt.b[:i]); res != NeedMore {
				t.Fatalf("%s: ClientHello(first %d of %d bytes) = %q, %v; want NeedMore", tt.name, i, len(tt.b), name, res)
			}
		}
		if name, res := ClientHello(tt.b); name != "split.example.com" || res != Found {
			t.Fatalf("%s: ClientHello = %q, %v", tt.name, name, res)
		}
		// More bytes after the hello (the client's next flight) change nothing.
		if name, res := ClientHello(append(tt.b, 0x17, 3, 3, 0, 5, 1, 2, 3, 4, 5)); name != "split.example.com" || res != Found {
			t.Fatalf("%s: with data after: ClientHello = %q, %v", tt.name, name, res)
		}
	}
}

func TestClientHelloFragmentedTwoRecords(t *testing.T) {
	msg := defaultHello(ext{16, vec16(append([]byte{8}, "http/1.1"...))}, sniExt("frag.example.org")).body()
	// Split inside the handshake header, and in the middle of the SNI.
	for _, cut := range []int{1, 2, 3, 4, 40, len(msg) - 5, len(msg) - 1} {
		b := append(records(msg[:cut], 1<<14), records(msg[cut:], 1<<14)...)
		if name, res := ClientHello(b); name != "frag.example.org" || res != Found {
			t.Errorf("cut at %d: ClientHello = %q, %v", cut, name, res)
		}
	}
}

func TestClientHelloGoClient(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  *tls.Config
		want string
		min  int // at least this many bytes
	}{
		{"tls13 x25519mlkem768", &tls.Config{ServerName: "pq.example.com", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768, tls.X25519}, NextProtos: []string{"h2", "http/1.1"}}, "pq.example.com", 1200},
		{"tls12 only", &tls.Config{ServerName: "old.example.com", MaxVersion: tls.VersionTLS12}, "old.example.com", 100},
		{"ip address server name: no sni", &tls.Config{ServerName: "192.0.2.1"}, "", 100},
	} {
		b := goClientHello(t, tt.cfg)
		if len(b) < tt.min {
			t.Errorf("%s: hello is %d bytes, want at least %d", tt.name, len(b), tt.min)
		}
		name, res := ClientHello(b)
		if name != tt.want || res != Found {
			t.Errorf("%s: ClientHello = %q, %v; want %q, Found", tt.name, name, res, tt.want)
		}
		for i := 0; i < len(b); i++ {
			if _, res := ClientHello(b[:i]); res != NeedMore {
				t.Fatalf("%s: prefix of %d bytes: %v, want NeedMore", tt.name, i, res)
			}
		}
		// The same hello fragmented over records of 100 bytes.
		if name, res := ClientHello(records(b[5:], 100)); name != tt.want || res != Found {
			t.Errorf("%s: refragmented: %q, %v", tt.name, name, res)
		}
	}
}

func TestClientHelloLimit(t *testing.T) {
	// A hello declaring more than MaxClientHello is refused from its header.
	big := []byte{0x16, 3, 1, 0, 4, 1, 0x01, 0x00, 0x00}
	if _, res := ClientHello(big); res != Malformed {
		t.Errorf("hello of 64 KiB: %v, want Malformed", res)
	}
	// One just under the limit, in records, passes; its records carry
	// headers, so the limit on the stream is what refuses it.
	pad := ext{21, make([]byte, MaxClientHello-200)}
	msg := defaultHello(sniExt("big.test"), pad).body()
	if len(msg) > MaxClientHello {
		t.Fatalf("test hello too big: %d", len(msg))
	}
	if name, res := ClientHello(records(msg, 1<<14)); name != "big.test" || res != Found {
		t.Errorf("hello of %d bytes in records: %q, %v", len(msg), name, res)
	}
	// The same in one-byte records would need 6 bytes of stream per byte.
	stream := records(msg, 1)
	if _, res := ClientHello(stream); res != Malformed {
		t.Errorf("hello in one-byte records over the limit: %v, want Malformed", res)
	}
	if _, res := ClientHello(stream[:MaxClientHello]); res != Malformed {
		t.Errorf("first MaxClientHello bytes of it: %v, want Malformed", res)
	}
	if _, res := ClientHello(stream[:MaxClientHello-1]); res != NeedMore {
		t.Errorf("first MaxClientHello-1 bytes of it: %v, want NeedMore", res)
	}
}

func TestClientHelloDoesNotWriteInput(t *testing.T) {
	b := records(defaultHello(sniExt("ro.test")).body(), 30)
	orig := bytes.Clone(b)
	ClientHello(b)
	if !bytes.Equal(b, orig) {
		t.Fatal("ClientHello changed its input")
	}
}

func TestResultString(t *testing.T) {
	for r, s := range map[Result]string{NeedMore: "need more", Found: "found", NotThis: "not this protocol", Malformed: "malformed", 9: "unknown"} {
		if r.String() != s {
			t.Errorf("%d.String() = %q", r, r.String())
		}
	}
}

func TestName(t *testing.T) {
	tlsHello := records(defaultHello(sniExt("tls.example.com")).body(), 50)
	httpReq := []byte("GET / HTTP/1.1\r\nHost: http.example.com\r\n\r\n")
	for _, tt := range []struct {
		name  string
		b     []byte
		want  string
		proto Proto
		res   Result
	}{
		{"tls", tlsHello, "tls.example.com", ProtoTLS, Found},
		{"tls partial", tlsHello[:60], "", ProtoNone, NeedMore},
		{"tls malformed", defaultHello(sniExt("a.test", "b.test")).record(), "", ProtoTLS, Malformed},
		{"http", httpReq, "http.example.com", ProtoHTTP, Found},
		{"http partial", httpReq[:20], "", ProtoNone, NeedMore},
		{"http malformed", []byte("GET / HTTP/1.1\r\n\r\n"), "", ProtoHTTP, Malformed},
		{"ssh", []byte("SSH-2.0-x\r\n"), "", ProtoNone, NotThis},
		{"tls-looking, not tls", []byte{0x16, 0x42}, "", ProtoNone, NotThis},
		{"binary", []byte{0, 1, 2}, "", ProtoNone, NotThis},
		{"empty", nil, "", ProtoNone, NeedMore},
	} {
		name, proto, res := Name(tt.b)
		if name != tt.want || proto != tt.proto || res != tt.res {
			t.Errorf("%s: Name = %q, %v, %v; want %q, %v, %v", tt.name, name, proto, res, tt.want, tt.proto, tt.res)
		}
	}
	for p, s := range map[Proto]string{ProtoNone: "none", ProtoTLS: "tls", ProtoHTTP: "http"} {
		if p.String() != s {
			t.Errorf("Proto(%d).String() = %q", p, p.String())
		}
	}
}
