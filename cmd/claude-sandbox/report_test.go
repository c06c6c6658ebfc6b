package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// A name a session chose with an escape sequence and a newline reaches
// neither the terminal nor changes.log as such: on stderr it is quoted
// (\x1b, \n visible, on one line), in the log it is one JSON line.
func TestReportChangesEscapes(t *testing.T) {
	home := t.TempDir()
	evil := "/h/.claude/commands/x\x1b[2K\x1b[1A\rsettings.json: hooks (added)\n  ok.md"
	changes := []shadow.Change{{Path: evil, Change: "added"}, {Path: "/h/.claude/settings.json", Key: "hooks\x1b]0;t\a", Change: "changed"}}
	var stderr bytes.Buffer
	reportChanges(home, changes, &stderr)
	out := stderr.String()
	if strings.ContainsAny(out, "\x1b\r\a") {
		t.Errorf("a control character reached the terminal: %q", out)
	}
	if !strings.Contains(out, `x\x1b[2K\x1b[1A\rsettings.json: hooks (added)\n  ok.md"`) {
		t.Errorf("the name is not shown escaped: %q", out)
	}
	if n := strings.Count(out, "\n"); n != 4 { // header, two changes, "recorded in"
		t.Errorf("%d lines on stderr, want 4: %q", n, out)
	}
	b, err := os.ReadFile(filepath.Join(home, shadow.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2: %q", len(lines), b)
	}
	var l logLine
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil || l.Path != evil || l.Change != "added" || l.Time == "" {
		t.Errorf("log line %q: %+v %v", lines[0], l, err)
	}
}

// A long list ends in "and N more" on the terminal; the log keeps every
// change up to its bound, then says how many it left out.
func TestReportChangesCapped(t *testing.T) {
	home := t.TempDir()
	var changes []shadow.Change
	for i := 0; i < reportLogLines+5; i++ {
		changes = append(changes, shadow.Change{Path: fmt.Sprintf("/h/.claude/commands/%06d", i), Change: "added"})
	}
	var stderr bytes.Buffer
	reportChanges(home, changes, &stderr)
	if n := strings.Count(stderr.String(), "\n"); n != reportTerminalLines+3 {
		t.Errorf("%d lines on stderr, want %d", n, reportTerminalLines+3)
	}
	if want := fmt.Sprintf("  and %d more\n", len(changes)-reportTerminalLines); !strings.Contains(stderr.String(), want) {
		t.Errorf("no %q on stderr", want)
	}
	f, err := os.Open(filepath.Join(home, shadow.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n, last := 0, ""
	for sc.Scan() {
		n++
		last = sc.Text()
	}
	var l logLine
	if n != reportLogLines+1 || json.Unmarshal([]byte(last), &l) != nil || l.More != 5 {
		t.Errorf("%d log lines, last %q", n, last)
	}
}

// The plan's reads of the workspace's git files stay beneath it: a .git
// file naming a gitdir through a link out of the workspace reads nothing
// there.
func TestSessionTreeReader(t *testing.T) {
	d := t.TempDir()
	ws := filepath.Join(d, "ws")
	if err := os.MkdirAll(ws+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "secret"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/sub/config", []byte("c"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(d, ws+"/out"); err != nil {
		t.Fatal(err)
	}
	read := sessionTreeReader([]string{ws})
	if b, err := read(ws + "/sub/config"); err != nil || string(b) != "c" {
		t.Errorf("inside: %q %v", b, err)
	}
	if b, err := read(ws + "/out/secret"); err == nil {
		t.Errorf("read %q through a link out of the workspace", b)
	}
	if b, err := read(filepath.Join(d, "secret")); err != nil || string(b) != "s" {
		t.Errorf("a file outside every tree: %q %v", b, err)
	}
}

// The watch's reads through watchHost: a watched tree replaced by a link
// out of ~/.claude is reported (never walked), a link inside a tree is
// recorded with its target, and a settings file linked out of ~/.claude
// is not read there but compared by its target.
func TestWatchHostLinks(t *testing.T) {
	home := t.TempDir()
	cl := filepath.Join(home, ".claude")
	for _, d := range []string{cl + "/commands", home + "/elsewhere"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(home+"/elsewhere/settings.json", []byte(`{"hooks":{"x":1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	w := []shadow.Watched{{Path: cl + "/commands", Kind: shadow.WatchTree, Root: cl}, {Path: cl + "/agents", Kind: shadow.WatchTree, Root: cl},
		{Path: cl + "/settings.json", Kind: shadow.WatchClaudeSettings, Root: cl}}
	host := watchHost(home, "")
	before := shadow.Take(w, host)
	for _, c := range [][2]string{{"/", cl + "/agents"}, {home + "/elsewhere", cl + "/commands/sub"}, {home + "/elsewhere/settings.json", cl + "/settings.json"}} {
		if err := os.Symlink(c[0], c[1]); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, c := range shadow.Changes(before, shadow.Take(w, host)) {
		got = append(got, c.String())
	}
	want := []string{cl + "/agents (added)", cl + "/commands/sub (added)", cl + "/settings.json: (not read: leads out of its tree) (added)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The scripts a setting names are read beneath their tree (threat-model.md's
// table of launcher reads): ~/.claude/status.sh swapped for a link out of
// ~/.claude is reported as such and not read, even where the file it
// leads to holds the same bytes (what runs is then outside the watched
// tree); the project's hook script swapped for a FIFO neither blocks nor
// is read. Seen failing (the link followed, no change reported) with
// scriptRoot giving the home for ~/.claude's scripts.
func TestWatchScriptLinksOut(t *testing.T) {
	home := t.TempDir()
	cl, ws := filepath.Join(home, ".claude"), filepath.Join(home, "project")
	for _, d := range []string{cl, home + "/elsewhere", ws + "/.claude/hooks"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	settings := `{"statusLine":{"type":"command","command":"~/.claude/status.sh"},` +
		`"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/start.sh"}]}]}}`
	script := "#!/bin/sh\necho status\n"
	for p, s := range map[string]string{cl + "/settings.json": settings, cl + "/status.sh": script,
		home + "/elsewhere/status.sh": script, ws + "/.claude/hooks/start.sh": "#!/bin/sh\n"} {
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := []shadow.Watched{{Path: cl + "/settings.json", Kind: shadow.WatchClaudeSettings, Root: cl}}
	host := watchHost(home, ws)
	before := shadow.Take(w, host)
	if err := os.Remove(cl + "/status.sh"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../elsewhere/status.sh", cl+"/status.sh"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ws + "/.claude/hooks/start.sh"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(ws+"/.claude/hooks/start.sh", 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range shadow.Changes(before, shadow.Take(w, host)) {
		got = append(got, c.String())
	}
	for _, want := range []string{cl + "/status.sh: (not read: leads out of its tree) (added)",
		ws + "/.claude/hooks/start.sh: (not read: not a regular file) (added)"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q not reported; changes:\n%s", want, strings.Join(got, "\n"))
		}
	}
}

// safeText keeps a message readable (newlines, tabs, any printable text)
// and escapes what a terminal would act on.
func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"plain /path/ünï":           "plain /path/ünï",
		"a\nb\tc":                   "a\nb\tc",
		"m\x1b]52;c;QQ==\a\x1b[21t": `m\x1b]52;c;QQ==\a\x1b[21t`,
		"x\rforged":                 `x\rforged`,
		"bidi\u202eevil":            `bidi\u202eevil`,
		"bad\xffbyte":               `bad\xffbyte`,
	} {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
	}
}
