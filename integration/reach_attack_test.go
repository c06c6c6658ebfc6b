package integration

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// lockedBuf is a launcher's stderr, read while it runs.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// delayedServer starts pubserve on port 8000 inside the jail only once
// start is called, with opts (the --publish flags) on the launcher, and
// waits for the sandbox to be up.
func (l *lab) delayedServer(t *testing.T, uid int, opts ...string) (start func(), stderr *lockedBuf) {
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	srv := testutil.Build(t, "./integration/pubserve")
	argv := append(append([]string{"run"}, opts...), "--", "sh", "-c", `echo up; read x; exec "$0" 8000`, srv)
	cmd := l.jailCmd(uid, bin, argv...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &lockedBuf{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := bufio.NewReader(outPipe)
	if line, err := out.ReadString('\n'); line != "up\n" {
		t.Fatalf("the sandbox did not start: %q %v; stderr %s", line, err, stderr.String())
	}
	return func() {
		if _, err := in.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		if line, err := out.ReadString('\n'); line != "ready\n" {
			t.Fatalf("the server inside did not start: %q %v; stderr %s", line, err, stderr.String())
		}
	}, stderr
}

// unanswered sends msg on u and expects no answer within wait.
func unanswered(t *testing.T, u net.Conn, msg string, wait time.Duration) {
	t.Helper()
	_ = u.SetDeadline(time.Now().Add(wait))
	if _, err := u.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	var ne net.Error
	if n, err := u.Read(buf); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%q was answered, want no answer: %q %v", msg, buf[:n], err)
	}
}

// A UDP client of a published port whose datagram finds nothing
// listening inside (the sandbox's kernel answers port unreachable, which
// gVisor's socket toward the sandbox reports at its next write) is
// answered at its first datagram once the server starts: the launcher
// sends again the datagram the reported refusal stopped.
func TestReachPublishUDPAfterRefusal(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		start, stderr := l.delayedServer(t, uid, "--publish", "18054:8000/udp")
		u, err := dialIn(t, l.host, "udp", "127.0.0.1:18054")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		unanswered(t, u, "early", time.Second)
		start()
		if err := echoOver(u, "late"); err != nil {
			t.Errorf("the first datagram after a refusal was lost: %v; stderr %s", err, stderr.String())
		}
	})
}

// A refusal from inside that the launcher's reader meets first (it comes
// back to read after its idle deadline while the client is active) must
// not leave the client with a closed socket for good: its next datagram
// opens a new one and is answered.
func TestReachPublishUDPReaderRefused(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		start, stderr := l.delayedServer(t, uid, "--publish", "18055:8000/udp", "--udp-idle-timeout", "2s")
		u, err := dialIn(t, l.host, "udp", "127.0.0.1:18055")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		// The first datagram is refused inside; the second write
		// reports it (and is resent, refused again), so a refusal is
		// pending when the reader's 2s deadline passes with the
		// client active less than 2s ago.
		unanswered(t, u, "early1", 500*time.Millisecond)
		unanswered(t, u, "early2", 2500*time.Millisecond)
		start()
		if err := echoOver(u, "late"); err != nil {
			t.Errorf("a client whose socket the reader closed is never answered again: %v; stderr %s", err, stderr.String())
		}
	})
}

