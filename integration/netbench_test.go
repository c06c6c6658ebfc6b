package integration

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// The workload every egress path runs, in one launch of the client
// (integration/netbench) per path. Bulk transfers stop at netbenchBytes or
// after netbenchSecs, whichever comes first.
const (
	netbenchBytes  = 64 << 30
	netbenchSecs   = "3"
	netbenchRR     = "3000"
	netbenchCPS    = "2000"
	netbenchUDPRR  = "3000"
	netbenchIdleMS = "800"
	// netbenchMTU is the jail's MTU (routes.DefaultMTU); pasta and
	// slirp4netns are configured with the same.
	netbenchMTU = "65520"
	// nbPathTimeout bounds one path's whole run.
	nbPathTimeout = 60 * time.Second
)

// Ports of the benchmark's servers on labInternet, in the world namespace.
const (
	nbSink   = "5001" // discards, then answers the byte count
	nbSource = "5002" // writes as many bytes as asked for
	nbEcho   = "5003" // 1-byte TCP echo
	nbGreet  = "5004" // writes 1 byte, waits for the client's close
	nbGreetC = "5006" // writes 1 byte and closes first
	nbUDP    = "5005" // datagram echo
)

// ensureNetPeers installs Debian's passt (pasta) and slirp4netns when they
// are missing (root only), and returns their paths.
func ensureNetPeers(b *testing.B) (pasta, slirp string) {
	var missing []string
	for _, p := range [][2]string{{"pasta", "passt"}, {"slirp4netns", "slirp4netns"}} {
		if _, err := exec.LookPath(p[0]); err != nil {
			missing = append(missing, p[1])
		}
	}
	if len(missing) > 0 {
		if os.Geteuid() != 0 {
			b.Skipf("needs root to install %v with apt-get", missing)
		}
		for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq"}, missing...)} {
			cmd := exec.Command("apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Skipf("cannot install %v: apt-get %v: %v\n%s", missing, args, err, out)
			}
		}
	}
	var err error
	if pasta, err = exec.LookPath("pasta"); err != nil {
		b.Fatal("passt installed but pasta not found")
	}
	if slirp, err = exec.LookPath("slirp4netns"); err != nil {
		b.Fatal("slirp4netns installed but not found")
	}
	return pasta, slirp
}

// benchServe accepts TCP connections on addr in namespace ns and hands
// each to serve.
func (l *lab) benchServe(_ *testing.B, ns, addr string, serve func(c *net.TCPConn)) {
	l.serveTCP(ns, addr, func(c net.Conn) { serve(c.(*net.TCPConn)) })
}

