package exact

import (
	"encoding/json"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "é ✓ <&>", "\xff", "a\x80b\xfe", "\xed\xa0\x80" /* a surrogate */, "ok\x00nul"} {
		b, err := json.Marshal(String(s))
		if err != nil {
			t.Fatal(err)
		}
		var got String
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, b, err)
		}
		if string(got) != s {
			t.Errorf("%q -> %s -> %q", s, b, got)
		}
	}
	if b, _ := json.Marshal(String("readable")); string(b) != `"readable"` {
		t.Errorf("valid UTF-8 encodes as %s, want a plain JSON string", b)
	}
	var s String
	for _, bad := range []string{`{}`, `{"base64": "!!"}`, `3`} {
		if json.Unmarshal([]byte(bad), &s) == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// The encoding/json-free path for plain strings writes and reads exactly
// what encoding/json does: every ASCII byte alone and beside a letter,
// and encoded forms with escapes, decode as json.Unmarshal decodes them
// into a string. Seen failing with '&' (or '\\') taken out of plain's
// exclusions: "&" encoded as "&" where encoding/json writes "\u0026".
func TestPlainAsEncodingJSON(t *testing.T) {
	var strs []string
	for c := 0; c < 0x80; c++ {
		strs = append(strs, string(rune(c)), "a"+string(rune(c))+"b")
	}
	strs = append(strs, "", "/usr/bin", "PATH=/usr/local/bin:/usr/bin", "é", "a\u2028b")
	for _, s := range strs {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := String(s).MarshalJSON()
		if err != nil || string(got) != string(want) {
			t.Errorf("%q: MarshalJSON %s (%v), encoding/json %s", s, got, err, want)
		}
	}
	for _, enc := range []string{`"plain"`, `""`, `"a\u0041"`, `"\/x"`, `"a\"b"`, `"tab\tx"`, `"\u00e9"`, ` "spaced" `} {
		var want string
		if err := json.Unmarshal([]byte(enc), &want); err != nil {
			t.Fatal(err)
		}
		var got String
		if err := got.UnmarshalJSON([]byte(enc)); err != nil || string(got) != want {
			t.Errorf("%s: UnmarshalJSON %q (%v), encoding/json %q", enc, got, err, want)
		}
	}
}