// The one allowed host loopback port is the only one reached, whatever
// spelling of the gateway or of loopback the sandbox tries: the mapped
// and NAT64 forms of the gateway and of 127.0.0.1, the other protocol,
// port 0 (TCP and UDP servers on the host's loopback on the other ports
// wait to be found).
func TestReachHostPortAliases(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.addIPv6()
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.echoTCP(l.host, "127.0.0.1:8081")
		l.echoTCP(l.host, "[::1]:8081")
		l.echoUDP(l.host, "127.0.0.1:8080")
		l.echoUDP(l.host, "127.0.0.1:8081")
		opts := []string{"--allow-host-port", "8080"}
		if got, r := l.probeIn(uid, opts, "tcp", labGateway+":8080"); got != "ok" {
			t.Fatalf("control: the allowed port: %s (%v)", got, r)
		}
		for _, c := range [][]string{
			{"tcp", labGateway + ":8081"},
			{"tcp", "[::ffff:" + labGateway + "]:8081"},
			{"tcp", "[64:ff9b::" + labGateway + "]:8081"},
			{"tcp", "[64:ff9b::7f00:1]:8080"},
			{"tcp", "[64:ff9b::7f00:1]:8081"},
			{"tcp", "[::ffff:127.0.0.1]:8080"},
			{"tcp", "127.0.0.2:8080"},
			{"tcp", labGateway + ":0"},
			{"udp", labGateway + ":8080"},
			{"udp", labGateway + ":8081"},
			{"udp", "[64:ff9b::7f00:1]:8080"},
		} {
			if got, r := l.probeIn(uid, opts, c...); got == "ok" {
				t.Errorf("%v reached the host's loopback: %v", c, r)
			}
		}
		// The generated /etc/hosts (host.internal) is not the sandbox's
		// to change.
		if got, r := l.probeIn(uid, opts, "rewrite", "/etc/hosts"); got == "ok" {
			t.Errorf("/etc/hosts is writable inside: %v", r)
		}
	})
}

// Around a --dev-bind from inside: no new device node can be made (in
// /dev, in /tmp, or over the bound one), the bound node cannot be
// renamed, removed or hard-linked elsewhere, and a bind of it made inside
// a nested mount namespace (root only) gives nothing more than the node
// itself. Read-only does not stop writes to the device: that is the
// device's own permission (documented in the threat model).
func TestReachDevBindAround(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir := testutil.MkdirFor(t, 0)
			script := `mknod /dev/sdx b 8 0 2>/dev/null && echo mknod-dev; mknod /tmp/sdx b 8 0 2>/dev/null && echo mknod-tmp; ` +
				`mknod /tmp/mem c 1 1 2>/dev/null && head -c1 /tmp/mem >/dev/null 2>&1 && echo mem-open; ` +
				`mv /dev/null2 /dev/null9 2>/dev/null && echo moved; rm -f /dev/null2 2>/dev/null; test -c /dev/null2 || echo removed; ` +
				`ln /dev/null2 /tmp/hard 2>/dev/null && echo linked; ` +
				`echo data > /dev/null2 && echo wrote; echo done`
			r := testutil.Run(t, devCmd(t, uid, dir, bin, "run", "--net=none", "--dev-bind", dir+"/null2", "/dev/null2", "--", "sh", "-c", script))
			if !strings.Contains(r.Stdout, "done") {
				t.Fatalf("run: %v", r)
			}
			for _, bad := range []string{"mknod-dev", "mknod-tmp", "mem-open", "moved", "removed", "linked"} {
				if strings.Contains(r.Stdout, bad+"\n") {
					t.Errorf("%s got through: %q", bad, r.Stdout)
				}
			}
			if !strings.Contains(r.Stdout, "wrote\n") {
				t.Errorf("the bound node does not take writes (the documented behaviour changed): %q", r.Stdout)
			}
		})
	}
}

// A flood of UDP clients on a published port holds at most 512 of them:
// the 513th is dropped with a warning, and once the others are idle past
// --udp-idle-timeout they are forgotten and a new client is served.
func TestReachPublishUDPClientCap(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		start, stderr := l.delayedServer(t, uid, "--publish", "18056:8000/udp", "--udp-idle-timeout", "3s")
		start()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := 0; i < 512; i++ {
			u, err := dialIn(t, l.host, "udp", "127.0.0.1:18056")
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, u)
			if err := echoOver(u, fmt.Sprint("c", i)); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
		}
		u, err := dialIn(t, l.host, "udp", "127.0.0.1:18056")
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, u)
		unanswered(t, u, "one too many", time.Second)
		if !strings.Contains(stderr.String(), "512 UDP clients are relayed already") {
			t.Errorf("no warning for the client over the cap: %s", stderr.String())
		}
		// Idle clients are forgotten: the same client is served later.
		var last error
		for try := 0; try < 10; try++ {
			if last = echoOver(u, "later"); last == nil {
				break
			}
		}
		if last != nil {
			t.Errorf("a client after the others went idle: %v", last)
		}
	})
}