// benchServers starts the benchmark's servers on labInternet in the world.
func (l *lab) benchServers(b *testing.B) {
	at := func(port string) string { return net.JoinHostPort(labInternet, port) }
	l.benchServe(b, l.world, at(nbSink), func(c *net.TCPConn) {
		n, _ := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
		var cnt [8]byte
		binary.BigEndian.PutUint64(cnt[:], uint64(n))
		_, _ = c.Write(cnt[:])
	})
	l.benchServe(b, l.world, at(nbSource), func(c *net.TCPConn) {
		var req [8]byte
		if _, err := io.ReadFull(c, req[:]); err != nil {
			return
		}
		left := int64(binary.BigEndian.Uint64(req[:]))
		buf := make([]byte, 256<<10)
		for left > 0 {
			n, err := c.Write(buf[:min(int64(len(buf)), left)])
			left -= int64(n)
			if err != nil {
				return
			}
		}
	})
	l.benchServe(b, l.world, at(nbEcho), func(c *net.TCPConn) {
		buf := make([]byte, 1)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	l.benchServe(b, l.world, at(nbGreet), func(c *net.TCPConn) {
		_, _ = c.Write([]byte{'!'})
		_, _ = io.Copy(io.Discard, c)
	})
	l.benchServe(b, l.world, at(nbGreetC), func(c *net.TCPConn) {
		_, _ = c.Write([]byte{'!'})
	})
	l.echoUDP(l.world, at(nbUDP))
}

// nbResult is what one egress path measured.
type nbResult struct {
	up, down     float64 // Gbit/s
	rr, rrP50    float64 // us
	udp, udpP50  float64 // us
	udpLost      float64
	cps          float64 // connections/s, the client closes first
	cpsFailed    float64 // connections not established within 1 s
	cpsSrv       float64 // connections/s, the server closes first
	cpsSrvFailed float64 // connections not established within 1 s
	rssIdle      float64 // MiB, the proxy process, before any traffic
	anonIdle     float64 // MiB, the anonymous part of rssIdle (RssAnon)
	rssAfter     float64 // MiB, the proxy process, idle after the workload
	rssPeak      float64 // MiB, the proxy process's VmHWM at the end
	rssOf        string  // which process rss* measure
	// The proxy process's CPU time per operation, us: a figure a noisy
	// machine disturbs far less than latency and rates.
	cpuRR, cpuUDP, cpuCPS, cpuCPSSrv float64
}

// procCPU returns the CPU time all threads of pid have used so far
// (schedstat: nanoseconds, not clock ticks).
func procCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // a thread that just exited
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %q", dir, t.Name(), data)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// procMiB reads a "Name:   N kB" field of /proc/PID/status, in MiB.
func procMiB(pid int, field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func procComm(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(data))
}

// nbPath is one egress path: start launches the client with steps (its
// stdout already piped) and returns the pid of the process that carries
// the path's packets (0: none, the kernel does) and a cleanup.
type nbPath struct {
	name  string
	start func(b *testing.B, steps []string, stderr io.Writer) (cmd *exec.Cmd, stdout io.Reader, proxyPID func() int, done func())
}

// runPath runs the workload through one path and parses the client's lines.
func runPath(b *testing.B, p nbPath, steps []string) nbResult {
	var res nbResult
	t0 := time.Now()
	var stderr strings.Builder
	cmd, stdout, proxyPID, done := p.start(b, steps, &stderr)
	defer done()
	// A path that hangs must not hang the benchmark: end its process
	// group (the client and the proxy it started) after a minute.
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	watchdog := time.AfterFunc(nbPathTimeout, kill)
	defer watchdog.Stop()
	waited := false
	defer func() {
		if !waited { // a Fatal on the way: leave nothing running
			kill()
			_ = cmd.Wait()
		}
	}()
	var lines []string
	readies := 0
	peerFailed := false
	// The proxy's CPU time at the end of each step: the client prints a
	// line as each step ends and starts the next at once.
	var cpuPrev time.Duration
	cpuStep := func(ops string) float64 {
		pid := proxyPID()
		if pid == 0 {
			return 0
		}
		now, err := procCPU(pid)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		d := now - cpuPrev
		cpuPrev = now
		n, _ := strconv.Atoi(ops)
		if n == 0 {
			return 0
		}
		return float64(d.Microseconds()) / float64(n)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		f := strings.Fields(line)
		if readies > 0 {
			// Every step's line, "idle done" included, ends a step.
			var ops string
			switch {
			case len(f) == 0:
			case f[0] == "rr":
				ops = netbenchRR
			case f[0] == "udprr":
				ops = netbenchUDPRR
			case f[0] == "cps":
				ops = netbenchCPS
			}
			cpu := cpuStep(ops)
			switch {
			case ops == "":
			case f[0] == "rr":
				res.cpuRR = cpu
			case f[0] == "udprr":
				res.cpuUDP = cpu
			case len(f) > 1 && strings.HasSuffix(f[1], ":"+nbGreetC):
				res.cpuCPSSrv = cpu
			default:
				res.cpuCPS = cpu
			}
		}
		num := func(i int) float64 {
			if i >= len(f) {
				b.Fatalf("%s: short line %q", p.name, line)
			}
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				b.Fatalf("%s: line %q: %v", p.name, line, err)
			}
			return v
		}
		switch {
		case len(f) > 1 && f[1] == "err:":
			// A peer's own failure (Debian's 2023 pasta resets bulk
			// uploads now and then) is a figure, not a broken benchmark;
			// ours is not excused.
			if p.name == "jail" || p.name == "base" {
				b.Fatalf("%s: %s", p.name, line)
			}
			b.Logf("%s: %s (figure left out)", p.name, line)
			peerFailed = true
		case line == "ready":
			readies++
			pid := proxyPID()
			if pid == 0 {
				continue
			}
			time.Sleep(300 * time.Millisecond)
			rss, err := procMiB(pid, "VmRSS")
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			res.rssOf = fmt.Sprintf("pid %d (%s)", pid, procComm(pid))
			if readies == 1 {
				res.rssIdle = rss
				// Apart from the pages of the binary and libraries, which
				// are shared with every process running them and stay in
				// the page cache anyway.
				if res.anonIdle, err = procMiB(pid, "RssAnon"); err != nil {
					b.Fatalf("%s: %v", p.name, err)
				}
			} else {
				res.rssAfter = rss
				if res.rssPeak, err = procMiB(pid, "VmHWM"); err != nil {
					b.Fatalf("%s: %v", p.name, err)
				}
			}
		case f[0] == "up":
			res.up = num(1)
		case f[0] == "down":
			res.down = num(1)
		case f[0] == "rr":
			res.rr, res.rrP50 = num(1), num(2)
		case f[0] == "udprr":
			res.udp, res.udpP50, res.udpLost = num(1), num(2), num(3)
		case f[0] == "cps" && len(f) > 1 && strings.HasSuffix(f[1], ":"+nbGreetC):
			res.cpsSrv, res.cpsSrvFailed = num(2), num(3)
		case f[0] == "cps":
			res.cps, res.cpsFailed = num(2), num(3)
		}
	}
	err := cmd.Wait()
	waited = true
	// A peer whose own step failed exits 1 after the other steps; its
	// missing figure shows as "n/a".
	if err != nil && !(peerFailed && readies == 2) {
		b.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", p.name, err, strings.Join(lines, "\n"), stderr.String())
	}
	if !peerFailed && slices.Contains(res.missing(steps), 0.0) {
		b.Fatalf("%s: incomplete output:\n%s\nstderr:\n%s", p.name, strings.Join(lines, "\n"), stderr.String())
	}
	b.Logf("%s: %s in %v; RSS of %s", p.name, strings.Join(lines, "; "), time.Since(t0).Round(time.Millisecond), res.rssOf)
	return res
}

// missing returns the figures of res that steps should have given (0:
// not given).
func (res nbResult) missing(steps []string) []float64 {
	var want []float64
	for i, s := range steps {
		switch {
		case s == "up":
			want = append(want, res.up)
		case s == "down":
			want = append(want, res.down)
		case s == "rr":
			want = append(want, res.rr)
		case s == "udprr":
			want = append(want, res.udp)
		case s == "cps" && i+1 < len(steps) && strings.HasSuffix(steps[i+1], ":"+nbGreetC):
			want = append(want, res.cpsSrv)
		case s == "cps":
			want = append(want, res.cps)
		}
	}
	return want
}

// filterSteps keeps the idle steps and those named in only, each with
// its arguments.
func filterSteps(steps, only []string) []string {
	arity := map[string]int{"idle": 1, "rr": 2, "udprr": 2, "up": 3, "down": 3, "cps": 2}
	var out []string
	for i := 0; i < len(steps); {
		n := arity[steps[i]]
		if steps[i] == "idle" || slices.Contains(only, steps[i]) {
			out = append(out, steps[i:i+1+n]...)
		}
		i += 1 + n
	}
	return out
}

// startPiped starts cmd in its own process group (so a watchdog can end
// it and everything it started) with stdout piped.
func startPiped(b *testing.B, cmd *exec.Cmd, stderr io.Writer) io.Reader {
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %v: %v", cmd.Args, err)
	}
	return out
}

