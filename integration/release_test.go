package integration

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// scripts/release.sh, for this machine's architecture only: two builds
// (into different directories, from different environments) are the same
// bytes, the binary is static and reports the stamped version, and
// SHA256SUMS holds its digest.
func TestReleaseReproducible(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("release.sh builds amd64 and arm64; this is %s", runtime.GOARCH)
	}
	script := filepath.Join(testutil.RepoRoot(), "scripts", "release.sh")
	name := "claude-sandbox-linux-" + runtime.GOARCH
	build := func(env ...string) (string, []byte) {
		t.Helper()
		out := t.TempDir()
		// The packages are scripts/test-packages.sh's to check.
		cmd := exec.Command(script, "--arch", runtime.GOARCH, "--out", out, "--version", "v9.9.9-test", "--no-packages")
		// What the script must not let through: build flags from the
		// environment.
		cmd.Env = append(os.Environ(), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release.sh: %v\n%s", err, b)
		}
		bin, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return out, bin
	}
	out1, bin1 := build()
	_, bin2 := build("GOFLAGS=-ldflags=-X=main.version=other", "CGO_ENABLED=1", "GOAMD64=v3")
	if !bytes.Equal(bin1, bin2) {
		t.Errorf("two release builds differ (%d and %d bytes)", len(bin1), len(bin2))
	}
	sum := sha256.Sum256(bin1)
	sums, _ := os.ReadFile(filepath.Join(out1, "SHA256SUMS"))
	if want := hex.EncodeToString(sum[:]) + "  " + name + "\n"; string(sums) != want {
		t.Errorf("SHA256SUMS %q, want %q", sums, want)
	}
	f, err := elf.NewFile(bytes.NewReader(bin1))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the release binary is dynamically linked (%v)", p.Type)
		}
	}
	r := testutil.Run(t, exec.Command(filepath.Join(out1, name), "version", "--json"))
	var v struct{ Version, Revision string }
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &v) != nil || v.Version != "v9.9.9-test" || (inGit() && len(v.Revision) != 40) {
		t.Errorf("version --json: %v; want v9.9.9-test and the commit", r)
	}
}

func inGit() bool {
	cmd := exec.Command("git", "rev-parse", "--is-inside-work-tree")
	cmd.Dir = testutil.RepoRoot()
	b, err := cmd.Output()
	return err == nil && strings.TrimSpace(string(b)) == "true"
}
