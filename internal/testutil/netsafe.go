package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The network safety rule of the project's tests: a test sends packets
// only inside network namespaces it created itself, never to the
// machine's network or resolver. A jailed sandbox (claude-sandbox run
// with --net=jail, the default) relays what the sandbox sends, and asks
// the resolver /etc/resolv.conf names for the NAT64 prefix before the
// sandbox's first IPv6 flow, so it must start inside such a namespace: a lab's (`ip netns
// exec`, InNetns), or one of `unshare --net`.

// startNetns is the network namespace the test process started in.
var startNetns, _ = os.Readlink("/proc/self/ns/net")

// CheckNetSafe fails the test when cmd would start claude-sandbox's egress
// jail in the test process's own network namespace: a `claude-sandbox
// run` (directly or in a shell script argument) without --net=none or
// --net=host, not under `ip netns exec` or `unshare --net`, not cloned
// into a new network namespace (SysProcAttr.Cloneflags), started from a
// thread that is not in another namespace (InNetns). Run calls it; call
// it before a cmd.Start of a launcher. It looks at the command line only:
// programs that start the jail through the Go API (embedding programs)
// and the shadow `claude` are the caller's to put in a lab.
func CheckNetSafe(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	if !JailOnTestNetwork(cmd.Args) {
		return
	}
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Cloneflags&syscall.CLONE_NEWNET != 0 {
		return // started in a network namespace of its own
	}
	if cur, err := os.Readlink("/proc/thread-self/ns/net"); err == nil && startNetns != "" && cur != startNetns {
		return // started from a thread in another namespace (InNetns)
	}
	t.Fatalf("network safety: %s would start the egress jail (--net=jail, the default) on the machine's network; "+
		"run it in a lab network (lab.jailCmd, lab.hostCmd, `ip netns exec`, InNetns) or `unshare --net`, or pass --net=none", cmd)
}

// JailOnTestNetwork reports whether argv runs `claude-sandbox run` in the
// jail's mode without a network namespace switch (`ip netns exec`,
// `unshare --net`) before it. It knows the launcher by its name
// (claude-sandbox, what Build makes), as an argument of its own or inside
// a shell script argument ("... claude-sandbox run ...").
func JailOnTestNetwork(argv []string) bool {
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case filepath.Base(a) == "ip" && i+2 < len(argv) && argv[i+1] == "netns" && argv[i+2] == "exec":
			return false
		case filepath.Base(a) == "unshare":
			for _, o := range argv[i+1:] {
				if !strings.HasPrefix(o, "-") || o == "--" {
					break
				}
				if o == "--net" || strings.HasPrefix(o, "--net=") || (!strings.HasPrefix(o, "--") && strings.ContainsRune(o, 'n')) {
					return false
				}
			}
		case filepath.Base(a) == "claude-sandbox" && i+1 < len(argv) && argv[i+1] == "run":
			return jailMode(argv[i+2:])
		case strings.Contains(a, "claude-sandbox run"):
			_, rest, _ := strings.Cut(a, "claude-sandbox run")
			return jailMode(strings.Fields(rest))
		}
	}
	return false
}

// jailMode reports whether run's options (up to "--") leave the network
// in the jail's mode: the last --net wins.
func jailMode(opts []string) bool {
	jail := true
	for i, o := range opts {
		if o == "--" {
			break
		}
		v, ok := strings.CutPrefix(o, "--net=")
		if !ok && o == "--net" && i+1 < len(opts) {
			v, ok = opts[i+1], true
		}
		if ok {
			v = strings.Trim(v, `'"`)
			jail = v != "none" && v != "host"
		}
	}
	return jail
}
