package integration

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// --allow-host-port: a server on the lab host's loopback (the loopback of
// the network namespace the test made and runs the launcher in, never the
// machine's) is reached on its allowed port through the jail's gateway
// and through host.internal, TCP and UDP; the same server's other ports,
// the other protocol, and 127.0.0.1 itself stay refused at once, and the
// refusals are recorded.
func TestReachHostPort(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.echoTCP(l.host, "127.0.0.1:8081")
		l.echoUDP(l.host, "127.0.0.1:5353")
		l.echoUDP(l.host, "127.0.0.1:5354")
		l.echoUDP(l.host, "127.0.0.1:8080")
		allow := []string{"--allow-host-port", "8080", "--allow-host-port", "5353/udp"}
		for _, c := range [][]string{
			{"tcp", labGateway + ":8080"},
			{"tcp", "host.internal:8080"},
			{"udp", labGateway + ":5353"},
			{"udp", "host.internal:5353"},
		} {
			if got, r := l.probeIn(uid, allow, c...); got != "ok" {
				t.Errorf("%v with %v: %s, want ok (%v)", c, allow, got, r)
			}
		}
		dir := testutil.MkdirFor(t, uid)
		log := dir + "/blocked.jsonl"
		withLog := append([]string{"--log-blocked", log}, allow...)
		for _, c := range [][]string{
			{"tcp", labGateway + ":8081"},
			{"tcp", "host.internal:8081"},
			{"udp", labGateway + ":5354"},
			{"udp", labGateway + ":8080"}, // allowed for TCP only
			{"tcp", labGateway + ":5353"}, // allowed for UDP only
			{"tcp", "127.0.0.1:8080"},
		} {
			if got, r := l.probeIn(uid, withLog, c...); !blockedAtOnce(got) {
				t.Errorf("%v with %v: %s, want an immediate refusal (%v)", c, allow, got, r)
			}
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"tcp","dst":"` + labGateway + `:8081"`, `"udp","dst":"` + labGateway + `:5354"`, `"udp","dst":"` + labGateway + `:8080"`, `"tcp","dst":"` + labGateway + `:5353"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("block log %q lacks %s", b, want)
			}
		}
		// Without the option, the gateway's ports are all refused.
		if got, r := l.probeIn(uid, nil, "tcp", labGateway+":8080"); !blockedAtOnce(got) {
			t.Errorf("tcp %s:8080 without --allow-host-port: %s (%v)", labGateway, got, r)
		}
		// The exit summary names the opening.
		_, r := l.probeIn(uid, allow, "tcp", labGateway+":8080")
		if !strings.Contains(r.Stderr, "host loopback port 8080/tcp, 5353/udp") || !strings.Contains(r.Stderr, labGateway) {
			t.Errorf("exit summary %q does not name the opening", r.Stderr)
		}
	})
}

// --allow-ip and --allow-cidr refuse loopback at parse time, pointing to
// --allow-host-port: inside the jail loopback is the sandbox's own, so
// the entry would otherwise do nothing, silently.
func TestReachAllowLoopbackRefused(t *testing.T) {
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, args := range [][]string{
		{"--allow-ip", "127.0.0.1"},
		{"--allow-ip", "::1"},
		{"--allow-ip", "::ffff:127.0.0.1"},
		{"--allow-cidr", "127.0.0.0/8"},
		{"--allow-cidr", "127.1.0.0/16"},
	} {
		argv := append(append([]string{"run"}, args...), "--", "/bin/echo", "started")
		r := testutil.Run(t, testutil.As(0, nil, append([]string{bin}, argv...)...))
		if r.Code != 2 || strings.Contains(r.Stdout, "started") || !strings.Contains(r.Stderr, "--allow-host-port") || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
			t.Errorf("%v: %v, want exit 2, one line naming --allow-host-port", args, r)
		}
	}
}

// devCmd runs claude-sandbox with args as uid in a private mount
// namespace where dir is a fresh tmpfs (devices allowed) holding two
// device nodes the test makes: null2 (1,3, a /dev/null twin) and zero2
// (1,5), mode 0666. Nothing is created on the machine's own /dev.
func devCmd(t *testing.T, uid int, dir, bin string, args ...string) *exec.Cmd {
	inner := fmt.Sprintf("mount -t tmpfs -o mode=0755 none %[1]s && mknod -m 666 %[1]s/null2 c 1 3 && mknod -m 666 %[1]s/zero2 c 1 5 && touch %[1]s/plain && exec setpriv --reuid=%[2]d --regid=%[2]d --clear-groups -- \"$@\"", dir, uid)
	argv := append([]string{"-m", "--propagation", "private", "sh", "-c", inner, "sh", bin}, args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	cmd.Dir = "/"
	return cmd
}

// --dev-bind: a device node bound into the private /dev is usable (read
// and write), as root and as uid 65534; no other host device shows; the
// bound node's host inode cannot be changed from inside; a --bind of the
// same node stays unusable (nodev); a source that is no device node is
// refused before anything runs.
func TestReachDevBind(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir := testutil.MkdirFor(t, 0)
			script := `ls -A /dev | tr '\n' ' '; echo; echo data > /dev/null2 && echo wrote; head -c 4 /dev/zero2 | wc -c; chmod 600 /dev/null2 2>/dev/null && echo chmod-ok; ls -l /dev/null2 | cut -c1-10`
			r := testutil.Run(t, devCmd(t, uid, dir, bin, "run", "--net=none", "--dev-bind", dir+"/null2", "/dev/null2", "--dev-bind-try", dir+"/zero2", "/dev/zero2", "--dev-bind-try", dir+"/missing", "/dev/missing", "--", "sh", "-c", script))
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			if r.Code != 0 || len(lines) < 4 {
				t.Fatalf("run: %v", r)
			}
			want := "fd full null null2 ptmx pts random shm stderr stdin stdout tty urandom zero zero2"
			if strings.TrimSpace(lines[0]) != want {
				t.Errorf("/dev inside: %q, want %q", lines[0], want)
			}
			if lines[1] != "wrote" || strings.TrimSpace(lines[2]) != "4" {
				t.Errorf("the bound nodes do not work: %q (%v)", lines, r)
			}
			if slices.Contains(lines, "chmod-ok") || lines[len(lines)-1] != "crw-rw-rw-" {
				t.Errorf("the host's node was changed from inside: %q", lines)
			}
			// A plain --bind of the node keeps devices off.
			r = testutil.Run(t, devCmd(t, uid, dir, bin, "run", "--net=none", "--bind", dir+"/null2", "/tmp/null2", "--", "sh", "-c", "echo x > /tmp/null2 && echo wrote"))
			if strings.Contains(r.Stdout, "wrote") {
				t.Errorf("a --bind of a device node opened it: %v", r)
			}
			// Not a device node: refused at parse time, nothing runs.
			for _, src := range []string{dir + "/plain", dir, "/etc"} {
				r = testutil.Run(t, devCmd(t, uid, dir, bin, "run", "--net=none", "--dev-bind", src, "/dev/x", "--", "echo", "started"))
				if r.Code != 2 || strings.Contains(r.Stdout, "started") || !strings.Contains(r.Stderr, "--dev-bind") {
					t.Errorf("--dev-bind %s: %v, want a refusal (exit 2)", src, r)
				}
			}
		})
	}
}
