package shadow

import (
	"path"
	"strings"
)

// A core.hooksPath set at any level of git's configuration names the
// hooks git runs in every repository that level covers: the system's
// (/etc/gitconfig, or GIT_CONFIG_SYSTEM), the user's (~/.gitconfig and
// $XDG_CONFIG_HOME/git/config, or GIT_CONFIG_GLOBAL), the repository's
// config and config.worktree, and any file these include (include.path,
// includeIf.<condition>.path: every condition is taken as true, so a
// hooks directory is protected whenever it might be used). Where such a
// directory resolves inside the writable area it is read-only, like
// .git/hooks: a relative value is relative to each worktree's top, "~/"
// to the home.

// gitEntry is one key = value of a git config file.
type gitEntry struct {
	section, subsection, key, value string
}

// gitConfigEntries parses a git config file's text: sections with and
// without subsections (the legacy [a.b] form too), quoted values with
// escapes, comments, continuation lines. Keys and section names are
// lowercased, as git compares them.
func gitConfigEntries(cfg string) []gitEntry {
	var out []gitEntry
	section, sub := "", ""
	lines := strings.Split(cfg, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if continued(line) && i+1 < len(lines) {
			// Joined in one buffer: adding each line to a string would
			// copy all so far, quadratic in a session's 1 MiB of them.
			buf := []byte(line)
			for continued(string(buf[max(0, len(buf)-2):])) && i+1 < len(lines) {
				i++
				buf = append(buf[:len(buf)-1], lines[i]...)
			}
			line = string(buf)
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			h := strings.TrimSpace(line[1:end])
			if name, q, ok := strings.Cut(h, " "); ok {
				section, sub = strings.ToLower(name), strings.Trim(strings.TrimSpace(q), "\"")
			} else if name, rest, ok := strings.Cut(h, "."); ok {
				section, sub = strings.ToLower(name), strings.ToLower(rest)
			} else {
				section, sub = strings.ToLower(h), ""
			}
			line = strings.TrimSpace(line[end+1:])
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue // a boolean key: no path
		}
		out = append(out, gitEntry{section, sub, strings.ToLower(strings.TrimSpace(k)), gitValue(v)})
	}
	return out
}

// continued reports whether a config line goes on in the next one (it
// ends in a backslash that is not itself escaped).
func continued(s string) bool {
	return strings.HasSuffix(s, "\\") && !strings.HasSuffix(s, "\\\\")
}

// gitValue decodes a value: quotes removed, escapes applied, an
// unquoted comment dropped.
func gitValue(v string) string {
	var b strings.Builder
	quoted := false
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && i+1 < len(v):
			i++
			switch v[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
			default:
				b.WriteByte(v[i])
			}
		case (c == '#' || c == ';') && !quoted:
			return strings.TrimSpace(b.String())
		default:
			b.WriteByte(c)
		}
	}
	return strings.TrimRightFunc(b.String(), func(r rune) bool { return r == ' ' || r == '\t' })
}

// hooksPathsOf returns every core.hooksPath value of the config file
// name and of the files it includes (at most 10 deep, as git), each
// with the file it came from.
func hooksPathsOf(in Inputs, name string) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(file string, depth int)
	walk = func(file string, depth int) {
		if depth > 10 || seen[file] || in.ReadFile == nil || len(seen) > 64 {
			return
		}
		seen[file] = true
		b, err := in.ReadFile(file)
		if err != nil {
			return
		}
		for _, e := range gitConfigEntries(string(b)) {
			switch {
			case e.section == "core" && e.subsection == "" && e.key == "hookspath" && e.value != "":
				out = append(out, e.value)
			case (e.section == "include" && e.subsection == "" || e.section == "includeif") && e.key == "path" && e.value != "":
				p := e.value
				if strings.HasPrefix(p, "~/") {
					p = in.Home + p[1:]
				} else if !path.IsAbs(p) {
					p = path.Join(path.Dir(file), p)
				}
				walk(path.Clean(p), depth+1)
			}
		}
	}
	walk(name, 0)
	return out
}

// hostGitConfigs are the system and global config files the host's git
// reads, from the caller's environment as git does.
func hostGitConfigs(in Inputs) []string {
	var out []string
	if v, ok := lookup(in.Environ, "GIT_CONFIG_NOSYSTEM"); !ok || v == "" || v == "0" || strings.EqualFold(v, "false") {
		sys := "/etc/gitconfig"
		if v, ok := lookup(in.Environ, "GIT_CONFIG_SYSTEM"); ok {
			sys = v
		}
		out = append(out, sys)
	}
	if v, ok := lookup(in.Environ, "GIT_CONFIG_GLOBAL"); ok {
		return append(out, v)
	}
	xdg, _ := lookup(in.Environ, "XDG_CONFIG_HOME")
	if xdg == "" || !path.IsAbs(xdg) {
		xdg = in.Home + "/.config"
	}
	return append(out, xdg+"/git/config", in.Home+"/.gitconfig")
}

// hostHooksPaths are the hooksPath values of the system and global
// levels (and their includes).
func hostHooksPaths(in Inputs) []string {
	var out []string
	for _, f := range hostGitConfigs(in) {
		if f != "" && f != "/dev/null" && path.IsAbs(f) {
			out = append(out, hooksPathsOf(in, f)...)
		}
	}
	return out
}