// A flood of TCP connections on a published port holds no more of them
// than the relay's memory budget holds (issue 34): each connection's
// gVisor buffers (144 KiB) are in the 16 MiB budget, so at most 113 are
// relayed at once, below the port's own cap of 1024 (before, all 1024
// were, each with up to 2 MiB of buffers outside the budget). The next is
// reset with a warning, and one closing frees room for a new one.
func TestReachPublishTCPConnCap(t *testing.T) {
	const most = (16 << 20) / (144 << 10)
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		start, stderr := l.delayedServer(t, uid, "--publish", "18057:8000")
		start()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := 0; i < 1025; i++ {
			// The reset may come before the dial returns.
			c, err := dialIn(t, l.host, "tcp", "127.0.0.1:18057")
			if err == nil {
				err = echoOver(c, fmt.Sprint("c", i))
				if err != nil {
					c.Close()
				}
			}
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		if len(conns) == 0 || len(conns) > most {
			t.Fatalf("%d connections relayed at once, want 1 to %d (what the relay's memory budget holds)", len(conns), most)
		}
		t.Logf("%d connections relayed at once", len(conns))
		// The warning comes through the launcher's stderr, after the reset.
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "memory budget is spent"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("no warning for the connection over the budget: %s", stderr.String())
				break
			}
		}
		conns[0].Close()
		var last error
		for try := 0; try < 20; try++ {
			c, err := dialIn(t, l.host, "tcp", "127.0.0.1:18057")
			if last = err; err == nil {
				last = echoOver(c, "later")
				c.Close()
			}
			if last == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if last != nil {
			t.Errorf("a connection after one closed: %v", last)
		}
	})
}

// Every packet to the gateway gets the same answer with a port published
// (gVisor's path) as without (the relay's): the published port numbers
// themselves on the gateway, other TCP and UDP ports, ping.
func TestReachPublishGatewaySameVerdict(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.host, "127.0.0.1:8081")
		l.echoTCP(l.host, "127.0.0.1:28080")
		l.echoTCP(l.host, "127.0.0.1:8000")
		l.echoUDP(l.host, "127.0.0.1:5354")
		l.echoUDP(l.host, "127.0.0.1:28053")
		l.echoUDP(l.host, "127.0.0.1:8000")
		probes := [][]string{
			{"tcp", labGateway + ":8081"}, {"tcp", labGateway + ":18080"}, {"tcp", labGateway + ":28080"}, {"tcp", labGateway + ":8000"},
			{"udp", labGateway + ":5354"}, {"udp", labGateway + ":18053"}, {"udp", labGateway + ":28053"}, {"udp", labGateway + ":8000"},
			{"ping", labGateway},
		}
		// Host ports 18080 and 18053 are published; on the host's
		// loopback, servers wait on the same numbers + 10000 and on 8000.
		pub := []string{"--publish", "18080:8000", "--publish", "18053:8000/udp"}
		for _, p := range probes {
			without, r0 := l.probeIn(uid, nil, p...)
			with, r1 := l.probeIn(uid, pub, p...)
			if with != without || with == "ok" && p[0] != "ping" {
				t.Errorf("%v: %q with a published port, %q without (%v / %v)", p, with, without, r1, r0)
			}
		}
	})
}

