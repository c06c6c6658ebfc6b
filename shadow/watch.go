package shadow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// Claude Code's state must stay writable inside (it writes ~/.claude.json
// on every start), yet some of its keys are commands that run whenever
// Claude Code starts, also outside the shadow (an IDE extension with its
// own binary). The shadow cannot make those keys read-only, so it watches
// them: it fingerprints each command-bearing key of the files below before
// the session and again after it, and reports every change on stderr and
// in LogFile. The same holds for glab's config.yml (tokens and commands in
// one file) and for a gitdir's commondir (which would redirect the
// protected config).

// Watch kinds.
const (
	WatchClaudeSettings = "claude-settings" // ~/.claude/settings*.json
	WatchClaudeJSON     = "claude-json"     // ~/.claude.json
	WatchGlab           = "glab"            // ~/.config/glab-cli/config.yml
	WatchTree           = "tree"            // a directory of commands, hooks or plugins
	WatchAbsent         = "absent"          // a file that must not appear
	WatchLink           = "link"            // a symlink whose target must not change
	WatchFile           = "file"            // a file whose every byte counts (.envrc)
	WatchVSCodeTasks    = "vscode-tasks"    // .vscode/tasks.json: tasks run on folder open
	WatchVSCodeSettings = "vscode-settings" // .vscode/settings.json: keys that name programs
	WatchDevcontainer   = "devcontainer"    // .devcontainer.json: its lifecycle commands
)

// Watched is one host path to compare before and after a session. It is
// read beneath Root (see internal/beneath): nothing a session leaves in
// the tree leads the read out of Root. Root == Path is a file whose own
// directory entry the session cannot replace (a bind-mount target).
type Watched struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	Root string `json:"root"`
}

// Read limits. Claude Code's ~/.claude.json held each project's prompt
// history until late 2025 and grew to tens of MB for some users (its
// issues #5024, #6394, #10192 report 15 to 101 MB); since the history
// moved to ~/.claude/history.jsonl it stays well below 1 MB. Above the
// limit the file is not parsed: the report says "too large to check" and
// how to trim it. A settings file, a hook script or a config file is
// a few KB.
const (
	ClaudeJSONLimit = 8 << 20
	SettingsLimit   = 1 << 20
)

// LogFile is where the changes are recorded, relative to the home: a
// directory the sandbox does not bind, so a session can neither read nor
// forge the record.
const LogFile = ".local/state/claude-sandbox/changes.log"

// settingsCommandKeys are the settings keys that run a program or choose
// what runs: hooks, status line, credential helpers, MCP servers and
// plugins, and env (NODE_OPTIONS and the like).
var settingsCommandKeys = []string{
	"hooks", "statusLine", "apiKeyHelper", "awsAuthRefresh", "awsCredentialExport", "otelHeadersHelper",
	"fileSuggestion", "env", "mcpServers", "enabledPlugins", "extraKnownMarketplaces",
	"enableAllProjectMcpServers", "enabledMcpjsonServers", "disableAllHooks", "forceLoginMethod",
}

// devcontainerKeys are a dev container definition's keys that run
// commands (initializeCommand on the host itself) or choose what runs.
var devcontainerKeys = []string{
	"initializeCommand", "onCreateCommand", "updateContentCommand", "postCreateCommand", "postStartCommand",
	"postAttachCommand", "build", "image", "dockerFile", "dockerfile", "dockerComposeFile", "runArgs", "mounts",
	"features", "containerEnv", "remoteEnv", "privileged", "capAdd", "securityOpt", "workspaceMount", "runServices",
}

// watchTrees are ~/.claude's subdirectories whose files Claude Code runs
// or follows as instructions that run commands.
var watchTrees = []string{"hooks", "commands", "agents", "skills", "plugins", "output-styles"}

