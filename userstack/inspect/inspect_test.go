package inspect

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/userstack/sniff"
)

// goClientHello captures what crypto/tls's client writes first for name.
func goClientHello(t testing.TB, name string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		done <- tls.Client(c, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
	}()
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		n, err := s.Read(tmp)
		if err != nil {
			t.Fatal(err)
		}
		buf = append(buf, tmp[:n]...)
		if _, res := sniff.ClientHello(buf); res != sniff.NeedMore {
			break
		}
	}
	s.Close()
	<-done
	return buf
}

// records re-cuts a ClientHello record's message into records of size.
func records(hello []byte, size int) []byte {
	msg := hello[5:]
	var b []byte
	for len(msg) > 0 {
		k := min(size, len(msg))
		b = append(b, 0x16, 0x03, 0x01, byte(k>>8), byte(k))
		b = append(b, msg[:k]...)
		msg = msg[k:]
	}
	return b
}

const name = "api.test"

// feed drives a Peek with b cut at the offsets cuts (ascending), each
// piece added to what is held, as the stack does; fin after the last.
// It returns the decision and the bytes held when it was made.
func feed(b []byte, cuts []int, fin bool) (Decision, int) {
	p := NewPeek(name, time.Minute)
	prev := 0
	for _, c := range append(cuts, len(b)) {
		if c < prev || c > len(b) {
			continue
		}
		prev = c
		last := c == len(b)
		if d := p.Data(b[:c], fin && last); d.Verdict != NeedMore {
			return d, c
		}
	}
	return Decision{}, len(b)
}

func TestCheck(t *testing.T) {
	hello := goClientHello(t, name)
	other := goClientHello(t, "other.test")
	kelvin := goClientHello(t, "\u212aapi.test") // lower-cased by strings.ToLower: kapi.test
	tests := []struct {
		name string
		b    []byte
		fin  bool
		want Decision
	}{
		{"clienthello for the name", hello, false, Decision{Verdict: Allow}},
		{"clienthello for another name", other, false, refuse("sni mismatch: other.test")},
		{"clienthello, half", hello[:len(hello)/2], false, Decision{}},
		{"clienthello, half, fin", hello[:len(hello)/2], true, refuse("incomplete TLS first message before the end of the stream")},
		{"clienthello in records of 7", records(hello, 7), false, Decision{Verdict: Allow}},
		{"http host", []byte("GET / HTTP/1.1\r\nHost: API.test.\r\n\r\n"), false, Decision{Verdict: Allow}},
		{"http other host", []byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"), false, refuse("http host mismatch: other.test")},
		{"http two spaces", []byte("GET  / HTTP/1.1\r\nHost: api.test\r\n\r\n"), false, refuse("malformed HTTP first message")},
		{"http two spaces, method only", []byte("GET  "), false, refuse("malformed HTTP first message")},
		{"http request line only", []byte("GET / HTTP/1.1\r\n"), false, Decision{}},
		{"http no host", []byte("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"), false, refuse("malformed HTTP first message")},
		{"ssh banner", []byte("SSH-2.0-OpenSSH_9.6\r\n"), false, Decision{Verdict: Allow}},
		{"binary", []byte{0x00, 0x01, 0x02, 0xff}, false, Decision{Verdict: Allow}},
		{"PING", []byte("PING"), false, Decision{}},
		{"PING, fin", []byte("PING"), true, refuse("incomplete HTTP first message before the end of the stream")},
		{"PING line", []byte("PING\r\n"), false, Decision{Verdict: Allow}},
		{"h2 preface", []byte(H2Preface), false, refuse("cleartext HTTP/2 (its :authority is not checked: use TLS, or --allow-ip for the address)")},
		{"h2 preface, begun", []byte(H2Preface[:20]), false, Decision{}},
		{"h2 preface, begun, fin", []byte(H2Preface[:20]), true, refuse("incomplete HTTP first message before the end of the stream")},
		{"http header past its limit", append([]byte("GET / HTTP/1.1\r\nX: "), bytes.Repeat([]byte("a"), Max)...)[:Max], false, refuse("malformed HTTP first message")},
		{"clienthello in one-byte records past the limit", oneByteRecords(Max), false, refuse("malformed TLS first message")},
		{"tls record not a handshake", []byte{0x17, 0x03, 0x03, 0x00, 0x01, 0x00}, false, Decision{Verdict: Allow}},
	}
	for _, tt := range tests {
		if got := Check(tt.b, name, tt.fin); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	// The Kelvin sign lower-cases to k: the SNI is another name to a
	// server than the flow's kapi.test.
	if got, want := Check(kelvin, "kapi.test", false), refuse(`sni mismatch: "\u212aapi.test"`); got != want {
		t.Errorf("kelvin sign: %+v, want %+v", got, want)
	}
}

// A ClientHello or a request split across segments anywhere is decided
// at the segment that completes it, never before, and as in one piece.
func TestPeekSplitEverywhere(t *testing.T) {
	hello := goClientHello(t, name)
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"clienthello", hello},
		{"clienthello, records of 1", records(hello, 1)},
		{"clienthello, records of 100", records(hello, 100)},
		{"clienthello for another name", goClientHello(t, "other.test")},
		{"http", []byte("GET /x HTTP/1.1\r\nHost: api.test\r\nAccept: */*\r\n\r\n")},
		{"http other", []byte("GET /x HTTP/1.1\r\nHost: other.test\r\n\r\n")},
		{"http two spaces", []byte("GET  /x HTTP/1.1\r\nHost: api.test\r\n\r\n")},
	} {
		want := Check(tt.b, name, false)
		if want.Verdict == NeedMore {
			t.Fatalf("%s: undecided whole", tt.name)
		}
		// The first prefix one look decides at.
		at := 0
		for at = 1; Check(tt.b[:at], name, false).Verdict == NeedMore; at++ {
		}
		for cut := 1; cut < len(tt.b); cut++ {
			d, n := feed(tt.b, []int{cut}, false)
			if d != want || n != max(at, cut) && n != len(tt.b) {
				t.Fatalf("%s cut at %d: %+v at %d, want %+v at %d", tt.name, cut, d, n, want, max(at, cut))
			}
		}
		// A byte a segment.
		var cuts []int
		for i := 1; i < len(tt.b); i++ {
			cuts = append(cuts, i)
		}
		if d, n := feed(tt.b, cuts, false); d != want || n != at {
			t.Fatalf("%s a byte a segment: %+v at %d, want %+v at %d", tt.name, d, n, want, at)
		}
	}
}

