package shadow

import (
	"bytes"
	"encoding/json"
	"errors"
)

// A scanner of JSON objects that allocates nothing for what it skips:
// ~/.claude.json is the session's to write, up to its read limit, and a
// file of a million keys or projects must not cost the launcher a map of
// them (encoding/json's Decoder buffers each value it skips, Unmarshal
// builds what it reads). Only the values the watch keeps are decoded,
// small ones at that (see canonical).

var errJSON = errors.New("malformed JSON")

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the end (past the closing quote) of the string at i.
func scanString(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, errJSON
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errJSON
}

// scanValue returns the end of the value at i (nesting bounded). It
// checks the structure only as far as finding the end needs: a value
// the watch keeps is decoded, or digested, after.
func scanValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errJSON
	}
	switch b[i] {
	case '"':
		return scanString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, err := scanString(b, i)
				if err != nil {
					return 0, err
				}
				i = end
				continue
			case '{', '[':
				if depth++; depth > 10000 {
					return 0, errJSON
				}
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errJSON
	}
	s := i
	for i < len(b) && !bytes.ContainsAny(b[i:i+1], ",:{}[]\" \t\r\n") {
		i++
	}
	if i == s {
		return 0, errJSON
	}
	return i, nil
}

// eachMember calls f with each member of the object b holds: its key
// (raw, with its quotes) and its value (raw).
func eachMember(b []byte, f func(key, val []byte) error) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errJSON
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return trailing(b, i+1)
	}
	for {
		ks := i
		ke, err := scanString(b, i)
		if err != nil {
			return err
		}
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return errJSON
		}
		vs := skipSpace(b, i+1)
		ve, err := scanValue(b, vs)
		if err != nil {
			return err
		}
		if err := f(b[ks:ke], b[vs:ve]); err != nil {
			return err
		}
		i = skipSpace(b, ve)
		if i >= len(b) {
			return errJSON
		}
		if b[i] == '}' {
			return trailing(b, i+1)
		}
		if b[i] != ',' {
			return errJSON
		}
		i = skipSpace(b, i+1)
	}
}

func trailing(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return errJSON
	}
	return nil
}

// keyIs compares a raw key with a name without allocating (a key spelt
// with escapes is decoded first).
func keyIs(raw []byte, names ...string) (string, bool) {
	k := raw[1 : len(raw)-1]
	if bytes.IndexByte(k, '\\') >= 0 {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		k = []byte(s)
	}
	for _, n := range names {
		if string(k) == n {
			return n, true
		}
	}
	return "", false
}

// keyString decodes a raw key.
func keyString(raw []byte) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw)
	}
	return s
}
