package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// postCreate.sh's block runs install directly as root (a root container
// without sudo: the node and python images), with sudo otherwise, and
// says what is missing when neither works. id and sudo are stubs on PATH.
func TestPostCreateBlockSudo(t *testing.T) {
	for _, c := range []struct {
		name     string
		uid      string
		sudo     bool
		wantCode int
		want     string
	}{
		{"root without sudo", "0", false, 0, "ran: install --config"},
		{"root with sudo", "0", true, 0, "ran: install --config"},
		{"a user with sudo", "1000", true, 0, "sudo: ran: install --config"},
		{"a user without sudo", "1000", false, 1, "needs root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			stub := func(name, body string) {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(dir, ".devcontainer/claude-sandbox"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			stub("id", "echo "+c.uid)
			if c.sudo {
				stub("sudo", `printf 'sudo: '; exec "$@"`)
			}
			if err := os.WriteFile(filepath.Join(dir, ".devcontainer/claude-sandbox/claude-sandbox"), []byte("#!/bin/sh\necho \"ran: $*\"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			sh, err := exec.LookPath("sh")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(sh, "-c", postCreateBlock)
			cmd.Dir, cmd.Env = dir, []string{"PATH=" + bin}
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantCode || !strings.Contains(string(out), c.want) || (!c.sudo || c.uid == "0") && strings.Contains(string(out), "sudo:") {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out, c.wantCode, c.want)
			}
		})
	}
}
