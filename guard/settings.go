package guard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Program is where install puts the binary; the hooks run it.
const Program = "/usr/libexec/claude-sandbox/claude-sandbox"

// The guard's hook commands.
var (
	GateCommand   = Program + " gate"
	VerifyCommand = Program + " verify --hook"
)

// ManagedSettings is Claude Code's highest-precedence settings file.
const ManagedSettings = "/etc/claude-code/managed-settings.json"

func isOwn(command string) bool {
	return strings.HasPrefix(strings.TrimSpace(command), Program+" ")
}

// Merge returns existing managed settings with the guard added: the
// SessionStart verifier and the UserPromptSubmit gate (each exactly once,
// replacing older copies of the guard's own hooks), env.DISABLE_AUTOUPDATER
// = "1" and autoUpdates = false. Every other key and hook is kept;
// allowManagedHooksOnly is never set (the user's own hooks keep running).
// An empty input is an empty object. Invalid JSON is an error: the caller
// must leave such a file alone. The output is stable: merging twice gives
// the same bytes.
func Merge(existing []byte) ([]byte, error) {
	doc, err := parse(existing)
	if err != nil {
		return nil, err
	}
	removeOwnHooks(doc)
	hooks, _ := doc["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	add := func(event, command string) {
		list, _ := hooks[event].([]any)
		hooks[event] = append(list, map[string]any{
			"hooks": []any{map[string]any{"type": "command", "command": command}},
		})
	}
	add("SessionStart", VerifyCommand)
	add("UserPromptSubmit", GateCommand)
	doc["hooks"] = hooks
	env, _ := doc["env"].(map[string]any)
	if env == nil {
		env = map[string]any{}
	}
	env["DISABLE_AUTOUPDATER"] = "1"
	doc["env"] = env
	doc["autoUpdates"] = false
	return render(doc)
}

// Remove returns managed settings without the guard's hooks. The
// auto-updater settings stay (install cannot know whether an admin wanted
// them too); everything else is untouched.
func Remove(existing []byte) ([]byte, error) {
	doc, err := parse(existing)
	if err != nil {
		return nil, err
	}
	removeOwnHooks(doc)
	return render(doc)
}

func parse(b []byte) (map[string]any, error) {
	doc := map[string]any{}
	if len(bytes.TrimSpace(b)) == 0 {
		return doc, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if doc == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not valid JSON: data after the object")
	}
	return doc, nil
}

// removeOwnHooks drops the guard's hooks from every event, and any group
// or event left empty by that (and only by that).
func removeOwnHooks(doc map[string]any) {
	hooks, ok := doc["hooks"].(map[string]any)
	if !ok {
		return
	}
	for event, v := range hooks {
		groups, ok := v.([]any)
		if !ok {
			continue
		}
		var keptGroups []any
		for _, g := range groups {
			gm, ok := g.(map[string]any)
			if !ok {
				keptGroups = append(keptGroups, g)
				continue
			}
			list, ok := gm["hooks"].([]any)
			if !ok {
				keptGroups = append(keptGroups, g)
				continue
			}
			var kept []any
			for _, h := range list {
				if hm, ok := h.(map[string]any); ok {
					if c, _ := hm["command"].(string); isOwn(c) {
						continue
					}
				}
				kept = append(kept, h)
			}
			if len(kept) == 0 && len(list) > 0 {
				continue
			}
			gm["hooks"] = kept
			keptGroups = append(keptGroups, gm)
		}
		if len(keptGroups) == 0 && len(groups) > 0 {
			delete(hooks, event)
			continue
		}
		hooks[event] = keptGroups
	}
	if len(hooks) == 0 {
		delete(doc, "hooks")
	}
}

func render(doc map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
