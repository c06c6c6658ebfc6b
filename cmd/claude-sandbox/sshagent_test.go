package main

import (
	"slices"
	"testing"

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
	cfg.OSC52 = true
	x := shadowExtras(cfg, "/home/u", "")
	if x.sshAgent == nil || !slices.Equal(x.sshAgent.Hosts, cfg.SSHAgent) || !slices.Equal(x.sshAgent.Keys, cfg.SSHKey) ||
		!slices.Equal(x.sshAgent.HostKeys, cfg.SSHHostKey) || !x.osc52 {
		t.Fatalf("extras %+v", x)
	}
	if !slices.Equal(x.sshAgent.KnownHosts, []string{"/home/u/.ssh/known_hosts", "/home/u/.ssh/known_hosts2"}) {
		t.Errorf("known_hosts %q", x.sshAgent.KnownHosts)
	}
}
