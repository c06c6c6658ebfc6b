package main

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/sshagent"
)

// startSSHAgent serves --ssh-agent's agent (backed by the caller's
// SSH_AUTH_SOCK, never passed inside) and adds to opts what shows it
// inside: the socket's bind, the known_hosts and ssh_config files, the
// environment, and, under a domain allowlist, each host's port.
func startSSHAgent(cfg sshagent.Config, opts *plan.Options, stderr io.Writer) (*sshagent.Server, error) {
	cfg.Report = func(s string) { fmt.Fprintln(stderr, "claude-sandbox:", s) }
	// x/crypto's ServeAgent logs every failed request with the standard
	// logger, which nothing else in this program uses: the agent reports
	// its refusals itself, once, in this program's words.
	log.SetOutput(io.Discard)
	p, err := sshagent.NewPolicy(cfg)
	if err != nil {
		return nil, err
	}
	srv, err := sshagent.Listen(p, os.Getenv("SSH_AUTH_SOCK"))
	if err != nil {
		return nil, err
	}
	srv.Show(opts)
	return srv, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