// "Directories below /dev" is the path the kernel walks, not the path as
// written: a symlink below /dev (world-writable /dev/shm holds anyone's)
// to a directory elsewhere is refused at the mount, so that tree's nodes
// do not open inside.
func TestReachDevBindDirSymlink(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir := testutil.MkdirFor(t, 0)
			// In a private mount namespace: a fresh /dev/shm (the
			// machine's is untouched) with a link to a tree that holds
			// a device node.
			inner := fmt.Sprintf("mount -t tmpfs -o mode=0755 none %[1]s && mkdir %[1]s/tree && mknod -m 666 %[1]s/tree/null2 c 1 3 && mount -t tmpfs -o mode=1777,nodev none /dev/shm && ln -s %[1]s/tree /dev/shm/link && exec setpriv --reuid=%[2]d --regid=%[2]d --clear-groups -- \"$@\"", dir, uid)
			cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh", bin, "run", "--net=none", "--dev-bind", "/dev/shm/link", "/dev/x", "--", "sh", "-c", "echo started; echo data > /dev/x/null2 && echo wrote")
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
			cmd.Dir = "/"
			r := testutil.Run(t, cmd)
			if strings.Contains(r.Stdout, "wrote") || strings.Contains(r.Stdout, "started") {
				t.Errorf("a directory reached through a symlink below /dev was bound with devices on: %v", r)
			}
			if !strings.Contains(r.Stderr, "symlink") {
				t.Errorf("the refusal does not say why: %v", r)
			}
		})
	}
}

// TestReachDevBindDirSymlinkPlan: `plan` refuses a directory --dev-bind
// source reached through a symlink below /dev, as `run` does, with the same
// message and exit status (one check, plan.Build's mounts.CheckDevDir,
// serves both; the mount checks again). The set-up is
// TestReachDevBindDirSymlink's: a private /dev/shm with a link to a tree
// holding a device node, and a tmpfs at /dev/shm/real that plan admits.
func TestReachDevBindDirSymlinkPlan(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			launch := func(verb string, args ...string) testutil.Result {
				dir := testutil.MkdirFor(t, 0)
				inner := fmt.Sprintf("mount -t tmpfs -o mode=0755 none %[1]s && mkdir %[1]s/tree && mknod -m 666 %[1]s/tree/null2 c 1 3 && mount -t tmpfs -o mode=1777,nodev none /dev/shm && ln -s %[1]s/tree /dev/shm/link && mkdir /dev/shm/real && mount -t tmpfs -o mode=0755 none /dev/shm/real && exec setpriv --reuid=%[2]d --regid=%[2]d --clear-groups -- \"$@\"", dir, uid)
				argv := append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh", bin, verb}, args...)
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
				cmd.Dir = "/"
				return testutil.Run(t, cmd)
			}
			// A directory below /dev by its real path is planned.
			if ok := launch("plan", "--json", "--net=none", "--dev-bind", "/dev/shm/real", "/dev/x", "--", "true"); ok.Code != 0 || !strings.Contains(ok.Stdout, "/dev/shm/real") {
				t.Errorf("plan refused a directory below /dev given by its real path: %v", ok)
			}
			for _, flag := range []string{"--dev-bind", "--dev-bind-try"} {
				p := launch("plan", "--json", "--net=none", flag, "/dev/shm/link", "/dev/x", "--", "true")
				if p.Code == 0 || strings.Contains(p.Stdout, "dev-bind") {
					t.Errorf("plan %s accepted a directory reached through a symlink below /dev: %v", flag, p)
				}
				if !strings.Contains(p.Stderr, "claude-sandbox plan: "+flag+": source /dev/shm/link: ") || !strings.Contains(p.Stderr, "symlink") {
					t.Errorf("plan %s: the refusal does not say why: %v", flag, p)
				}
				r := launch("run", "--net=none", flag, "/dev/shm/link", "/dev/x", "--", "sh", "-c", "echo started")
				if strings.Contains(r.Stdout, "started") {
					t.Errorf("run %s started with a directory reached through a symlink below /dev: %v", flag, r)
				}
				if r.Code != p.Code || strings.Replace(r.Stderr, "claude-sandbox run: ", "claude-sandbox plan: ", 1) != p.Stderr {
					t.Errorf("%s: run and plan refuse differently:\nplan: %v\nrun: %v", flag, p, r)
				}
			}
		})
	}
}