func watchList(in Inputs, home, ws string, cfg Config) []Watched {
	h := func(rel string) string { return home + "/" + rel }
	cl := h(".claude")
	w := []Watched{
		{cl + "/settings.json", WatchClaudeSettings, cl},
		{cl + "/settings.local.json", WatchClaudeSettings, cl},
		{h(".claude.json"), WatchClaudeJSON, h(".claude.json")},
	}
	for _, t := range watchTrees {
		w = append(w, Watched{cl + "/" + t, WatchTree, cl})
	}
	// Claude Code's old local install, run by a shell alias on the host:
	// per-session when it exists (see Build), watched when it does not.
	if _, err := in.Lstat(h(".claude/local")); err != nil {
		w = append(w, Watched{h(".claude/local"), WatchAbsent, cl})
	}
	if !cfg.NoForge {
		p := h(".config/glab-cli/config.yml")
		w = append(w, Watched{p, WatchGlab, p})
	}
	// The workspace's own Claude Code settings run the same way: a hook,
	// status line or MCP server written into them runs when Claude Code
	// next starts in this (already trusted) directory, an IDE's binary
	// included, before any prompt the gate could block.
	if ws != "" {
		for _, rel := range []string{".claude/settings.json", ".claude/settings.local.json", ".mcp.json"} {
			w = append(w, Watched{ws + "/" + rel, WatchClaudeSettings, ws})
		}
		// What an editor (or direnv) runs on its own when it opens the
		// workspace: VS Code's folder-open tasks and the settings that
		// name its programs, a dev container's lifecycle commands (and
		// its Dockerfile), direnv's .envrc.
		w = append(w,
			Watched{ws + "/.vscode/tasks.json", WatchVSCodeTasks, ws},
			Watched{ws + "/.vscode/settings.json", WatchVSCodeSettings, ws},
			Watched{ws + "/.devcontainer.json", WatchDevcontainer, ws},
			Watched{ws + "/.devcontainer", WatchTree, ws},
			Watched{ws + "/.envrc", WatchFile, ws},
		)
		// What the host's version control runs by itself from the
		// workspace: a hook the host's git commit runs through a hook
		// manager's configuration (pre-commit's local hooks, lefthook's
		// commands, husky 9's scripts, which its read-only .husky/_
		// wrappers call), Mercurial's and old Jujutsu's repository
		// config (hooks, extensions, aliases, pager: any hg or jj
		// command, a shell prompt's included), mise's config (enter
		// hooks run on cd once the directory is trusted, and mise's
		// trust is by path, not content).
		for _, rel := range workspaceRunFiles {
			w = append(w, Watched{ws + "/" + rel, WatchFile, ws})
		}
		w = append(w, Watched{ws + "/.husky", WatchTree, ws})
	}
	// A commondir planted in the workspace's gitdir would redirect git to
	// a config of the session's making; it cannot be blocked without a
	// file in the repository (see gitOps), so it is watched.
	if g := ws + "/.git"; ws != "" && !cfg.WritableGitHooks {
		fi, err := in.Lstat(g)
		switch {
		case err == nil && fi.IsDir():
			if _, err := in.Lstat(g + "/commondir"); err != nil {
				w = append(w, Watched{g + "/commondir", WatchAbsent, ws})
			}
		case err == nil && fi.Mode()&fs.ModeSymlink != 0:
			// Protected where it leads (gitOps); retargeted to a gitdir
			// of the session's making, it would not be.
			w = append(w, Watched{g, WatchLink, ws})
		case err != nil:
			// A repository the session creates has writable hooks
			// and config for this session: say so at the end.
			w = append(w, Watched{g, WatchAbsent, ws})
		}
	}
	return w
}

// workspaceRunFiles are workspace files the host's tools run commands
// from without the user choosing to (see watchList).
var workspaceRunFiles = []string{
	".pre-commit-config.yaml", ".pre-commit-config.yml",
	"lefthook.yml", ".lefthook.yml", "lefthook.yaml", ".lefthook.yaml",
	"lefthook-local.yml", ".lefthook-local.yml", "lefthook-local.yaml", ".lefthook-local.yaml",
	".hg/hgrc", ".jj/repo/config.toml",
	"mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml",
	".config/mise.toml", ".config/mise/config.toml", ".mise/config.toml",
}

