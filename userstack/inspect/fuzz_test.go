package inspect

import (
	"testing"
)

// FuzzChunking feeds the same first bytes cut into random segments to a
// Peek, and after a timeout to a Watch, and checks each decides as one
// look at all the bytes does: the same verdict and rule, never earlier
// than a prefix decides, and undecided only when the whole is.
func FuzzChunking(f *testing.F) {
	hello := goClientHello(f, name)
	for _, s := range [][]byte{
		hello, records(hello, 3), goClientHello(f, "other.test"),
		[]byte("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n"),
		[]byte("GET  / HTTP/1.1\r\nHost: api.test\r\n\r\n"),
		[]byte("POST /x HTTP/1.1\r\nHost: other.test\r\n\r\n"),
		[]byte(H2Preface), []byte("SSH-2.0-x\r\n"), []byte("PING"),
	} {
		f.Add(s, []byte{1, 7, 3, 200}, false)
		f.Add(s, []byte{0}, true)
	}
	f.Fuzz(func(t *testing.T, b, cuts []byte, fin bool) {
		// One look at every prefix is quadratic: the bound (Max) is the
		// table tests'.
		b = b[:min(len(b), 4096)]
		// The first prefix a single look decides at.
		want, at := Decision{}, len(b)
		for i := 0; i <= len(b); i++ {
			if d := Check(b[:i], name, fin && i == len(b)); d.Verdict != NeedMore {
				want, at = d, i
				break
			}
		}
		if whole := Check(b, name, fin); whole.Verdict != NeedMore && whole != want {
			// A parser's answer for a prefix is its answer for the
			// whole stream (package sniff): a decision stands.
			t.Fatalf("prefix of %d decided %+v, the whole %+v", at, want, whole)
		}
		var offs []int
		o := 0
		for _, c := range cuts {
			o += int(c)
			if o >= len(b) {
				break
			}
			offs = append(offs, o)
		}
		got, n := feed(b, offs, fin)
		if got != want {
			t.Fatalf("cut at %v: %+v, one look: %+v", offs, got, want)
		}
		if got.Verdict != NeedMore && n < at {
			t.Fatalf("cut at %v: decided at %d, before the %d bytes one look needs", offs, n, at)
		}
		if fin {
			return // a watch never sees the end of the stream
		}
		wd, _ := watch(nil, b, offs)
		if wd != want {
			t.Fatalf("watched, cut at %v: %+v, one look: %+v", offs, wd, want)
		}
	})
}
