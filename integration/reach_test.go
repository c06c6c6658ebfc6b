package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
		// Servers on the host's ::1 only (a "localhost" that resolves
		// to ::1 first): reached too.
		l.echoTCP(l.host, "[::1]:8082")
		l.echoUDP(l.host, "[::1]:5355")
		allow := []string{"--allow-host-port", "8080", "--allow-host-port", "5353/udp", "--allow-host-port", "8082", "--allow-host-port", "5355/udp"}
		for _, c := range [][]string{
			{"tcp", labGateway + ":8080"},
			{"tcp", "host.internal:8080"},
			{"udp", labGateway + ":5353"},
			{"udp", "host.internal:5353"},
			{"tcp", "host.internal:8082"},
			{"udp", "host.internal:5355"},
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
		if !strings.Contains(r.Stderr, "host loopback port 8080/tcp, 5353/udp, 8082/tcp, 5355/udp") || !strings.Contains(r.Stderr, labGateway) {
			t.Errorf("exit summary %q does not name the opening", r.Stderr)
		}
	})
}

// --allow-ip and --allow-cidr refuse loopback at parse time, pointing to
// --allow-host-port: inside the jail loopback is the sandbox's own, so
// the entry would otherwise do nothing, silently. The unspecified
// addresses (0.0.0.0, ::, and ranges holding them), which a host-side
// connection takes to the host's loopback, are refused the same way, and
// so are the NAT64 forms of both (64:ff9b::7f00:1, 64:ff9b::, ranges
// holding them; accepted before). In the default mode (the jail), so in a
// network namespace of the test's own (unshare --net, which execs in the
// same process): were a refusal to go missing, the jail that started
// would send nothing out of it.
func TestReachAllowLoopbackRefused(t *testing.T) {
	testutil.NeedsRoot(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, args := range [][]string{
		{"--allow-ip", "127.0.0.1"},
		{"--allow-ip", "::1"},
		{"--allow-ip", "::ffff:127.0.0.1"},
		{"--allow-cidr", "127.0.0.0/8"},
		{"--allow-cidr", "127.1.0.0/16"},
		{"--allow-ip", "0.0.0.0"},
		{"--allow-ip", "::"},
		{"--allow-ip", "::ffff:0.0.0.0"},
		{"--allow-cidr", "0.0.0.0/8"},
		{"--allow-cidr", "0.0.0.0/31"},
		{"--allow-ip", "64:ff9b::7f00:1"},
		{"--allow-ip", "64:ff9b::"},
		{"--allow-cidr", "64:ff9b::7f00:0/104"},
		{"--allow-cidr", "64:ff9b::/96"},
	} {
		argv := append(append([]string{"run"}, args...), "--", "/bin/echo", "started")
		r := testutil.Run(t, testutil.As(0, nil, append([]string{"unshare", "--net", bin}, argv...)...))
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
			// A node on a nodev mount cannot open inside: refused
			// before the command runs, saying why.
			nodev := testutil.MkdirFor(t, 0)
			inner := fmt.Sprintf("mount -t tmpfs -o mode=0755,nodev none %[1]s && mknod -m 666 %[1]s/null3 c 1 3 && exec setpriv --reuid=%[2]d --regid=%[2]d --clear-groups -- \"$@\"", nodev, uid)
			cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh", bin, "run", "--net=none", "--dev-bind", nodev+"/null3", "/dev/null3", "--", "echo", "started")
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
			cmd.Dir = "/"
			r = testutil.Run(t, cmd)
			if r.Code != 125 || strings.Contains(r.Stdout, "started") || !strings.Contains(r.Stderr, "nodev mount") {
				t.Errorf("--dev-bind from a nodev mount: %v, want 125 naming nodev", r)
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

// publishRun starts pubserve in the jail with opts, waits for "ready",
// and returns the launcher's command; closing stdin ends the server.
func (l *lab) publishRun(t *testing.T, uid int, opts ...string) (*exec.Cmd, io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	srv := testutil.Build(t, "./integration/pubserve")
	argv := append(append([]string{"run"}, opts...), "--", srv, "8000")
	cmd := l.jailCmd(uid, bin, argv...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the server inside did not start: %q %v; stderr %s", line, err, stderr.String())
	}
	return cmd, in, &stderr
}

// dialIn opens a connection from namespace ns.
func dialIn(t *testing.T, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(ns, func() error {
		var err error
		c, err = net.DialTimeout(network, addr, 5*time.Second)
		return err
	})
	return c, err
}

// echoOver sends msg on c (a line, or a datagram) and checks the answer.
func echoOver(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return err
	}
	buf := make([]byte, 256)
	n, err := io.ReadAtLeast(c, buf, len("echo:"+msg+"\n"))
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != "echo:"+msg+"\n" {
		return fmt.Errorf("answer %q", got)
	}
	return nil
}

// listenFree reports whether addr can be listened on in namespace ns.
func listenFree(ns, network, addr string) error {
	return inNetns(ns, func() error {
		if network == "udp" {
			pc, err := net.ListenPacket("udp", addr)
			if err == nil {
				pc.Close()
			}
			return err
		}
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
		}
		return err
	})
}

// --publish: a server inside the jail is reached from the lab host on the
// published ports (TCP, UDP, connections at once); the default host
// address is 127.0.0.1, so the lab's other namespace cannot reach it
// unless 0.0.0.0 is written; the port is freed when the sandbox exits and
// when the launcher is SIGKILLed; a port in use fails the launch before
// the command runs.
func TestReachPublish(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		cmd, stdin, stderr := l.publishRun(t, uid, "--publish", "18080:8000", "--publish", "18053:8000/udp")
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		var conns []net.Conn
		for i := 0; i < 20; i++ {
			c, err := dialIn(t, l.host, "tcp", "127.0.0.1:18080")
			if err != nil {
				t.Fatalf("connect to the published port: %v (%s)", err, stderr)
			}
			conns = append(conns, c)
		}
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				for j := 0; j < 5; j++ {
					if err := echoOver(c, fmt.Sprintf("conn %d line %d", i, j)); err != nil {
						errs <- fmt.Errorf("tcp conn %d: %v", i, err)
						return
					}
				}
			}()
		}
		for i := 0; i < 3; i++ {
			u, err := dialIn(t, l.host, "udp", "127.0.0.1:18053")
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer u.Close()
				if err := echoOver(u, fmt.Sprintf("datagram %d", i)); err != nil {
					errs <- fmt.Errorf("udp client %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// Published on 127.0.0.1 only: from the lab's world namespace the
		// host's address does not answer on it.
		if c, err := dialIn(t, l.world, "tcp", labHostAddr+":18080"); err == nil {
			c.Close()
			t.Errorf("the published port answers on %s without 0.0.0.0 written", labHostAddr)
		}
		// The sandbox exits: the port is free.
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("launcher: %v (%s)", err, stderr)
		}
		if !strings.Contains(stderr.String(), "published 127.0.0.1:18080 to the sandbox's port 8000/tcp") {
			t.Errorf("exit summary %q does not name the published port", stderr)
		}
		for _, a := range [][2]string{{"tcp", "127.0.0.1:18080"}, {"udp", "127.0.0.1:18053"}} {
			if err := listenFree(l.host, a[0], a[1]); err != nil {
				t.Errorf("%s %s after the sandbox exited: %v", a[0], a[1], err)
			}
		}

		// 0.0.0.0 written: reached from the world namespace too; then a
		// SIGKILLed launcher frees the port.
		cmd, _, stderr = l.publishRun(t, uid, "--publish", "0.0.0.0:18080:8000")
		c, err := dialIn(t, l.world, "tcp", labHostAddr+":18080")
		if err != nil {
			t.Fatalf("0.0.0.0:18080 from the world namespace: %v (%s)", err, stderr)
		}
		if err := echoOver(c, "from the world"); err != nil {
			t.Error(err)
		}
		c.Close()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if err := listenFree(l.host, "tcp", "0.0.0.0:18080"); err != nil {
			t.Errorf("0.0.0.0:18080 after SIGKILL of the launcher: %v", err)
		}

		// A server inside on 127.0.0.1 only is not reached (connections
		// arrive at the sandbox's address): the client is reset and the
		// launcher says why, once.
		bin0 := testutil.Build(t, "./cmd/claude-sandbox")
		cmd = l.jailCmd(uid, bin0, "run", "--publish", "18082:8001", "--", testutil.Build(t, "./integration/pubserve"), "8001", "127.0.0.1")
		in0, _ := cmd.StdinPipe()
		out0, _ := cmd.StdoutPipe()
		var stderr0 bytes.Buffer
		cmd.Stderr = &stderr0
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out0).ReadString('\n'); err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("loopback-only server: %q %v %s", line, err, stderr0.String())
		}
		for i := 0; i < 2; i++ {
			if c, err := dialIn(t, l.host, "tcp", "127.0.0.1:18082"); err == nil {
				if echoOver(c, "x") == nil {
					t.Error("a server on the sandbox's 127.0.0.1 answered through --publish")
				}
				c.Close()
			}
		}
		in0.Close()
		_ = cmd.Wait()
		if n := strings.Count(stderr0.String(), "must listen on 0.0.0.0"); n != 1 {
			t.Errorf("the hint for a loopback-only server appears %d times, want once: %s", n, stderr0.String())
		}

		// A host port in use: refused before the command runs.
		var busy net.Listener
		if err := inNetns(l.host, func() error {
			var err error
			busy, err = net.Listen("tcp", "127.0.0.1:18081")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		r := testutil.Run(t, l.jailCmd(uid, bin, "run", "--publish", "18081:8000", "--", "/bin/echo", "started"))
		if r.Code != 125 || strings.Contains(r.Stdout, "started") || !strings.Contains(r.Stderr, "in use") || !strings.Contains(r.Stderr, "--publish 127.0.0.1:18081:8000/tcp") {
			t.Errorf("a published port in use: %v, want 125 naming the port before anything runs", r)
		}
	})
}

