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
