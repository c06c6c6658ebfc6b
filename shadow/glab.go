package shadow

import (
	"strconv"
	"strings"
)

// glabCommandKeys are glab's config keys that name a program glab runs,
// at the top level and under each host (hosts.<host>.<key>).
var glabCommandKeys = []string{"editor", "visual", "browser", "glab_pager", "pager"}

// glabKeys digests the keys of glab's config.yml that name a command,
// each by its path (editor, hosts.gitlab.com.glab_pager). The file is
// parsed as YAML, with a strict parser for the subset glab writes: block
// mappings by indentation, plain, single- and double-quoted keys and
// scalars, block scalars, comments. Anything else (flow collections,
// anchors and aliases, tags, sequences, several documents, tabs in the
// indentation, an escape strconv does not know) makes the whole file one
// digest under "(not checkable YAML)": reported at any change, never
// silently passed. A dependency on a full YAML library would be larger
// than the few shapes glab writes need.
func glabKeys(b []byte) map[string]string {
	kv, ok := parseYAMLSubset(string(b))
	if !ok {
		return map[string]string{"(not checkable YAML)": digest(b)}
	}
	out := map[string]string{}
	for _, e := range kv {
		last := e.path[len(e.path)-1]
		top := len(e.path) == 1
		host := len(e.path) == 3 && e.path[0] == "hosts"
		if !top && !host {
			continue
		}
		for _, k := range glabCommandKeys {
			if last == k {
				key := strings.Join(e.path, ".")
				// Duplicate keys: every value counts.
				out[key] = digest([]byte(out[key] + "\x00" + e.value))
			}
		}
	}
	return out
}

type yamlEntry struct {
	path  []string
	value string
}

// parseYAMLSubset returns every scalar of a block-mapping YAML document
// with its key path; ok is false for anything outside the subset.
func parseYAMLSubset(s string) (entries []yamlEntry, ok bool) {
	type level struct {
		indent int
		key    string
	}
	var stack []level
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		raw := strings.TrimRight(lines[i], " \r")
		body := strings.TrimLeft(raw, " ")
		indent := len(raw) - len(body)
		if body == "" || body[0] == '#' {
			continue
		}
		if i == 0 && body == "---" {
			continue
		}
		switch body[0] {
		case '\t', '-', '[', '{', '&', '*', '!', '?', '%', '@', '`', '|', '>':
			return nil, false
		}
		key, rest, ok := yamlKey(body)
		if !ok {
			return nil, false
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 32 {
			return nil, false
		}
		path := make([]string, 0, len(stack)+1)
		for _, l := range stack {
			path = append(path, l.key)
		}
		path = append(path, key)
		rest = stripComment(strings.TrimSpace(rest))
		if rest == "" {
			// A nested mapping follows, or an empty value.
			stack = append(stack, level{indent, key})
			entries = append(entries, yamlEntry{path, ""})
			continue
		}
		if rest[0] == '|' || rest[0] == '>' {
			// A block scalar: the more-indented lines below.
			var val []string
			for i+1 < len(lines) {
				n := lines[i+1]
				if t := strings.TrimLeft(n, " "); t != "" && len(n)-len(t) <= indent {
					break
				}
				val = append(val, n)
				i++
			}
			entries = append(entries, yamlEntry{path, rest + "\n" + strings.Join(val, "\n")})
			continue
		}
		v, ok := yamlScalar(rest)
		if !ok {
			return nil, false
		}
		entries = append(entries, yamlEntry{path, v})
	}
	return entries, true
}

// yamlKey splits "key: rest" with a plain, single- or double-quoted key.
func yamlKey(body string) (key, rest string, ok bool) {
	switch body[0] {
	case '"', '\'':
		end := closingQuote(body)
		if end < 0 {
			return "", "", false
		}
		k, ok := yamlScalar(body[:end+1])
		after := strings.TrimLeft(body[end+1:], " ")
		if !ok || !strings.HasPrefix(after, ":") {
			return "", "", false
		}
		return k, after[1:], true
	}
	for i := 0; i < len(body); i++ {
		if body[i] == ':' && (i+1 == len(body) || body[i+1] == ' ') {
			k := strings.TrimRight(body[:i], " ")
			if k == "" || strings.ContainsAny(k, "#{}[],&*!|>%@`\"'") {
				return "", "", false
			}
			return k, body[i+1:], true
		}
	}
	return "", "", false
}

// closingQuote is the index of the quote that closes s's opening one.
func closingQuote(s string) int {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q && q == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case s[i] == q:
			return i
		}
	}
	return -1
}

// yamlScalar decodes a one-line scalar.
func yamlScalar(s string) (string, bool) {
	switch s[0] {
	case '"':
		if closingQuote(s) != len(s)-1 {
			return "", false
		}
		v, err := strconv.Unquote(s)
		return v, err == nil
	case '\'':
		if closingQuote(s) != len(s)-1 {
			return "", false
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), true
	case '[', '{', '&', '*', '!', '|', '>', '%', '@', '`':
		return "", false
	}
	return s, true
}

// stripComment drops a " #" comment after a value (outside quotes).
func stripComment(s string) string {
	if s == "" || s[0] == '"' || s[0] == '\'' {
		if s != "" {
			if end := closingQuote(s); end > 0 {
				return strings.TrimSpace(s[:end+1] + stripComment(strings.TrimSpace(s[end+1:])))
			}
		}
		return s
	}
	if s[0] == '#' {
		return ""
	}
	if i := strings.Index(s, " #"); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}
