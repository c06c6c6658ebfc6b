package testutil

import (
	"os/exec"
	"syscall"
	"testing"
)

// The guard knows a jailed launch on the test's own network from the
// command line, and lets through the ones in a namespace of the test's
// own or without the jail.
func TestJailOnTestNetwork(t *testing.T) {
	const bin = "/var/tmp/claude-sandbox-test-bin-1/claude-sandbox"
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{bin, "run", "--", "/bin/true"}, true},
		{[]string{bin, "run", "--allow-ip", "10.1.2.3", "--", "/bin/true"}, true},
		{[]string{bin, "run", "--net=jail", "--", "/bin/true"}, true},
		{[]string{bin, "run", "--net=none", "--net=jail", "--", "/bin/true"}, true},
		{[]string{bin, "run", "--net", "jail", "--", "/bin/true"}, true},
		{[]string{"unshare", "--mount", "--propagation", "private", "sh", "-c", "mount x && exec " + bin + " run -- true"}, true},
		{[]string{"unshare", "--user", "--map-root-user", "sh", "-c", "exec " + bin + " run -- true"}, true},
		{[]string{"sh", "-c", "exec " + bin + " run --allow-domain a.test -- true"}, true},

		{[]string{bin, "run", "--net=none", "--", "/bin/true"}, false},
		{[]string{bin, "run", "--net=host", "--", "/bin/true"}, false},
		{[]string{bin, "run", "--net", "none", "--", "/bin/true"}, false},
		{[]string{bin, "run", "--net=jail", "--net=none", "--", "/bin/true"}, false},
		{[]string{bin, "run", "--", "/bin/sh", "-c", "echo --net=none"}, true},
		{[]string{bin, "plan", "--json", "--", "true"}, false},
		{[]string{bin, "install", "--prefix", "/x"}, false},
		{[]string{"ip", "netns", "exec", "cs-host-1", bin, "run", "--", "/bin/true"}, false},
		{[]string{"ip", "netns", "exec", "cs-host-1", "sh", "-c", "exec \"$@\"", "sh", bin, "run", "--", "true"}, false},
		{[]string{"unshare", "--net", bin, "run", "--", "/bin/true"}, false},
		{[]string{"unshare", "-rn", "sh", "-c", "exec " + bin + " run -- true"}, false},
		{[]string{"unshare", "--net", "sh", "-c", "ip link add v0 type veth && exec " + bin + " run -- /bin/echo started"}, false},
		{[]string{"sh", "-c", "exec " + bin + " run --net=none -- true"}, false},
		{[]string{"/bin/echo", "claude-sandbox"}, false},
	} {
		if got := JailOnTestNetwork(c.argv); got != c.want {
			t.Errorf("%q: %v, want %v", c.argv, got, c.want)
		}
	}
}

// A jailed launch on the test's own network fails the test before it
// starts; started from a thread in another namespace it is let through.
func TestCheckNetSafe(t *testing.T) {
	cmd := exec.Command("/nonexistent/claude-sandbox", "run", "--", "/bin/true")
	ft := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		CheckNetSafe(ft, cmd)
	}()
	if !ft.failed {
		t.Error("a jailed launch on the test's own network was not refused")
	}
	ft = &fakeTB{TB: t}
	CheckNetSafe(ft, exec.Command("/nonexistent/claude-sandbox", "run", "--net=none", "--", "/bin/true"))
	if ft.failed {
		t.Error("a launch with --net=none was refused")
	}
	own := exec.Command("/nonexistent/claude-sandbox", "run", "--", "/bin/true")
	own.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	ft = &fakeTB{TB: t}
	CheckNetSafe(ft, own)
	if ft.failed {
		t.Error("a jailed launch cloned into a network namespace of its own was refused")
	}
}

type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}