// netnsInode returns the inode of a network namespace file.
func netnsInode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// medianOf returns the median of get over rs. A figure of 0 means a peer's
// own failure left it out, and is skipped, unless zeros counts something
// (failed connections, lost datagrams); 0 when every run lacks it.
func medianOf(rs []nbResult, get func(nbResult) float64, zeros bool) float64 {
	var v []float64
	for _, r := range rs {
		if x := get(r); x != 0 || zeros {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// BenchmarkJailNetwork measures, in one run on the lab network, the
// sandbox's egress through our jail (gVisor userstack on a TUN), through
// pasta and through slirp4netns, plus the direct veth path as a ceiling:
// bulk TCP upload and download, 1-byte TCP and 8-byte UDP round trips,
// TCP connections per second, and the proxy process's resident memory.
// Every packet stays in the lab's namespaces. Figures only, no assertion;
// run with -benchtime Nx: each path runs N times, interleaved, and each
// figure is the median of the N runs.
func BenchmarkJailNetwork(b *testing.B) {
	testutil.NeedsRoot(b)
	testutil.NeedsUserNS(b)
	testutil.NeedsTUN(b)
	pasta, slirp := ensureNetPeers(b)
	bin := testutil.Build(b, "./cmd/claude-sandbox")
	client := testutil.Build(b, "./integration/netbench")
	l := newLab(b)
	l.benchServers(b)
	// Every path's host side connects from the lab's host namespace to the
	// same few server ports; the TIME_WAIT sockets of earlier paths and
	// runs then crowd the ephemeral ports, and the connection-rate steps
	// of later paths stalled on the port search (1 s SYN retries, rates
	// varying tenfold). Reusing TIME_WAIT ports for new connections, as
	// busy clients are configured to, gives every path the same clean
	// start.
	if out, err := exec.Command("ip", "netns", "exec", l.host, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1").CombinedOutput(); err != nil {
		b.Fatalf("sysctl tcp_tw_reuse: %v\n%s", err, out)
	}

	at := func(port string) string { return net.JoinHostPort(labInternet, port) }
	steps := []string{
		"idle", netbenchIdleMS,
		"rr", at(nbEcho), netbenchRR,
		"udprr", at(nbUDP), netbenchUDPRR,
		"up", at(nbSink), strconv.Itoa(netbenchBytes), netbenchSecs,
		"down", at(nbSource), strconv.Itoa(netbenchBytes), netbenchSecs,
		"cps", at(nbGreet), netbenchCPS,
		"cps", at(nbGreetC), netbenchCPS,
		"idle", netbenchIdleMS,
	}
	// NETBENCH_STEPS=rr,cps runs only those workload steps (the idle
	// steps stay: they measure memory and mark the workload's ends);
	// the figures of the others are then left out.
	if only := os.Getenv("NETBENCH_STEPS"); only != "" {
		steps = filterSteps(steps, strings.Split(only, ","))
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	noPID := func() int { return 0 }

	paths := []nbPath{
		{"direct", func(b *testing.B, steps []string, stderr io.Writer) (*exec.Cmd, io.Reader, func() int, func()) {
			// The lab host namespace itself: veth and the kernel only.
			cmd := exec.Command("ip", append([]string{"netns", "exec", l.host, client}, steps...)...)
			cmd.Env, cmd.Dir = env, "/"
			return cmd, startPiped(b, cmd, stderr), noPID, func() {}
		}},
		{"jail", func(b *testing.B, steps []string, stderr io.Writer) (*exec.Cmd, io.Reader, func() int, func()) {
			// ip and sh exec into setpriv and claude-sandbox: the started
			// pid is the launcher, which runs the userstack.
			cmd := l.jailCmd(0, bin, append([]string{"run", "--net=jail", "--", client}, steps...)...)
			out := startPiped(b, cmd, stderr)
			return cmd, out, func() int { return cmd.Process.Pid }, func() {}
		}},
		{"pasta", func(b *testing.B, steps []string, stderr io.Writer) (*exec.Cmd, io.Reader, func() int, func()) {
			// pasta refuses to stay root (it drops to nobody and then
			// cannot map its user namespace), so it runs rootless, as its
			// users run it: as uid 65534 with a /dev/net/tun of mode 0666.
			pidFile := filepath.Join(testutil.MkdirFor(b, testutil.Nobody), "pasta.pid")
			argv := []string{"--config-net", "-f", "-q", "-4", "--mtu", netbenchMTU,
				"-t", "none", "-u", "none", "-T", "none", "-U", "none",
				"-P", pidFile, "--", client}
			cmd := l.jailCmd(testutil.Nobody, pasta, append(argv, steps...)...)
			out := startPiped(b, cmd, stderr)
			pid := func() int {
				data, err := os.ReadFile(pidFile)
				if err != nil {
					b.Fatalf("pasta's pid file: %v", err)
				}
				n, err := strconv.Atoi(strings.TrimSpace(string(data)))
				if err != nil {
					b.Fatalf("pasta's pid file: %q", data)
				}
				return n
			}
			return cmd, out, pid, func() {}
		}},
		{"slirp", func(b *testing.B, steps []string, stderr io.Writer) (*exec.Cmd, io.Reader, func() int, func()) {
			// The client waits on stdin in its own user+network namespace
			// until slirp4netns reports tap0 configured.
			hostNS := netnsInode("/run/netns/" + l.host)
			ourNS := netnsInode("/proc/self/ns/net")
			argv := []string{"netns", "exec", l.host, "unshare", "--user", "--map-root-user", "--net", "--",
				"sh", "-c", `read go && exec "$@"`, "sh", client}
			cmd := exec.Command("ip", append(argv, steps...)...)
			cmd.Env, cmd.Dir = env, "/"
			gate, err := cmd.StdinPipe()
			if err != nil {
				b.Fatal(err)
			}
			out := startPiped(b, cmd, stderr)
			target := cmd.Process.Pid
			abort := func() { // before runPath's own clean-up is armed
				_ = syscall.Kill(-target, syscall.SIGKILL)
				_ = cmd.Wait()
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				ino := netnsInode(fmt.Sprintf("/proc/%d/ns/net", target))
				if ino != 0 && ino != hostNS && ino != ourNS {
					break
				}
				if time.Now().After(deadline) {
					abort()
					b.Fatal("unshare did not create the client's network namespace")
				}
			}
			ready, readyW, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			defer ready.Close()
			s := exec.Command("ip", "netns", "exec", l.host, slirp,
				"--configure", "--mtu="+netbenchMTU, "--disable-host-loopback",
				"--ready-fd=3", strconv.Itoa(target), "tap0")
			s.Env, s.Dir = env, "/"
			var slog strings.Builder
			s.Stdout, s.Stderr = &slog, &slog
			s.ExtraFiles = []*os.File{readyW}
			if err := s.Start(); err != nil {
				b.Fatalf("start slirp4netns: %v", err)
			}
			readyW.Close()
			stop := func() {
				_ = s.Process.Kill()
				_ = s.Wait()
			}
			_ = ready.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := ready.Read(make([]byte, 1)); err != nil {
				stop()
				abort()
				b.Fatalf("slirp4netns not ready: %v\n%s", err, slog.String())
			}
			if _, err := io.WriteString(gate, "go\n"); err != nil {
				b.Fatal(err)
			}
			gate.Close()
			return cmd, out, func() int { return s.Process.Pid }, stop
		}},
	}

	// NETBENCH_BASE=/path/to/claude-sandbox adds a path "base": the jail
	// of that binary (an earlier build), for an A/B in the same run.
	if base := os.Getenv("NETBENCH_BASE"); base != "" {
		paths = append(paths, nbPath{"base", func(b *testing.B, steps []string, stderr io.Writer) (*exec.Cmd, io.Reader, func() int, func()) {
			cmd := l.jailCmd(0, base, append([]string{"run", "--net=jail", "--", client}, steps...)...)
			out := startPiped(b, cmd, stderr)
			return cmd, out, func() int { return cmd.Process.Pid }, func() {}
		}})
	}
	// NETBENCH_PATHS=jail,direct runs only those paths (quicker when
	// working on one); the ratios then need both peers to mean anything.
	if only := os.Getenv("NETBENCH_PATHS"); only != "" {
		paths = slices.DeleteFunc(paths, func(p nbPath) bool { return !slices.Contains(strings.Split(only, ","), p.name) })
	}
	// Each figure is the median of the b.N runs: this machine class is
	// noisy, and a mean lets one disturbed run move it.
	runs := make([][]nbResult, len(paths))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, p := range paths {
			runs[j] = append(runs[j], runPath(b, p, steps))
		}
	}
	b.StopTimer()
	res := map[string]nbResult{}
	for j, p := range paths {
		rs := runs[j]
		m := func(get func(nbResult) float64) float64 { return medianOf(rs, get, false) }
		mz := func(get func(nbResult) float64) float64 { return medianOf(rs, get, true) }
		res[p.name] = nbResult{
			up: m(func(r nbResult) float64 { return r.up }), down: m(func(r nbResult) float64 { return r.down }),
			rr: m(func(r nbResult) float64 { return r.rr }), rrP50: m(func(r nbResult) float64 { return r.rrP50 }),
			udp: m(func(r nbResult) float64 { return r.udp }), udpP50: m(func(r nbResult) float64 { return r.udpP50 }),
			udpLost: mz(func(r nbResult) float64 { return r.udpLost }),
			cps:     m(func(r nbResult) float64 { return r.cps }), cpsFailed: mz(func(r nbResult) float64 { return r.cpsFailed }),
			cpsSrv: m(func(r nbResult) float64 { return r.cpsSrv }), cpsSrvFailed: mz(func(r nbResult) float64 { return r.cpsSrvFailed }),
			rssIdle: m(func(r nbResult) float64 { return r.rssIdle }), anonIdle: m(func(r nbResult) float64 { return r.anonIdle }),
			rssAfter: m(func(r nbResult) float64 { return r.rssAfter }), rssPeak: m(func(r nbResult) float64 { return r.rssPeak }),
			rssOf: rs[len(rs)-1].rssOf,
			cpuRR: m(func(r nbResult) float64 { return r.cpuRR }), cpuUDP: m(func(r nbResult) float64 { return r.cpuUDP }),
			cpuCPS: m(func(r nbResult) float64 { return r.cpuCPS }), cpuCPSSrv: m(func(r nbResult) float64 { return r.cpuCPSSrv }),
		}
	}

	for _, p := range paths {
		r := res[p.name]
		b.ReportMetric(r.up, p.name+"-up-Gbit/s")
		b.ReportMetric(r.down, p.name+"-down-Gbit/s")
		b.ReportMetric(r.rr, p.name+"-rr-us")
		b.ReportMetric(r.udp, p.name+"-udprr-us")
		b.ReportMetric(r.cps, p.name+"-conn/s")
		b.ReportMetric(r.cpsFailed, p.name+"-conn-failed")
		b.ReportMetric(r.cpsSrv, p.name+"-srvclose-conn/s")
		b.ReportMetric(r.cpsSrvFailed, p.name+"-srvclose-failed")
		if r.rssOf != "" {
			b.ReportMetric(r.rssIdle, p.name+"-idle-RSS-MiB")
			b.ReportMetric(r.anonIdle, p.name+"-idle-anon-MiB")
			b.ReportMetric(r.rssPeak, p.name+"-peak-RSS-MiB")
			b.ReportMetric(r.cpuRR, p.name+"-cpu-us/rr")
			b.ReportMetric(r.cpuUDP, p.name+"-cpu-us/udprr")
			b.ReportMetric(r.cpuCPS, p.name+"-cpu-us/conn")
			b.ReportMetric(r.cpuCPSSrv, p.name+"-cpu-us/srvclose-conn")
		}
	}
	// Ratios against the better of pasta and slirp4netns: above 1 means
	// the jail is better for throughput and connection rate, worse for
	// round trips.
	// A peer's missing figure (0) does not count.
	best := func(get func(nbResult) float64, higher bool) float64 {
		a, c := get(res["pasta"]), get(res["slirp"])
		if a == 0 || (c != 0 && (a > c) != higher) {
			return c
		}
		return a
	}
	j := res["jail"]
	b.ReportMetric(j.up/best(func(r nbResult) float64 { return r.up }, true), "jail/best-up")
	b.ReportMetric(j.down/best(func(r nbResult) float64 { return r.down }, true), "jail/best-down")
	b.ReportMetric(j.rr/best(func(r nbResult) float64 { return r.rr }, false), "jail/best-rr")
	b.ReportMetric(j.udp/best(func(r nbResult) float64 { return r.udp }, false), "jail/best-udprr")
	b.ReportMetric(j.cps/best(func(r nbResult) float64 { return r.cps }, true), "jail/best-conn/s")
	b.ReportMetric(j.cpsSrv/best(func(r nbResult) float64 { return r.cpsSrv }, true), "jail/best-srvclose-conn/s")
	b.ReportMetric(j.cpuRR/best(func(r nbResult) float64 { return r.cpuRR }, false), "jail/best-cpu/rr")
	b.ReportMetric(j.cpuUDP/best(func(r nbResult) float64 { return r.cpuUDP }, false), "jail/best-cpu/udprr")
	b.ReportMetric(j.cpuCPS/best(func(r nbResult) float64 { return r.cpuCPS }, false), "jail/best-cpu/conn")
	b.ReportMetric(j.cpuCPSSrv/best(func(r nbResult) float64 { return r.cpuCPSSrv }, false), "jail/best-cpu/srvclose-conn")
	b.ReportMetric(0, "ns/op")

	var tb strings.Builder
	fmt.Fprintf(&tb, "\n| path | up Gbit/s | down Gbit/s | TCP RR us (p50) | UDP RR us (p50) | conn/s (failed) | conn/s, server closes (failed) | proxy RSS idle (anonymous) / after / peak MiB |\n")
	fmt.Fprintf(&tb, "|---|---|---|---|---|---|---|---|\n")
	for _, p := range paths {
		r := res[p.name]
		rss := "-"
		if r.rssOf != "" {
			rss = fmt.Sprintf("%.1f (%.1f) / %.1f / %.1f", r.rssIdle, r.anonIdle, r.rssAfter, r.rssPeak)
		}
		lost := ""
		if r.udpLost > 0 {
			lost = fmt.Sprintf(", %.0f lost", r.udpLost)
		}
		na := func(v float64, format string) string {
			if v == 0 {
				return "n/a"
			}
			return fmt.Sprintf(format, v)
		}
		fmt.Fprintf(&tb, "| %s | %s | %s | %s (%.1f) | %s (%.1f%s) | %s (%.0f) | %s (%.0f) | %s |\n",
			p.name, na(r.up, "%.2f"), na(r.down, "%.2f"), na(r.rr, "%.1f"), r.rrP50, na(r.udp, "%.1f"), r.udpP50, lost,
			na(r.cps, "%.0f"), r.cpsFailed, na(r.cpsSrv, "%.0f"), r.cpsSrvFailed, rss)
	}
	fmt.Fprintf(&tb, "\n| path | proxy CPU us per TCP RR | per UDP RR | per connection | per connection, server closes |\n|---|---|---|---|---|\n")
	for _, p := range paths {
		if r := res[p.name]; r.rssOf != "" {
			fmt.Fprintf(&tb, "| %s | %.1f | %.1f | %.0f | %.0f |\n", p.name, r.cpuRR, r.cpuUDP, r.cpuCPS, r.cpuCPSSrv)
		}
	}
	fmt.Fprintf(&tb, "\nMTU %s on every sandboxed path; bulk transfers %ss each way; %s TCP and %s UDP round trips; %s connections each way (connect, read a 1-byte greeting, close; the client closes first, or the server does; "+
		"a connection not up within 1 s fails, and the step stops after 5 failures). "+
		"RSS: the jail's launcher, pasta, slirp4netns (VmRSS while the client sleeps before and after the workload, with its anonymous part, RssAnon, idle; VmHWM). "+
		"Proxy CPU: that process's CPU time (all threads, kernel time included: the system calls that move the packets) during a step, over the step's operations.\n",
		netbenchMTU, netbenchSecs, netbenchRR, netbenchUDPRR, netbenchCPS)
	b.Log(tb.String())
}
