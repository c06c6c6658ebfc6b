package testutil

import (
	"net"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh/agent"
)

// ServeAgent serves a as an SSH agent on a Unix socket in a temporary
// directory of t's (a stand-in for the caller's SSH_AUTH_SOCK) until t
// ends, and returns the socket's path.
func ServeAgent(t testing.TB, a agent.Agent) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "backing.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = agent.ServeAgent(a, c); c.Close() }()
		}
	}()
	return sock
}
