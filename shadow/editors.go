package shadow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Workspace files an editor acts on by itself when it opens the folder.
// VS Code (and its forks) runs a task whose runOptions.runOn is
// "folderOpen" (once the folder is trusted, which a workspace Claude
// Code runs in usually is), and starts the programs its settings name:
// the terminal's shell and its environment, language servers,
// interpreters, linters and formatters (python.defaultInterpreterPath,
// *.path, *.executablePath, go.alternateTools...). A dev container's
// lifecycle commands run at its creation or start, initializeCommand on
// the host itself. JetBrains' run configurations in .idea/ run only when
// the user starts one, and are not watched.

// vscodeTasks digests each folder-open task of a tasks.json by its label
// (or position); an unparsable file is one digest.
func vscodeTasks(b []byte) map[string]string {
	var f struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if json.Unmarshal(jsonc(b), &f) != nil {
		return map[string]string{"(unparsable)": digest(b)}
	}
	out := map[string]string{}
	for i, raw := range f.Tasks {
		var t struct {
			Label      string `json:"label"`
			RunOptions struct {
				RunOn string `json:"runOn"`
			} `json:"runOptions"`
		}
		if json.Unmarshal(raw, &t) != nil || t.RunOptions.RunOn != "folderOpen" {
			continue
		}
		name := t.Label
		if name == "" {
			name = fmt.Sprint(i)
		}
		out["tasks["+name+"] (runs on folder open)"] = canonical(raw)
	}
	return out
}

// vscodeProgramKey reports whether a VS Code setting names a program to
// run, its arguments or its environment: every terminal.integrated.* and
// terminal.external.* key (shells, profiles, their environment), and any
// key whose last part ends in one of programSuffixes (git.path,
// python.defaultInterpreterPath, eslint.nodePath, go.alternateTools,
// go.toolsEnvVars, rust-analyzer.server.path, *.executablePath,
// *.serverArgs...). A suffix rule catches extensions' keys no list would
// know; a data key it also catches (python.analysis.extraPaths) costs a
// line in a report, not a missed program.
func vscodeProgramKey(k string) bool {
	l := strings.ToLower(k)
	if strings.HasPrefix(l, "terminal.integrated.") || strings.HasPrefix(l, "terminal.external.") {
		return true
	}
	last := l[strings.LastIndexByte(l, '.')+1:]
	for _, s := range programSuffixes {
		if strings.HasSuffix(last, s) {
			return true
		}
	}
	return false
}

var programSuffixes = []string{"path", "paths", "executable", "command", "commands", "args", "runtime", "envvars", "env", "shell", "alternatetools", "interpreter"}

// vscodeSettings digests the settings that name programs; a
// language-specific block ("[python]": {...}) is one value.
func vscodeSettings(b []byte) map[string]string {
	var m map[string]json.RawMessage
	if json.Unmarshal(jsonc(b), &m) != nil {
		return map[string]string{"(unparsable)": digest(b)}
	}
	out := map[string]string{}
	for k, v := range m {
		if vscodeProgramKey(k) || strings.HasPrefix(k, "[") {
			out[k] = canonical(v)
		}
	}
	return out
}

// jsonc turns JSON with comments and trailing commas (VS Code's and dev
// containers' format) into JSON; a malformed text stays malformed.
func jsonc(b []byte) []byte {
	out := make([]byte, 0, len(b))
	pendingComma := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '"':
			if pendingComma {
				out, pendingComma = append(out, ','), false
			}
			j := i + 1
			for ; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return append(out, b[i:]...)
			}
			out = append(out, b[i:j+1]...)
			i = j
		case c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/")) // no copy of the rest per comment
			if end < 0 {
				return append(out, b[i:]...)
			}
			i += end + 3
		case c == ',':
			if pendingComma {
				out = append(out, ',')
			}
			pendingComma = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			out = append(out, c)
		default:
			if pendingComma && c != '}' && c != ']' {
				out = append(out, ',')
			}
			pendingComma = false
			out = append(out, c)
		}
	}
	if pendingComma {
		out = append(out, ',')
	}
	return out
}