// --publish needs the jail: with --net=host or --net=none it is refused
// at once, naming why.
func TestReachPublishNeedsJail(t *testing.T) {
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, n := range []string{"host", "none"} {
		r := testutil.Run(t, testutil.As(os.Geteuid(), nil, bin, "run", "--net="+n, "--publish", "18080:8000", "--", "/bin/echo", "started"))
		if r.Code != 2 || strings.Contains(r.Stdout, "started") || !strings.Contains(r.Stderr, "--publish needs --net=jail") {
			t.Errorf("--net=%s --publish: %v", n, r)
		}
	}
}

// verify inside a sandbox with every kind of opening: a line each (OPEN),
// and P32 (host loopback through the gateway) still BLOCKED with a server
// on an allowed port (8080, which it would otherwise try) and one on a
// port that is not allowed (5432).
func TestReachVerify(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.echoTCP(l.host, "127.0.0.1:5432")
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		vp := testutil.Build(t, "./integration/verifyprobe")
		dir := testutil.MkdirFor(t, 0)
		run := func(args ...string) testutil.Result {
			inner := fmt.Sprintf("mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && mount -t tmpfs -o mode=0755 none %[1]s && mknod -m 666 %[1]s/null2 c 1 3 && exec setpriv --reuid=%[2]d --regid=%[2]d --clear-groups -- \"$@\"", dir, uid)
			argv := append([]string{"netns", "exec", l.host, "sh", "-c", inner, "sh", bin, "run", "--allow-host-port", "8080", "--publish", "18080:8000", "--dev-bind", dir + "/null2", "/dev/null2", "--"}, args...)
			cmd := exec.Command("ip", argv...)
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
			cmd.Dir = "/"
			return testutil.Run(t, cmd)
		}
		r := run(vp, "openings")
		want := []string{
			"P90 OPEN host loopback port 8080/tcp: reachable at host.internal (" + labGateway + ")",
			"P91 OPEN published port 127.0.0.1:18080:8000/tcp:",
			"P92 OPEN device /dev/null2: /dev/null2 (character device 1:3)",
		}
		for _, w := range want {
			if !strings.Contains(r.Stdout, w) {
				t.Errorf("verify's openings lack %q: %v", w, r)
			}
		}
		if n := strings.Count(r.Stdout, "\n"); n != 3 {
			t.Errorf("%d opening lines, want 3: %v", n, r)
		}
		r = run(vp, "-jail", "P32")
		if !strings.HasPrefix(r.Stdout, "BLOCKED") || strings.Contains(r.Stdout, ":8080") {
			t.Errorf("P32 with 8080 allowed: %v, want BLOCKED without trying 8080", r)
		}
	})
}

