package sshagent

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh/agent"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// nestedDialEnv names the agent socket a re-executed test binary lists
// keys through (see TestMain), from the user namespace it was started in.
const nestedDialEnv = "SSHAGENT_TEST_NESTED_DIAL"

func TestMain(m *testing.M) {
	if sock := os.Getenv(nestedDialEnv); sock != "" {
		c, err := net.Dial("unix", sock)
		if err == nil {
			_, err = agent.NewClient(c).List()
			c.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// listFromNewUserNS lists the agent's keys from a process in a user
// namespace of its own, nested in this test's.
func listFromNewUserNS(t *testing.T, sock string) error {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nestedDialEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// A tool of the sandbox that makes a user namespace of its own (unshare,
// bwrap, a nested claude-sandbox) is still the sandbox: the agent serves
// a peer in a namespace nested in the sandbox's. A peer in a namespace
// beside it (another sandbox) is refused, nested or not.
func TestServerPeerNestedNamespace(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	p.report = func(string) {}
	s, err := Listen(p, testutil.ServeAgent(t, l.backing))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	own, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	s.SetSandboxNS(func() string { return own })
	if err := listFromNewUserNS(t, s.Socket); err != nil {
		t.Errorf("a peer in a user namespace nested in the sandbox's was refused: %v", err)
	}
	s.SetSandboxNS(func() string { return "user:[1]" })
	if err := listFromNewUserNS(t, s.Socket); err == nil {
		t.Error("a peer nested in another user namespace than the sandbox's was served")
	}
}
