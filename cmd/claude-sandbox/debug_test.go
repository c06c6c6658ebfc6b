package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --debug and --debug-file parse; --debug-file implies --debug.
func TestParseDebug(t *testing.T) {
	r, err := parseRunArgs([]string{"--debug", "true"}, false)
	if err != nil || !r.debug || r.debugFile != "" {
		t.Fatalf("--debug: %+v, %v", r, err)
	}
	r, err = parseRunArgs([]string{"--debug-file", "/tmp/x.log", "true"}, false)
	if err != nil || !r.debug || r.debugFile != "/tmp/x.log" {
		t.Fatalf("--debug-file: %+v, %v", r, err)
	}
}

// On stderr every debug line carries the prefix, so it cannot be taken
// for the command's own output; in a file the records are plain.
func TestDebugLoggerPrefixesStderr(t *testing.T) {
	var buf bytes.Buffer
	l, done, err := debugLogger("", &buf)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	l.Debug("first", "k", "a\nb")
	l.Debug("second")
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), buf.String())
	}
	for _, ln := range lines {
		if !strings.HasPrefix(ln, debugPrefix) || !strings.Contains(ln, "level=DEBUG") {
			t.Errorf("line %q: want the prefix %q and a debug level", ln, debugPrefix)
		}
	}

	file := filepath.Join(t.TempDir(), "debug.log")
	l, done, err = debugLogger(file, &buf)
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("to the file")
	done()
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "msg=\"to the file\"") || strings.Contains(string(b), debugPrefix) {
		t.Fatalf("file %q", b)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
}

// A debug file named through a symlink is refused (a session could plant
// one where the next launch writes its log).
func TestDebugFileRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := debugLogger(link, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("err %v, want a refusal naming the symlink", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Fatalf("target changed: %q", b)
	}
}