// The recheck bound skips looks, never decisions: a ClientHello fed in
// records of one byte, a byte at a time, looks a number of times
// logarithmic in its length, and is decided at its last byte.
func TestPeekRecheckSkipsLooks(t *testing.T) {
	b := records(goClientHello(t, name), 1)
	p := NewPeek(name, time.Minute)
	looks := 0
	for i := 1; i <= len(b); i++ {
		if !p.Early(i, false) {
			looks++
		} else if d := p.Data(b[:i], false); d.Verdict != NeedMore {
			t.Fatalf("Early at %d, but a look decides %+v", i, d)
		}
		if d := p.Data(b[:i], false); d.Verdict != NeedMore {
			if i != len(b) || d.Verdict != Allow {
				t.Fatalf("decided %+v at %d of %d", d, i, len(b))
			}
			break
		}
	}
	t.Logf("%d bytes, %d looks", len(b), looks)
	if looks > 64 {
		t.Fatalf("%d looks for %d bytes", looks, len(b))
	}
}

// The timer's decisions, with the time waited as an input.
func TestPeekTimeout(t *testing.T) {
	hello := goClientHello(t, name)
	const waitMax = 10 * time.Second
	tests := []struct {
		name   string
		held   []byte
		waited time.Duration
		want   Decision
		watch  bool
	}{
		{"silent client", nil, time.Second, Decision{Verdict: Allow}, true},
		{"PING", []byte("PING"), time.Second, Decision{Verdict: Allow}, true},
		{"request line begun", []byte("GET / HT"), time.Second, Decision{Verdict: Allow}, true},
		{"clienthello begun", hello[:100], time.Second, Decision{}, false},
		{"clienthello begun, at the bound", hello[:100], waitMax, refuse("incomplete TLS ClientHello"), false},
		{"clienthello header only", hello[:3], waitMax - 1, Decision{}, false},
	}
	for _, tt := range tests {
		p := NewPeek(name, waitMax)
		d, watch := p.Timeout(tt.held, tt.waited)
		if d != tt.want || watch != tt.watch {
			t.Errorf("%s: %+v watch %v, want %+v watch %v", tt.name, d, watch, tt.want, tt.watch)
		}
		if p.Done() != (d.Verdict != NeedMore) {
			t.Errorf("%s: done %v after %+v", tt.name, p.Done(), d)
		}
		// A decision stands.
		if d.Verdict != NeedMore {
			if d2 := p.Data(append(tt.held, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"...), true); d2 != d {
				t.Errorf("%s: decided %+v, then %+v", tt.name, d, d2)
			}
		}
	}
	// A FIN with nothing sent: allowed, nothing to check.
	p := NewPeek(name, waitMax)
	if d := p.Data(nil, false); d.Verdict != NeedMore {
		t.Fatalf("no bytes, no fin: %+v", d)
	}
	if d := p.Data(nil, true); d.Verdict != Allow {
		t.Fatalf("no bytes, fin: %+v", d)
	}
}

// watch drives a Watch with the segments of b cut at cuts, each taken
// whole; it returns the decision and the bytes when it was made.
func watch(first, b []byte, cuts []int) (Decision, int) {
	w := NewWatch(name, append([]byte(nil), first...))
	prev := 0
	for _, c := range append(cuts, len(b)) {
		seg := b[prev:c]
		prev = c
		n := w.Room(len(seg))
		d := w.Segment(seg[:n])
		if d.Verdict == Refuse {
			return d, c
		}
		if _, done := w.Took(n); done {
			return d, c
		}
	}
	return Decision{}, len(b)
}

// After the timeout, the rest of the first message is checked segment by
// segment: a ClientHello or request for another name is refused at the
// segment that completes it, one for the name ends the watch.
func TestWatch(t *testing.T) {
	other := goClientHello(t, "other.test")
	hello := goClientHello(t, name)
	tests := []struct {
		name  string
		first string
		b     []byte
		want  Decision
	}{
		{"silent, then another name", "", other, refuse("sni mismatch: other.test")},
		{"silent, then the name", "", hello, Decision{Verdict: Allow}},
		{"PING, then a request for another host", "GET", []byte(" / HTTP/1.1\r\nHost: other.test\r\n\r\n"), refuse("http host mismatch: other.test")},
		{"PING, then its end", "PING", []byte("\r\n"), Decision{Verdict: Allow}},
		{"silent, then ssh", "", []byte("SSH-2.0-x\r\n"), Decision{Verdict: Allow}},
	}
	for _, tt := range tests {
		for _, cut := range []int{1, len(tt.b) / 2, len(tt.b) - 1} {
			d, _ := watch([]byte(tt.first), tt.b, []int{cut})
			if d != tt.want {
				t.Errorf("%s cut at %d: %+v, want %+v", tt.name, cut, d, tt.want)
			}
		}
	}
}

// Bytes the relay did not take are let go and looked at again when the
// client sends them again (maybe not the same): the watch decides on
// what was relayed.
func TestWatchTookLess(t *testing.T) {
	w := NewWatch(name, nil)
	good := []byte("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
	bad := []byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if d := w.Segment(good); d.Verdict != Allow {
		t.Fatalf("good request: %+v", d)
	}
	if dropped, done := w.Took(10); dropped != len(good)-10 || done {
		t.Fatalf("took 10: dropped %d done %v", dropped, done)
	}
	if w.Len() != 10 {
		t.Fatalf("%d held, want 10", w.Len())
	}
	if d := w.Segment(bad[10:]); d != refuse("http host mismatch: other.test") {
		t.Fatalf("the other request's rest: %+v", d)
	}
	// The start of a ClientHello not taken: the bound it set on the next
	// look goes with it, and a short request sent instead is looked at.
	w = NewWatch(name, nil)
	hello := goClientHello(t, name)
	if d := w.Segment(hello[:100]); d.Verdict != NeedMore {
		t.Fatalf("a ClientHello's start: %+v", d)
	}
	w.Took(0)
	if d := w.Segment(bad); d != refuse("http host mismatch: other.test") {
		t.Fatalf("a request instead of the ClientHello not taken: %+v", d)
	}
}

// oneByteRecords is a ClientHello's start, announced at 60,000 bytes (under
// MaxClientHello), in records of one byte: n bytes of it.
func oneByteRecords(n int) []byte {
	const length = 60000
	msg := append([]byte{0x01, 0x00, byte(length >> 8), byte(length & 0xff)}, make([]byte, length)...)
	var b []byte
	for _, c := range msg {
		b = append(b, 0x16, 0x03, 0x01, 0x00, 0x01, c)
		if len(b) >= n {
			break
		}
	}
	return b[:n]
}

// The watch holds at most Max bytes: a message never decided by then is
// refused (the sniffer calls a ClientHello past its bound malformed).
func TestWatchLimit(t *testing.T) {
	w := NewWatch(name, nil)
	stream := oneByteRecords(2 * Max)
	for off := 0; off < len(stream); off += 1000 {
		n := w.Room(1000)
		d := w.Segment(stream[off : off+n])
		if d.Verdict == Refuse {
			if d.Rule != "malformed TLS first message" || w.Len() != Max {
				t.Fatalf("%+v at %d bytes", d, w.Len())
			}
			return
		}
		w.Took(n)
	}
	t.Fatalf("never refused; %d bytes held", w.Len())
}

// ClientHelloLeast never passes the point where a ClientHello completes,
// however it is cut into records.
func TestClientHelloLeastIsALowerBound(t *testing.T) {
	hello := goClientHello(t, name)
	for _, size := range []int{1, 2, 3, 4, 5, 7, 100, 1 << 14} {
		b := records(hello, size)
		done := -1
		for k := 0; k <= len(b); k++ {
			if _, res := sniff.ClientHello(b[:k]); res == sniff.Found {
				done = k
				break
			}
		}
		for j := 0; j < done; j++ {
			if least := ClientHelloLeast(b[:j]); least > done {
				t.Fatalf("records of %d: at %d bytes, no look before %d; complete at %d", size, j, least, done)
			}
		}
	}
}
