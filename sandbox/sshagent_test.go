package sandbox_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/sandbox"
)

// Spec.SSHAgent: the command sees an agent at SSH_AUTH_SOCK listing only
// the allowed key of the backing agent, whose own socket it cannot reach;
// a signature asked without a session binding is refused and counted.
func TestSpecSSHAgent(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	if _, err := os.Stat("/usr/bin/ssh-add"); err != nil {
		t.Fatal("openssh-client is needed (scripts/test.sh installs it)")
	}
	keyring := agent.NewKeyring()
	var allowed ssh.PublicKey
	for i := 0; i < 2; i++ {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if err := keyring.Add(agent.AddedKey{PrivateKey: priv, Comment: []string{"allowed", "spare"}[i]}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			s, _ := ssh.NewSignerFromKey(priv)
			allowed = s.PublicKey()
		}
	}
	dir := t.TempDir()
	backing := testutil.ServeAgent(t, keyring)
	_, hostPriv, _ := ed25519.GenerateKey(rand.Reader)
	hostSigner, _ := ssh.NewSignerFromKey(hostPriv)
	pin := "forge.test " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))
	pub := filepath.Join(dir, "allowed.pub")
	if err := os.WriteFile(pub, ssh.MarshalAuthorizedKey(allowed), 0o644); err != nil {
		t.Fatal(err)
	}
	// Files, not writers: nsexec's input flush reads descriptors that
	// Start closes after handing pipes over (a race of its own, not this
	// test's).
	outF, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outF.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var warnings []string
	sb, err := sandbox.Start(context.Background(), sandbox.Spec{
		Command: []string{"/bin/sh", "-c", `ssh-add -L | cut -d' ' -f3; cat /run/claude-sandbox/ssh_known_hosts; ssh-add -T /dev/stdin < /run/pub && echo SIGNED; SSH_AUTH_SOCK=` + backing + ` ssh-add -L >/dev/null 2>&1 && echo BACKING`},
		Net:     sandbox.NetNone,
		Mounts:  []sandbox.Mount{sandbox.ROBind(pub, "/run/pub")},
		Stdin:   null,
		Stdout:  outF,
		Stderr:  outF,
		Warn:    func(w string) { warnings = append(warnings, w) },
		SSHAgent: &sandbox.SSHAgent{
			Hosts: []string{"forge.test"}, HostKeys: []string{pin}, KnownHosts: []string{},
			Keys: []string{ssh.FingerprintSHA256(allowed)}, Backing: backing,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	code, err := sb.Wait()
	b, _ := os.ReadFile(outF.Name())
	got := string(b)
	t.Logf("exit %d %v\noutput:\n%s\nwarnings: %q", code, err, got, warnings)
	if !strings.HasPrefix(got, "allowed\nforge.test ssh-ed25519 ") {
		t.Errorf("the agent inside lists %q, want only the allowed key, then the pinned host key", got)
	}
	if strings.Contains(got, "SIGNED") || strings.Contains(got, "BACKING") {
		t.Errorf("inside: %q", got)
	}
	if s := sb.SSHAgentSummary(); !strings.Contains(s, "refused 1 (1 unbound)") {
		t.Errorf("summary %q", s)
	}
	if len(warnings) == 0 || !strings.Contains(warnings[0], "not bound") {
		t.Errorf("the refusal was not reported: %q", warnings)
	}
}

// SSHAgent.Confirm asks through the ask mode: without Spec.Ask, or
// without the jail, Start refuses it.
func TestSpecSSHAgentConfirmNeedsAsk(t *testing.T) {
	for _, spec := range []sandbox.Spec{
		{Command: []string{"true"}, SSHAgent: &sandbox.SSHAgent{Hosts: []string{"@github"}, Confirm: true}},
		{Command: []string{"true"}, Net: sandbox.NetNone, Ask: true, SSHAgent: &sandbox.SSHAgent{Hosts: []string{"@github"}, Confirm: true}},
	} {
		sb, err := sandbox.Start(context.Background(), spec)
		if err == nil {
			sb.Wait()
			t.Fatalf("started with Confirm (Ask %v, Net %q)", spec.Ask, spec.Net)
		}
		if !strings.Contains(err.Error(), "Confirm") || !strings.Contains(err.Error(), "Spec.Ask") {
			t.Errorf("error %v", err)
		}
	}
}
