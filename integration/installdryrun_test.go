package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// install --dry-run and uninstall --dry-run print the changes, by step,
// and leave the scratch root byte for byte as it was; over an installed
// tree install --dry-run has nothing to change; uninstall --dry-run of a
// tree never installed says so, exit 1.
func TestInstallDryRun(t *testing.T) {
	testutil.NeedsRoot(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	root := testutil.MkdirFor(t, 0)
	home := filepath.Join(root, "home/u")
	must(t, os.MkdirAll(filepath.Join(home, ".local/bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(home, ".local/bin/claude"), []byte("claude 2.1.0"), 0o755))
	run := func(args ...string) testutil.Result {
		cmd := exec.Command(bin, append(args, "--prefix", root)...)
		cmd.Env = []string{"HOME=/home/u", "PATH=/usr/bin:/bin"}
		return testutil.Run(t, cmd)
	}
	if r := run("uninstall", "--dry-run"); r.Code != 1 || !strings.Contains(r.Stderr, "not installed") {
		t.Errorf("uninstall --dry-run of a tree never installed: %v", r)
	}
	before := tree(t, root)
	r := run("install", "--skip-checks", "--allow-unwrapped", "--dry-run")
	if r.Code != 0 {
		t.Fatalf("install --dry-run: %v", r)
	}
	if after := tree(t, root); after != before {
		t.Fatalf("install --dry-run changed the tree:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, want := range []string{"nothing was changed", "create file", filepath.Join(root, "usr/local/bin/claude"), "the shadow",
		filepath.Join(home, ".claude/commands/verify-sandbox.md"), "remove", filepath.Join(home, ".local/bin/claude"), "escape hatch"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("install --dry-run does not list %q:\n%s", want, r.Stdout)
		}
	}
	if r := run("install", "--skip-checks", "--allow-unwrapped"); r.Code != 0 {
		t.Fatalf("install: %v", r)
	}
	installed := tree(t, root)
	if r := run("install", "--skip-checks", "--allow-unwrapped", "--dry-run"); r.Code != 0 || !strings.Contains(r.Stdout, "nothing to change") {
		t.Errorf("install --dry-run over the installed tree: %v", r)
	}
	r = run("uninstall", "--dry-run")
	if r.Code != 0 || !strings.Contains(r.Stdout, filepath.Join(root, "usr/libexec/claude-sandbox")) || !strings.Contains(r.Stdout, filepath.Join(home, ".local/bin/claude")) {
		t.Errorf("uninstall --dry-run: %v", r)
	}
	if tree(t, root) != installed {
		t.Error("uninstall --dry-run changed the tree")
	}
	if r := run("uninstall"); r.Code != 0 {
		t.Fatalf("uninstall: %v", r)
	}
	if after := tree(t, root); after != before {
		t.Errorf("uninstall did not restore the tree:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