// The embedding API's Spec.HostPorts: examples/embed -host-port reaches
// the lab host's loopback server at host.internal; the gateway's other
// ports stay blocked and are reported as events.
func TestReachEmbedHostPort(t *testing.T) {
	bin := testutil.Build(t, "./examples/embed")
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.echoTCP(l.host, "127.0.0.1:8081")
		dir := testutil.MkdirFor(t, uid)
		r := testutil.Run(t, l.jailCmd(uid, bin, "-dir", dir, "-dial", "host.internal:8080,"+labGateway+":8081", "-host-port", "8080"))
		if r.Code != 0 {
			t.Fatalf("examples/embed: %v", r)
		}
		for _, want := range []string{
			"inside: host.internal:8080: connected\n",
			"blocked: tcp " + labGateway + ":8081 (",
			"inside: " + labGateway + ":8081: dial tcp " + labGateway + ":8081: connect: connection refused\n",
		} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("output lacks %q:\n%v", want, r)
			}
		}
	})
}

// The shadow's configuration: allow-host-port and allow-device (a glob,
// expanded at launch) in /etc/claude-sandbox.conf reach a Claude session
// in the lab, as root and as uid 65534: the allowed host port answers at
// host.internal, another does not, and the device node the glob matched
// is usable at its own path.
func TestReachShadowConfig(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.echoTCP(l.host, "127.0.0.1:8081")
		probe := testutil.Build(t, "./integration/probe")
		devdir := testutil.MkdirFor(t, 0)
		fake := fmt.Sprintf("#!/bin/sh\necho \"allowed: $(%[1]s tcp host.internal:8080)\"\necho \"other: $(%[1]s tcp %[2]s:8081)\"\necho data > %[3]s/null2 && echo device: ok\n", probe, labGateway, devdir)
		conf := fmt.Sprintf("allow-host-port = 8080\nallow-device = %s/null*\n", devdir)
		prelude, claude := shadowHost(t, conf, fake)
		home := testutil.MkdirFor(t, uid)
		ws := home + "/project"
		must(t, os.MkdirAll(ws, 0o755))
		must(t, os.Chown(ws, uid, uid))
		env := []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin"}
		inner := fmt.Sprintf("%s && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && mount -t tmpfs -o mode=0755 none %s && mknod -m 666 %s/null2 c 1 3 && cd %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s -p x",
			prelude, devdir, devdir, ws, uid, uid, strings.Join(env, " "), claude)
		cmd := exec.Command("ip", "netns", "exec", l.host, "sh", "-c", inner)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		r := testutil.Run(t, cmd)
		for _, want := range []string{"allowed: ok\n", "device: ok\n"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("the session lacks %q: %v", want, r)
			}
		}
		if !strings.Contains(r.Stdout, "other: err:ECONNREFUSED") {
			t.Errorf("a host port that is not allowed: %v", r)
		}
		if !strings.Contains(r.Stderr, "openings: host loopback port 8080/tcp") || !strings.Contains(r.Stderr, "device "+devdir+"/null2") {
			t.Errorf("the exit summary does not name the openings: %v", r)
		}
	})
}

// With a port published, every packet to the gateway takes gVisor's path:
// the DNS relay through the gateway (a loopback stub on the host) and the
// host ports still work there, and the gateway's other ports stay refused.
func TestReachPublishKeepsGateway(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.setResolvConf("nameserver 127.0.0.53\n")
		l.dns(l.host, "127.0.0.53:53")
		l.echoTCP(l.host, "127.0.0.1:8080")
		l.echoTCP(l.host, "127.0.0.1:8081")
		opts := []string{"--publish", "18080:8000", "--allow-host-port", "8080"}
		for _, c := range []string{"resolve", "resolve-tcp"} {
			if got, r := l.probeIn(uid, opts, c, "internet.test"); !strings.HasPrefix(got, labInternet) {
				t.Errorf("%s via the gateway with a published port: %q (%v)", c, got, r)
			}
		}
		if got, r := l.probeIn(uid, opts, "tcp", "host.internal:8080"); got != "ok" {
			t.Errorf("host port with a published port: %s (%v)", got, r)
		}
		if got, r := l.probeIn(uid, opts, "tcp", labGateway+":8081"); !blockedAtOnce(got) {
			t.Errorf("another gateway port with a published port: %s (%v)", got, r)
		}
	})
}
