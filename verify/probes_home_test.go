package verify

import (
	"os"
	"path/filepath"
	"testing"
)

// P81 sees an overlay on the home (a link's target) and stays quiet on a
// shadow-like view (overlays below the home only); P82 sees a token.
func TestHomeProbes(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "proc/self"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "home/u/.claude/projects"), 0o755))
	must(os.Symlink("/home/u/shared", filepath.Join(root, "home/u/.claude/CLAUDE.md")))
	e := &Env{Root: root, Home: "/home/u"}
	mi := func(s string) { must(os.WriteFile(filepath.Join(root, "proc/self/mountinfo"), []byte(s), 0o644)) }
	base := "20 1 0:20 / / ro - overlay overlay ro\n21 20 0:21 / /home/u rw - tmpfs tmpfs rw\n23 21 0:23 /x /home/u/.claude rw - ext4 /dev/sda1 rw\n" +
		"24 21 0:24 / /home/u/.cache/uv rw - overlay overlay rw\n25 20 0:25 / /proc rw - proc proc rw\n"
	mi(base)
	if st, ev := linkMountProbe(e); st != Blocked {
		t.Errorf("shadow-like view: %s %s", st, ev)
	}
	if st, ev := homeCredentialProbe(e); st != Blocked {
		t.Errorf("empty home: %s %s", st, ev)
	}
	for _, extra := range []string{"26 21 0:26 / /home/u rw - overlay overlay rw\n", "26 25 0:26 / /proc ro - overlay overlay ro\n"} {
		mi(base + extra)
		if st, ev := linkMountProbe(e); st != Escaped {
			t.Errorf("%q: %s %s", extra, st, ev)
		}
	}
	mi(base + "26 20 0:26 / /opt/x rw - overlay overlay rw\n")
	if st, _ := linkMountProbe(e); st != Blocked {
		t.Errorf("an overlay no link leads to: %s", st)
	}
	must(os.Symlink("/opt/x", filepath.Join(root, "home/u/.claude/projects/local")))
	if st, ev := linkMountProbe(e); st != Escaped {
		t.Errorf("a link below ~/.claude to an overlay: %s %s", st, ev)
	}
	must(os.MkdirAll(filepath.Join(root, "home/u/.local/share/keyrings"), 0o755))
	must(os.WriteFile(filepath.Join(root, "home/u/.local/share/keyrings/login.keyring"), []byte("x"), 0o600))
	if st, ev := homeCredentialProbe(e); st != Escaped {
		t.Errorf("a keyring: %s %s", st, ev)
	}
}
