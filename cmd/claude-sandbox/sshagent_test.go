package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// The shadow's ssh-agent keys reach the launch as run's --ssh-agent and
// --ssh-key would, with the caller's known_hosts.
func TestShadowExtrasSSHAgent(t *testing.T) {
	cfg := shadow.DefaultConfig()
	if x := shadowExtras(cfg, "/home/u", ""); x.sshAgent != nil {
		t.Fatal("an agent without the ssh-agent key")
	}
	cfg.SSHAgent = []string{"forge.test", "git.example:2222"}
	cfg.SSHKey = []string{"SHA256:x"}
	cfg.SSHHostKey = []string{"forge.test ssh-ed25519 AAAA"}
	cfg.SSHKeyFile = []string{"/home/u/.ssh/id_ed25519"}
	cfg.OSC52 = true
	x := shadowExtras(cfg, "/home/u", "")
	if x.sshAgent == nil || !slices.Equal(x.sshAgent.Hosts, cfg.SSHAgent) || !slices.Equal(x.sshAgent.Keys, cfg.SSHKey) ||
		!slices.Equal(x.sshAgent.HostKeys, cfg.SSHHostKey) || !slices.Equal(x.sshAgent.KeyFiles, cfg.SSHKeyFile) || !x.osc52 {
		t.Fatalf("extras %+v", x)
	}
	if !slices.Equal(x.sshAgent.KnownHosts, []string{"/home/u/.ssh/known_hosts", "/home/u/.ssh/known_hosts2"}) {
		t.Errorf("known_hosts %q", x.sshAgent.KnownHosts)
	}
}

// A key file the sandbox would show is refused before anything runs: in
// the working directory (the workspace, shown writable) it is; under the
// home (empty inside) it is not.
func TestSSHKeyFileShownRefused(t *testing.T) {
	home, work := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	b, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	shown, hidden := filepath.Join(work, "id_ed25519"), filepath.Join(home, ".ssh", "id_ed25519")
	for _, f := range []string{shown, hidden} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	t.Chdir(work)
	var out, errb strings.Builder
	code := realMain([]string{"plan", "--json", "--net=none", "--bind", work, work, "--ssh-agent", "@github", "--ssh-key-file", shown, "--", "true"}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "would show inside the sandbox (at "+shown) {
		t.Errorf("a key file in the workspace: exit %d, %s", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	code = realMain([]string{"plan", "--json", "--net=none", "--bind", work, work, "--ssh-agent", "@github", "--ssh-key-file", hidden, "--", "true"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "GIT_SSH_COMMAND") {
		t.Errorf("a key file under the home: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := realMain([]string{"plan", "--json", "--net=none", "--ssh-key-file", hidden, "--", "true"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--ssh-key-file needs --ssh-agent") {
		t.Errorf("--ssh-key-file alone: exit %d, %s", code, errb.String())
	}
}
