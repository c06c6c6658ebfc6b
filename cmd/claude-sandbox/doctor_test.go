package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/guard"
)

// doctor names what an update did to the installed layout: npm's link
// back over the shadow (npm update -g), another link or file there, the
// relocated link's package gone; the shadow in place is OK.
func TestDoctorShadowPlace(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "claude-sandbox")
	if err := os.WriteFile(prog, []byte("the program"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(dir, "claude")
	if got := shadowPlaceFix(sh, prog); !strings.Contains(got, "no shadow") {
		t.Errorf("missing: %q", got)
	}
	if err := os.WriteFile(sh, []byte("the program"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := shadowPlaceFix(sh, prog); got != "" {
		t.Errorf("the shadow in place: %q", got)
	}
	if err := os.WriteFile(sh, []byte("claude 2.2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := shadowPlaceFix(sh, prog); !strings.Contains(got, "not claude-sandbox") || !strings.Contains(got, "sudo claude-sandbox install") {
		t.Errorf("replaced by a file: %q", got)
	}
	os.Remove(sh)
	if err := os.Symlink("../lib/node_modules/@anthropic-ai/claude-code/bin/claude.exe", sh); err != nil {
		t.Fatal(err)
	}
	if got := shadowPlaceFix(sh, prog); !strings.Contains(got, "npm's link") || !strings.Contains(got, "npm update -g") || !strings.Contains(got, "sudo claude-sandbox install") {
		t.Errorf("npm's link back: %q", got)
	}
	real := filepath.Join(dir, "real")
	if err := os.Symlink(filepath.Join(dir, "gone/claude.exe"), real); err != nil {
		t.Fatal(err)
	}
	if got := realBinaryFix(real); !strings.Contains(got, "which is gone") || !strings.Contains(got, "npm install -g @anthropic-ai/claude-code") {
		t.Errorf("the relocated link dangling: %q", got)
	}
	if got := realBinaryFix(prog); got != "" {
		t.Errorf("a real binary in place: %q", got)
	}
}

// verify outside the shadow says one verdict: a RESULT line saying where
// it runs, never NOT INSIDE then SANDBOX LEAKING.
func TestVerifyOutsideOneVerdict(t *testing.T) {
	zero := "0000000000000000"
	sandboxed := "NoNewPrivs:\t1\nCapEff:\t" + zero + "\nCapPrm:\t" + zero + "\nCapBnd:\t" + zero + "\nCapAmb:\t" + zero + "\n"
	for _, c := range []struct {
		f    guard.Facts
		want string
	}{
		{guard.Facts{Status: "NoNewPrivs:\t0\nCapEff:\t000001ffffffffff\n"}, "RESULT: NOT INSIDE claude-sandbox"},
		{guard.Facts{Status: sandboxed}, "RESULT: NOT INSIDE the shadow"},
	} {
		got := outsideVerdict(c.f)
		if !strings.HasPrefix(got, c.want) || strings.Count(got, "RESULT") != 1 || strings.Contains(got, "LEAKING") {
			t.Errorf("%q: %q, want one verdict starting %q", c.f.Status, got, c.want)
		}
	}
}
