package shadow

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// claudeJSONShape builds a ~/.claude.json just under its limit, shaped to
// cost a parser the most.
func claudeJSONShape(name string) string {
	many := func(f func(i int) string) string {
		var b strings.Builder
		b.Grow(ClaudeJSONLimit)
		for i := 0; b.Len() < ClaudeJSONLimit-64; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(f(i))
		}
		return b.String()
	}
	switch name {
	case "top keys":
		return "{" + many(func(i int) string { return fmt.Sprintf(`"k%d":0`, i) }) + "}"
	case "projects":
		return `{"projects":{` + many(func(i int) string { return fmt.Sprintf(`"p%d":{}`, i) }) + "}}"
	case "project keys":
		return `{"projects":{"p":{` + many(func(i int) string { return fmt.Sprintf(`"k%d":0`, i) }) + "}}}"
	case "env array":
		return `{"env":[` + many(func(int) string { return "0" }) + "]}"
	case "mcp array":
		return `{"projects":{"p":{"mcpServers":[` + many(func(int) string { return "0" }) + "]}}}"
	case "hook strings":
		return `{"hooks":[` + many(func(int) string { return `"~/a/b"` }) + "]}"
	}
	return "{}"
}

// TestWatchMemoryHelper is the child of TestWatchClaudeJSONMemoryBounded.
func TestWatchMemoryHelper(t *testing.T) {
	shape := os.Getenv("WATCH_MEMORY_SHAPE")
	if shape == "" {
		return // only as the child
	}
	s := claudeJSONShape(shape)
	if len(s) > ClaudeJSONLimit {
		t.Fatalf("%d bytes: over the limit", len(s))
	}
	host := fakeWatchHost(map[string]string{"/h/.claude.json": s}, "/h", "")
	Take([]Watched{{"/h/.claude.json", WatchClaudeJSON, "/h/.claude.json"}}, host)
}

// A ~/.claude.json just under its limit, shaped to cost a parser the most
// (a million keys at the top, a million projects, a project of a million
// keys, a huge array under a watched key, a million script names),
// leaves the process that fingerprints it under 64 MiB of RSS, the 8 MiB
// file itself (three copies: built, held, read) and the test binary
// included. Under the race detector, whose shadow memory multiplies RSS,
// the bound is twice that.
func TestWatchClaudeJSONMemoryBounded(t *testing.T) {
	limit := int64(64 << 10)
	if raceEnabled {
		limit *= 2
	}
	for _, shape := range []string{"empty", "top keys", "projects", "project keys", "env array", "mcp array", "hook strings"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWatchMemoryHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WATCH_MEMORY_SHAPE="+shape)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", shape, err, out)
		}
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		t.Logf("%s: peak RSS %d KiB", shape, rss)
		if rss >= limit {
			t.Errorf("%s: peak RSS %d KiB, want under %d KiB", shape, rss, limit)
		}
	}
}

// The text parsers cost the launcher time linear in what a session wrote:
// a .vscode/settings.json of nothing but "/**/" comments (jsonc) and a
// repository config of continuation lines (gitConfigEntries, at the next
// launch) are each parsed with a handful of allocations, not one copy of
// the rest of the text per comment or line. Counted, not timed. Seen
// failing (16384 and 21845 allocations for 64 KiB; 1 MiB took 2m39s and
// 1m44s) with strings.Index(string(b[i+2:]), "*/") and line = line + next.
func TestParsersLinear(t *testing.T) {
	comments := []byte(strings.Repeat("/**/", 64<<10/4))
	cont := "[core]\n\tx = " + strings.Repeat("a\\\n", 64<<10/3)
	for name, f := range map[string]func(){
		"jsonc of comments":           func() { jsonc(comments) },
		"git config of continuations": func() { gitConfigEntries(cont) },
	} {
		if n := testing.AllocsPerRun(1, f); n > 100 {
			t.Errorf("%s: %.0f allocations for 64 KiB", name, n)
		}
	}
	if e := gitConfigEntries("[core]\n\thooksPath = a\\\nb\\\\\n"); len(e) != 1 || e[0].value != "ab\\" {
		t.Errorf("continuation: %+v", e)
	}
}
