package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
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
	opts.Late = append(opts.Late, srv.Files()...)
	opts.Served = append(opts.Served, srv.Bind())
	// After the caller's own: the caller's SSH_AUTH_SOCK never reaches
	// the command.
	opts.SetEnv = append(opts.SetEnv, srv.Env()...)
	if (opts.Net == "" || opts.Net == plan.NetJail) && len(opts.AllowDomains) > 0 {
		opts.AllowDomains = append(opts.AllowDomains, p.Endpoints()...)
	}
	return srv, nil
}

// confirmSign is --ssh-confirm's hook: each signature the agent's policy
// allows is a request of the ask mode's broker b, and waits for its
// answer.
func confirmSign(b *ask.Broker) func(sshagent.Signature) error {
	return func(s sshagent.Signature) error {
		if b == nil {
			return errors.New("the ask mode is off")
		}
		q := ask.Sign{Host: s.Host, Port: uint16(s.Port), Key: s.Key}
		if c := s.Client; c != nil {
			q.Who = &ask.Process{PID: c.PID, Argv: c.Argv}
		}
		return b.ConfirmSign(q)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
