// Package exact carries strings through JSON byte for byte.
//
// encoding/json replaces every byte that is not valid UTF-8 with U+FFFD,
// but a Linux argument, environment value or path is any bytes but NUL
// (bubblewrap passes them untouched). A [String] that is valid UTF-8 is
// written as an ordinary JSON string, so a plan stays readable; any other
// is written as {"base64": "..."} holding its exact bytes. Both forms are
// read back.
package exact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// String is a string whose bytes survive a JSON round trip.
type String string

// MarshalJSON writes s as a JSON string when it is valid UTF-8, else as
// {"base64": "..."}.
func (s String) MarshalJSON() ([]byte, error) {
	if plain(string(s)) {
		b := make([]byte, 0, len(s)+2)
		return append(append(append(b, '"'), s...), '"'), nil
	}
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	return json.Marshal(struct {
		Base64 string `json:"base64"`
	}{base64.StdEncoding.EncodeToString([]byte(s))})
}

// UnmarshalJSON reads either form MarshalJSON writes.
func (s *String) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && plain(string(b[1:len(b)-1])) {
		*s = String(b[1 : len(b)-1])
		return nil
	}
	if len(b) > 0 && b[0] == '{' {
		var o struct {
			Base64 *string `json:"base64"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		if o.Base64 == nil {
			return fmt.Errorf("a non-UTF-8 string is written {\"base64\": \"...\"}")
		}
		raw, err := base64.StdEncoding.DecodeString(*o.Base64)
		if err != nil {
			return fmt.Errorf("base64 string: %w", err)
		}
		*s = String(raw)
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = String(v)
	return nil
}

// plain reports whether s is printable ASCII that encoding/json writes
// as it is between quotes: no '"' or '\\' (escaped), no control byte, and
// none of '<', '>', '&' (which it escapes for HTML). Such a string is
// encoded and decoded here without encoding/json, whose encoder and
// decoder state a call would allocate: paths and environment entries are
// nearly all plain, a sandbox's start carries a few hundred of them, and
// each allocation in a short-lived stage is fresh memory (issue 33).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// Strings converts a slice for encoding (nil stays nil).
func Strings(ss []string) []String {
	if ss == nil {
		return nil
	}
	out := make([]String, len(ss))
	for i, s := range ss {
		out[i] = String(s)
	}
	return out
}

// Plain converts back (nil stays nil).
func Plain(ss []String) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