// Host is what the fingerprint reads on the host. Every function reads
// rel beneath the trusted directory root, never following a link out of
// it (internal/beneath in production).
type Host struct {
	// ReadFile reads a regular file of at most limit bytes; above it, it
	// returns an error with a TooLarge() int64 method (the size).
	ReadFile func(root, rel string, limit int64) ([]byte, error)
	// Walk lists every file below a directory with a string that changes
	// when the file does; nil when it is missing; {"": what it is} when
	// it is no directory (a symlink). truncated: a limit stopped it.
	Walk func(root, rel string) (entries map[string]string, truncated bool)
	// Exists reports whether a path exists (not following a last symlink).
	Exists func(root, rel string) bool
	// Readlink reads a symlink (nil: links are not compared).
	Readlink func(root, rel string) (string, error)
	// Home is the caller's home, Workspace the session's workspace: where
	// the scripts a setting names are found.
	Home, Workspace string
}

// Item is one compared thing: a file, or one key of it.
type Item struct {
	Path string // the host path
	Key  string // the key within it, "" for the whole file
}

// Fingerprint is, per watched item, a digest of its value. Unchecked
// holds, per path, why it could not be compared (too large).
type Fingerprint struct {
	Values    map[Item]string
	Unchecked map[string]string
}

// Change is one line of the exit report and of changes.log.
type Change struct {
	Path   string `json:"path"`
	Key    string `json:"key,omitempty"`
	Change string `json:"change"`
}

func (c Change) String() string {
	s := c.Path
	if c.Key != "" {
		s += ": " + c.Key
	}
	return s + " (" + c.Change + ")"
}

// TooLarge is what Host.ReadFile's error says for a file above its limit.
type TooLarge interface{ TooLarge() int64 }

// rel is p relative to root ("." for root itself).
func rel(root, p string) string {
	if p == root {
		return "."
	}
	return strings.TrimPrefix(p, root+"/")
}

// Take fingerprints the watched paths.
func Take(w []Watched, host Host) Fingerprint {
	fp := Fingerprint{Values: map[Item]string{}, Unchecked: map[string]string{}}
	set := func(p, k, v string) { fp.Values[Item{p, k}] = v }
	// read reads a file, noting in fp what stops it; ok is false then.
	read := func(root, p string, limit int64) ([]byte, bool) {
		if host.ReadFile == nil {
			return nil, false
		}
		b, err := host.ReadFile(root, rel(root, p), limit)
		var tl TooLarge
		switch {
		case err == nil:
			return b, true
		case errors.Is(err, fs.ErrNotExist):
		case errors.As(err, &tl):
			fp.Unchecked[p] = fmt.Sprintf("too large to check (%d bytes, the limit is %d): its changes are not checked", tl.TooLarge(), limit)
		default:
			// A link out of its tree, a FIFO, a device: not read, and
			// what it is (where it leads) is compared.
			v := "not a regular file"
			if host.Readlink != nil {
				if t, err := host.Readlink(root, rel(root, p)); err == nil {
					v = "a symlink to " + t
				}
			}
			set(p, "(not read: "+errKind(err)+")", digest([]byte(v)))
		}
		return nil, false
	}
	for _, x := range w {
		root := x.Root
		if root == "" {
			root = path.Dir(x.Path)
		}
		switch x.Kind {
		case WatchTree:
			if host.Walk == nil {
				continue
			}
			m, trunc := host.Walk(root, rel(root, x.Path))
			for name, st := range m {
				if name == "" {
					set(x.Path, "", st) // the tree itself is no directory
				} else {
					set(x.Path+"/"+name, "", st)
				}
			}
			if trunc {
				fp.Unchecked[x.Path] = "too large to check in full (a limit on entries, depth or name bytes was reached): some changes are not checked"
			}
			continue
		case WatchAbsent:
			if host.Exists != nil && host.Exists(root, rel(root, x.Path)) {
				set(x.Path, "", "present")
			}
			continue
		case WatchLink:
			if host.Readlink != nil {
				if t, err := host.Readlink(root, rel(root, x.Path)); err == nil {
					set(x.Path, "(symlink target)", digest([]byte(t)))
				} else if host.Exists != nil && host.Exists(root, rel(root, x.Path)) {
					set(x.Path, "(symlink target)", "not a symlink")
				}
			}
			continue
		}
		limit := int64(SettingsLimit)
		if x.Kind == WatchClaudeJSON {
			limit = ClaudeJSONLimit
		}
		b, ok := read(root, x.Path, limit)
		if !ok {
			continue
		}
		var keys map[string]string
		switch x.Kind {
		case WatchClaudeSettings:
			keys = jsonKeys(b, settingsCommandKeys)
		case WatchClaudeJSON:
			keys = claudeJSONKeys(b)
		case WatchGlab:
			keys = glabKeys(b)
		case WatchFile:
			keys = map[string]string{"": digest(b)}
		case WatchVSCodeTasks:
			keys = vscodeTasks(b)
		case WatchVSCodeSettings:
			keys = vscodeSettings(b)
		case WatchDevcontainer:
			keys = jsonKeys(jsonc(b), devcontainerKeys)
		}
		for k, v := range keys {
			set(x.Path, k, v)
		}
		if x.Kind != WatchClaudeSettings && x.Kind != WatchClaudeJSON {
			continue
		}
		// A script a command names (statusLine running
		// ~/.claude/statusline.sh, a hook running
		// "$CLAUDE_PROJECT_DIR"/.claude/hooks/start.sh) is as much a
		// command as the key.
		for _, p := range scriptPaths(b, host.Home, host.Workspace) {
			sroot := scriptRoot(p, host.Home, host.Workspace)
			k := "(a script named by " + x.Path + ")"
			if c, ok := read(sroot, p, SettingsLimit); ok {
				set(p, k, digest(c))
			} else {
				set(p, k, "missing")
			}
		}
	}
	return fp
}

// errKind names what stopped a read, for the report.
func errKind(err error) string {
	s := err.Error()
	for _, k := range []string{"leads out of its tree", "not a regular file", "too many levels of symbolic links", "permission denied", "not a directory"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return "unreadable"
}

// scriptRoot is the tree a named script is read beneath: ~/.claude's,
// the workspace's, else the home's.
func scriptRoot(p, home, ws string) string {
	if cl := home + "/.claude"; mounts.Within(p, cl) {
		return cl
	}
	if ws != "" && mounts.Within(p, ws) {
		return ws
	}
	return home
}

// Changes lists what differs between two fingerprints, sorted, and
// after's paths that could not be checked.
func Changes(before, after Fingerprint) []Change {
	var out []Change
	for k, v := range after.Values {
		if b, ok := before.Values[k]; !ok {
			out = append(out, Change{k.Path, k.Key, "added"})
		} else if b != v {
			out = append(out, Change{k.Path, k.Key, "changed"})
		}
	}
	for k := range before.Values {
		if _, unchecked := after.Unchecked[k.Path]; unchecked {
			continue // not "removed": not read
		}
		if _, ok := after.Values[k]; !ok {
			out = append(out, Change{k.Path, k.Key, "removed"})
		}
	}
	for p, why := range after.Unchecked {
		out = append(out, Change{Path: p, Change: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// jsonKeys digests the named top-level keys of a JSON object; an
// unparsable file is one digest of the whole.
func jsonKeys(b []byte, keys []string) map[string]string {
	out := map[string]string{}
	err := eachMember(b, func(k, v []byte) error {
		if name, ok := keyIs(k, keys...); ok {
			out[name] = canonical(v)
		}
		return nil
	})
	if err != nil {
		return map[string]string{"(unparsable)": digest(b)}
	}
	return out
}

// claudeJSONKeys digests ~/.claude.json's command-bearing keys: the
// settings keys at the top and each project's MCP servers.
func claudeJSONKeys(b []byte) map[string]string {
	out := jsonKeys(b, settingsCommandKeys)
	if _, bad := out["(unparsable)"]; bad {
		return out
	}
	_ = eachMember(b, func(k, projects []byte) error {
		if _, ok := keyIs(k, "projects"); !ok {
			return nil
		}
		return eachMember(projects, func(pk, pv []byte) error {
			return eachMember(pv, func(k, v []byte) error {
				if name, ok := keyIs(k, "mcpServers", "enabledMcpjsonServers", "enableAllProjectMcpServers"); ok && !emptyJSON(v) {
					out[fmt.Sprintf("projects[%s].%s", keyString(pk), name)] = canonical(v)
				}
				return nil
			})
		})
	})
	return out
}

func emptyJSON(v []byte) bool {
	v = bytes.TrimSpace(v)
	if len(v) > 8 {
		return false
	}
	s := string(v)
	return s == "{}" || s == "[]" || s == "null" || s == "false"
}

// canonical digests a JSON value independent of key order and spacing.
// A large value (none of the watched keys holds one) is digested as it
// is, never decoded into a tree: a session's 8 MB array of zeros would
// cost the launcher ten times that.
func canonical(v json.RawMessage) string {
	if len(v) > 64<<10 {
		return digest(v)
	}
	var x any
	if json.Unmarshal(v, &x) != nil {
		return digest(v)
	}
	b, _ := json.Marshal(x) // maps marshal with sorted keys
	return digest(b)
}

// scriptPattern finds, in a command, the paths a script can be named by:
// below the home (~/x, $HOME/x, ${HOME}/x, "$HOME"/x or the home's
// absolute path), below the project ($CLAUDE_PROJECT_DIR/x,
// ${CLAUDE_PROJECT_DIR}/x, quoted or not, or the workspace's absolute
// path), or relative to the project (Claude Code runs hooks there): a
// word with a slash that is neither an option nor a URL.
func scriptPattern(home, ws string) *regexp.Regexp {
	alts := []string{`~`, `"?\$(?:HOME|\{HOME\})"?`, regexp.QuoteMeta(home), `"?\$(?:CLAUDE_PROJECT_DIR|\{CLAUDE_PROJECT_DIR\})"?`}
	if ws != "" {
		alts = append(alts, regexp.QuoteMeta(ws))
	}
	word := `[^\s"'` + "`" + `;|&<>()$]`
	return regexp.MustCompile(`(?:^|[\s"'=;|&(])(?:(` + strings.Join(alts, "|") + `)(/` + word + `+)|(\.{0,2}/?[A-Za-z0-9_.][A-Za-z0-9_.+-]*/` + word + `+))`)
}

// scriptPaths returns the files under the home or the workspace that the
// command-bearing values of a settings file name.
func scriptPaths(b []byte, home, ws string) []string {
	if home == "" {
		return nil
	}
	var strs []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			strs = append(strs, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	_ = eachMember(b, func(k, raw []byte) error {
		var v any
		if _, ok := keyIs(k, settingsCommandKeys...); ok && len(raw) <= 1<<20 && json.Unmarshal(raw, &v) == nil {
			walk(v)
		}
		return nil
	})
	re := scriptPattern(home, ws)
	seen := map[string]bool{}
	var out []string
	for _, s := range strs {
		for _, sm := range re.FindAllStringSubmatch(s, 64) {
			var p string
			switch base := strings.Trim(sm[1], `"`); {
			case sm[3] != "":
				if ws == "" || strings.Contains(sm[3], "://") || strings.HasPrefix(sm[3], "/") {
					continue
				}
				p = path.Join(ws, sm[3])
			case base == "~" || strings.Contains(base, "HOME") || base == home:
				p = path.Join(home, sm[2])
			case ws != "":
				p = path.Join(ws, sm[2])
			default:
				continue
			}
			if !mounts.Within(p, home) && (ws == "" || !mounts.Within(p, ws)) {
				continue // "..": not a file of either tree
			}
			if !seen[p] && len(out) < 256 {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}
