// Package integration runs the built claude-sandbox binary for real, as root
// and as an unprivileged uid, and checks from inside the sandbox what it
// promises. Tests that need root skip without it, and fail instead of
// skipping when CLAUDE_SANDBOX_REQUIRE_PRIVILEGED=1 (as in CI).
package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// sandbox runs the binary and a probe for one caller identity.
type sandbox struct {
	t     *testing.T
	uid   int
	bin   string
	probe string
	home  string // an existing home directory holding a secret file
}

func users(t *testing.T, f func(t *testing.T, s *sandbox)) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	probe := testutil.Build(t, "./integration/probe")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			if err := os.WriteFile(filepath.Join(home, "secret"), []byte("hunter2"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(filepath.Join(home, "secret"), uid, uid); err != nil {
				t.Fatal(err)
			}
			f(t, &sandbox{t: t, uid: uid, bin: bin, probe: probe, home: home})
		})
	}
}

func (s *sandbox) env() []string {
	return []string{"HOME=" + s.home, "PATH=/usr/local/bin:/usr/bin:/bin", "GH_TOKEN=ghp_leak", "TERM=dumb"}
}

// cmd returns the launcher command: claude-sandbox run ARGS (ARGS holds
// the options, "--" and the command).
func (s *sandbox) cmd(args ...string) *exec.Cmd {
	// The filesystem and process tests need no network: --net=none unless
	// a test names another mode (the last --net wins). The jail has its
	// own tests, in a lab network.
	c := testutil.As(s.uid, s.env(), append([]string{s.bin, "run", "--net=none"}, args...)...)
	c.Dir = "/"
	return c
}

func (s *sandbox) run(args ...string) testutil.Result {
	s.t.Helper()
	return testutil.Run(s.t, s.cmd(args...))
}

// sh runs a shell script inside the default sandbox and requires success.
func (s *sandbox) sh(script string, opts ...string) string {
	s.t.Helper()
	r := s.run(append(opts, "--", "/bin/sh", "-c", script)...)
	if r.Code != 0 {
		s.t.Fatalf("script %q failed: %v", script, r)
	}
	return r.Stdout
}

// probeOut runs the probe inside and returns its first output line.
func (s *sandbox) probeOut(opts []string, args ...string) string {
	s.t.Helper()
	r := s.run(append(append(opts, "--", s.probe), args...)...)
	line, _, _ := strings.Cut(r.Stdout, "\n")
	if line == "" {
		s.t.Fatalf("probe %v printed nothing: %v", args, r)
	}
	return line
}

func statusFields(status string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func TestNoPrivilegeInside(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		f := statusFields(s.sh("cat /proc/self/status"))
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if f[k] != "0000000000000000" {
				t.Errorf("%s = %q inside, want all zero", k, f[k])
			}
		}
		if f["NoNewPrivs"] != "1" {
			t.Errorf("NoNewPrivs = %q, want 1", f["NoNewPrivs"])
		}
		if f["Seccomp"] != "2" {
			t.Errorf("Seccomp = %q, want 2 (filter mode)", f["Seccomp"])
		}
		id := strings.Fields(s.sh("id -u; id -g"))
		if len(id) != 2 || id[0] != strconv.Itoa(s.uid) || id[1] != strconv.Itoa(s.uid) {
			t.Errorf("uid/gid inside = %v, want the caller's %d", id, s.uid)
		}
	})
}

func TestReadOnlyHost(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		if got := s.probeOut(nil, "create", "/usr/claude-sandbox-probe"); got != "err:EROFS" {
			t.Errorf("creating a file under /usr: %s, want err:EROFS", got)
		}
		if got := s.probeOut(nil, "create", "/etc/claude-sandbox-probe"); got != "err:EROFS" {
			t.Errorf("creating a file under /etc: %s, want err:EROFS", got)
		}
		if got := s.probeOut(nil, "remount-rw", "/"); got != "err:EPERM" {
			t.Errorf("remount / read-write: %s, want err:EPERM", got)
		}
		if got := s.probeOut(nil, "bind-over", "/tmp", "/usr"); got != "err:EPERM" {
			t.Errorf("bind over /usr: %s, want err:EPERM", got)
		}
		// Even as root of a nested user namespace (which must work: Claude
		// Code runs its own sandbox inside), the inherited mounts stay
		// read-only and masks cannot be lifted.
		for _, c := range []struct{ what, want string }{
			{"remount-rw /", "err:EPERM"},
			{"umount /etc/hostname", "err:EINVAL"}, // a locked mount: not unmountable
		} {
			args := append([]string{"--mask", "/etc/hostname", "--", s.probe, "nested"}, strings.Fields(c.what)...)
			out := s.run(args...)
			// The nested namespace itself must have worked ("ok" from
			// the outer probe); only the attempt inside may fail.
			if out.Stdout != c.want+"\nok\n" {
				t.Errorf("nested userns %s: %v, want %s then ok", c.what, out, c.want)
			}
		}
		if _, err := os.Stat("/usr/claude-sandbox-probe"); err == nil {
			t.Error("the probe file appeared on the host")
		}
	})
}

func TestHomeAndMasks(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		if got := s.sh("ls -A "+s.home+"; echo end", "--bare"); got != "secret\nend\n" {
			t.Fatalf("control: with --bare the home shows %q, want the secret file", got)
		}
		if got := s.sh("ls -A " + s.home + "; echo end"); got != "end\n" {
			t.Errorf("home directory inside holds %q, want nothing", got)
		}
		secretDir := testutil.MkdirFor(t, s.uid)
		secretFile := filepath.Join(secretDir, "token")
		if err := os.WriteFile(secretFile, []byte("s3cret"), 0o644); err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(secretDir, "sub")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "key"), []byte("k"), 0o644); err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf("cat %s; echo :; ls -A %s; echo :", secretFile, sub)
		// Control: without the masks the secrets are visible, so the
		// empty reads below are the masks' doing.
		if got := s.sh(script); got != "s3cret:\nkey\n:\n" {
			t.Fatalf("unmasked view shows %q; the test setup is wrong", got)
		}
		got := s.sh(script, "--mask", secretFile, "--mask", sub)
		if got != ":\n:\n" {
			t.Errorf("masked file and directory show %q, want both empty", got)
		}
		if got := s.probeOut([]string{"--mask", sub}, "create", sub+"/x"); got != "err:EROFS" {
			t.Errorf("writing into a masked directory: %s, want err:EROFS", got)
		}
	})
}

func TestBindIsWritableAndVisibleOnHost(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		work := testutil.MkdirFor(t, s.uid)
		s.sh("echo from-inside > "+work+"/out", "--bind", work, work)
		b, err := os.ReadFile(filepath.Join(work, "out"))
		if err != nil || string(b) != "from-inside\n" {
			t.Fatalf("host sees %q, %v; want the sandbox's write", b, err)
		}
		fi, err := os.Stat(filepath.Join(work, "out"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != s.uid {
			t.Errorf("file written inside is owned by %d on the host, want the caller %d", st.Uid, s.uid)
		}
		// A read-only bind of the same directory refuses writes.
		if got := s.probeOut([]string{"--ro-bind", work, "/tmp/w"}, "create", "/tmp/w/x"); got != "err:EROFS" {
			t.Errorf("write into --ro-bind: %s, want err:EROFS", got)
		}
		// The bind may land at a new path inside a tmpfs.
		if got := s.sh("cat /tmp/deep/w/out", "--bind", work, "/tmp/deep/w"); got != "from-inside\n" {
			t.Errorf("bind at a created mount point shows %q", got)
		}
	})
}

// The command's environment is the base (PATH, and HOME and TERM from the
// caller) plus what the options add; --clearenv drops the base. Nothing
// else of the caller's crosses (its GH_TOKEN, its PATH).
func TestEnvironmentIsCleared(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		check := func(got string, want map[string]bool) {
			t.Helper()
			for _, l := range strings.Fields(got) {
				if strings.HasPrefix(l, "PWD=") || strings.HasPrefix(l, "SHLVL=") || strings.HasPrefix(l, "_=") {
					continue
				}
				if !want[l] {
					t.Errorf("unexpected variable inside: %s (env was %q)", l, got)
				}
				delete(want, l)
			}
			if len(want) > 0 {
				t.Errorf("missing inside: %v (env was %q)", want, got)
			}
		}
		check(s.sh("env", "--setenv", "A", "1"), map[string]bool{"A=1": true, "TERM=dumb": true, "HOME=" + s.home: true,
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin": true})
		check(s.sh("env", "--clearenv", "--setenv", "A", "1", "--keep-env", "TERM"), map[string]bool{"A=1": true, "TERM=dumb": true})
		r := s.run("--setenv", "A-B", "1", "--", "true")
		if r.Code != 2 || !strings.Contains(r.Stderr, `invalid variable name "A-B"`) {
			t.Errorf("--setenv A-B: %v; want exit 2 naming the bad name", r)
		}
	})
}

// A current directory that the sandbox does not show (under the home
// directory, which is an empty tmpfs inside) is reported, not silently
// replaced by /; bound, it is where the command starts.
func TestEnvCwdNotVisible(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		project := filepath.Join(s.home, "project")
		if err := os.Mkdir(project, 0o755); err != nil {
			t.Fatal(err)
		}
		c := s.cmd("--", "/bin/pwd")
		c.Dir = project
		r := testutil.Run(t, c)
		if r.Code != 0 || r.Stdout != "/\n" || !strings.Contains(r.Stderr, "warning: the current directory \""+project+"\" is not visible inside") {
			t.Errorf("cwd hidden inside: %v; want / and a warning naming it", r)
		}
		c = s.cmd("--bind", project, project, "--", "/bin/pwd")
		c.Dir = project
		if r := testutil.Run(t, c); r.Code != 0 || r.Stdout != project+"\n" || r.Stderr != "" {
			t.Errorf("cwd bound: %v; want it, and no warning", r)
		}
		// The home directory itself is there inside, but as the
		// sandbox's empty tmpfs: said too.
		c = s.cmd("--", "/bin/pwd")
		c.Dir = s.home
		r = testutil.Run(t, c)
		if r.Code != 0 || r.Stdout != s.home+"\n" || !strings.Contains(r.Stderr, "warning: the current directory \""+s.home+"\" is an empty tmpfs inside") {
			t.Errorf("cwd is the home tmpfs: %v; want a warning naming it", r)
		}
	})
}

func TestNamespaces(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		hostName, _ := os.Hostname()
		if got := s.sh("hostname", "--hostname", "sbx-test"); got != "sbx-test\n" {
			t.Errorf("hostname inside %q, want sbx-test", got)
		}
		if h, _ := os.Hostname(); h != hostName {
			t.Fatalf("the host's hostname changed to %q", h)
		}
		if got := s.probeOut(nil, "sethostname", "evil"); got != "err:EPERM" {
			t.Errorf("sethostname inside: %s, want err:EPERM", got)
		}
		if h, _ := os.Hostname(); h != hostName {
			t.Fatalf("the host's hostname changed to %q", h)
		}

		// A host process, unique by its argument.
		host := exec.Command("sleep", "313")
		if err := host.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = host.Process.Kill(); _ = host.Wait() }()
		pid := strconv.Itoa(host.Process.Pid)
		got := s.sh("cat /proc/" + pid + "/cmdline 2>/dev/null; echo; ls /proc | grep -c '^[0-9]'")
		if strings.Contains(got, "313") {
			t.Errorf("host process %s is visible in the sandbox's /proc", pid)
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(got)); n > 10 {
			t.Errorf("%d processes visible inside, want only the sandbox's own", n)
		}
		if got := s.probeOut(nil, "kill0", pid); got != "err:ESRCH" && got != "err:EPERM" {
			t.Errorf("signal to host pid %s: %s, want it refused", pid, got)
		}
		if got := s.sh("readlink /proc/1/exe >/dev/null 2>&1; tr '\\0' ' ' < /proc/1/cmdline"); !strings.Contains(got, "claude-sandbox") {
			t.Errorf("PID 1 inside is %q, want the sandbox's init", got)
		}
		for _, ns := range []string{"ipc", "uts", "pid", "mnt", "user", "cgroup"} {
			inside := strings.TrimSpace(s.sh("readlink /proc/self/ns/" + ns))
			outside, err := os.Readlink("/proc/self/ns/" + ns)
			if err != nil {
				t.Fatal(err)
			}
			if inside == outside {
				t.Errorf("%s namespace is shared with the host (%s)", ns, inside)
			}
		}
		netIn := strings.TrimSpace(s.sh("readlink /proc/self/ns/net", "--net=host"))
		netOut, _ := os.Readlink("/proc/self/ns/net")
		if netIn != netOut {
			t.Errorf("--net=host: namespace %s, want the host's %s", netIn, netOut)
		}
		got = s.sh("readlink /proc/self/ns/net; cat /proc/net/dev | tail -n +3 | cut -d: -f1", "--net=none")
		lines := strings.Fields(got)
		if len(lines) != 2 || lines[0] == netOut || lines[1] != "lo" {
			t.Errorf("--net=none: got %q, want a new namespace with only lo", got)
		}
	})
}

// Descriptors must not leak into the command: not the stages' channels
// (with them it could talk to the launcher as if it were init), and not
// what the caller's parent left open in the launcher (here three files,
// standing in for a terminal or a daemon's socket).
func TestNoInheritedDescriptors(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		for _, net := range []string{"--net=host", "--net=none"} {
			cmd := s.cmd(net, "--", "/bin/sh", "-c", "ls /proc/self/fd | tr '\\n' ' '")
			for i := 0; i < 3; i++ {
				f, err := os.Open("/etc/hostname")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				cmd.ExtraFiles = append(cmd.ExtraFiles, f) // fds 3, 4, 5 in the launcher
			}
			r := testutil.Run(t, cmd)
			if r.Code != 0 || r.Stdout != "0 1 2 3 " { // 3 is ls's own directory handle
				t.Errorf("%s: descriptors inside: %v, want only 0 1 2 (and ls's 3)", net, r)
			}
		}
	})
}

func TestPrivateDev(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		got := s.sh("ls /dev | tr '\\n' ' '")
		for _, want := range []string{"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm"} {
			if !strings.Contains(" "+got, " "+want+" ") {
				t.Errorf("/dev lacks %s: %s", want, got)
			}
		}
		for _, host := range []string{"vda", "sda", "mem", "kmsg", "net"} {
			if strings.Contains(" "+got, " "+host+" ") {
				t.Errorf("/dev exposes the host's %s", host)
			}
		}
		if got := s.probeOut(nil, "open-ptmx"); got != "ok" {
			t.Errorf("opening /dev/ptmx inside: %s", got)
		}
		if got := s.probeOut(nil, "create", "/dev/newfile"); got != "err:EROFS" {
			t.Errorf("creating a file in /dev: %s, want err:EROFS", got)
		}
	})
}

func TestTerminalInjectionRefused(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		// Without a terminal: the command has no controlling tty at all.
		if got := s.probeOut(nil, "tiocsti"); got == "ok" {
			t.Errorf("TIOCSTI without a terminal succeeded")
		}
		// With a terminal on stdin, the command gets its own pty as its
		// controlling terminal; TIOCSTI on it would be allowed by the
		// kernel, so EPERM proves the seccomp filter.
		for _, probe := range []string{"tiocsti", "tiocsti-high", "tioclinux"} {
			cmd := s.cmd("--", s.probe, probe)
			ptmx, tty, err := pty.Open()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
			cmd.SysProcAttr = credsWithSetsid(cmd.SysProcAttr)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			tty.Close()
			out := readAll(ptmx)
			_ = cmd.Wait()
			ptmx.Close()
			if !strings.Contains(out, "err:EPERM") {
				t.Errorf("%s on the sandbox's terminal: %q, want err:EPERM from the seccomp filter", probe, out)
			}
		}
	})
}

// credsWithSetsid makes the launcher a session leader whose controlling
// terminal is its stdin, as in an interactive shell.
func credsWithSetsid(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setsid, a.Setctty, a.Ctty = true, true, 0
	return a
}

func readAll(f *os.File) string {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// Positive control for the terminal test: outside the sandbox, the same
// probe on its own controlling terminal is not refused with EPERM (the
// kernel either allows it or, with legacy TIOCSTI off, says EIO). Without
// this, an EPERM inside could come from somewhere other than the filter.
func TestTerminalProbeControl(t *testing.T) {
	testutil.NeedsRoot(t)
	probe := testutil.Build(t, "./integration/probe")
	cmd := exec.Command(probe, "tiocsti")
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = credsWithSetsid(nil)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	out := readAll(ptmx)
	_ = cmd.Wait()
	if strings.Contains(out, "err:EPERM") || !(strings.Contains(out, "ok") || strings.Contains(out, "err:EIO")) {
		t.Errorf("TIOCSTI outside the sandbox: %q, want ok or err:EIO", out)
	}
}

func TestExitStatus(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		for script, want := range map[string]int{"exit 0": 0, "exit 7": 7, "kill -9 $$": 128 + 9, "kill -TERM $$": 128 + 15} {
			if r := s.run("--", "/bin/sh", "-c", script); r.Code != want {
				t.Errorf("%q: exit %d, want %d (%v)", script, r.Code, want, r)
			}
		}
		if r := s.run("--", "no-such-command"); r.Code != 127 || !strings.Contains(r.Stderr, "not found") {
			t.Errorf("missing command: %v, want 127 and a message", r)
		}
		if r := s.run("--", "/etc/hostname"); r.Code != 126 {
			t.Errorf("non-executable command: %v, want 126", r)
		}
		if r := s.run("--bind", "/definitely/missing", "/x", "--", "true"); r.Code != 2 || strings.Count(r.Stderr, "\n") != 1 {
			t.Errorf("missing bind source: %v, want exit 2 and one line", r)
		}
		// A mount point that cannot be created on the read-only host view
		// is a setup failure, named as such.
		r := s.run("--tmpfs", "/usr/claude-sandbox-no-such-dir", "--", "true")
		if r.Code != 125 || !strings.Contains(r.Stderr, "read-only host view") {
			t.Errorf("uncreatable mount point: %v, want 125 naming the read-only view", r)
		}
	})
}

func TestSignalsAreForwarded(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		cmd := s.cmd("--", "/bin/sh", "-c", "trap 'echo got-term; exit 42' TERM; echo ready; while :; do sleep 0.05; done")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(out)
		if line, _ := rd.ReadString('\n'); line != "ready\n" {
			t.Fatalf("sandbox said %q", line)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		rest, _ := rd.ReadString('\n')
		err = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if rest != "got-term\n" || code != 42 {
			t.Errorf("after SIGTERM: output %q, exit %d (%v); want got-term and 42", rest, code, err)
		}
	})
}

// startReady starts cmd, a sandbox whose command prints "ready" and then
// runs a process whose command line holds token, and returns once that
// process is visible from the host. Whatever the test does next, cmd does
// not outlive it.
func startReady(t *testing.T, cmd *exec.Cmd, token string) {
	t.Helper()
	testutil.CheckNetSafe(t, cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("sandbox said %q (%v)", line, cmd.Stderr)
	}
	if len(processesWith(token)) == 0 {
		t.Fatal("cannot see the sandboxed process from the host; the test would prove nothing")
	}
}

// dirNames returns the names in dir (a missing dir: none).
func dirNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// mountCount counts the host's mounts, as seen by this test process.
func mountCount(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// processesWith lists host pids whose command line contains token.
func processesWith(token string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), token) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestKilledLauncherLeavesNothing(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		mountsBefore := mountCount(t)
		tmpBefore := dirNames(t, "/tmp")
		// The control socket goes to a runtime directory of the test's own,
		// so that what the launcher leaves is in one place no other
		// process writes to.
		runtime := testutil.MkdirFor(t, s.uid)
		token := fmt.Sprintf("leftover-%d-%d", s.uid, time.Now().UnixNano())
		// The token is the shell's $0, so its command line carries it for
		// as long as it runs; its two children run a distinctive sleep.
		cmd := s.cmd("--", "/bin/sh", "-c", "sleep 1313 & sleep 1313 & echo ready; while :; do sleep 1; done", token)
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+runtime)
		startReady(t, cmd, token)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		// The kernel tears the namespace down asynchronously: poll, bounded.
		var left []string
		for i := 0; i < 250; i++ {
			left = processesWith(token)
			if len(left) == 0 && len(processesWith("sleep\x001313")) == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(left) > 0 {
			t.Errorf("sandbox processes outlived the killed launcher: %v", left)
		}
		if children := processesWith("sleep\x001313"); len(children) > 0 {
			t.Errorf("the sandbox's background processes outlived the launcher: %v", children)
		}
		if n := mountCount(t); n != mountsBefore {
			t.Errorf("host mount table changed: %d mounts before, %d after", mountsBefore, n)
		}
		// The one file a killed launcher leaves: its control socket
		// (README, "Parent death is set by init itself").
		left = nil
		for n := range dirNames(t, runtime) {
			if n != "claude-sandbox" {
				left = append(left, n)
			}
		}
		socks := dirNames(t, filepath.Join(runtime, "claude-sandbox"))
		for n := range socks {
			if len(socks) != 1 || !strings.HasSuffix(n, ".sock") {
				left = append(left, "claude-sandbox/"+n)
			}
		}
		if len(left) > 0 {
			t.Errorf("the killed launcher left %v in its runtime directory, want its control socket alone", left)
		}
		// /tmp is shared with every other process on the machine (a go
		// build beside the suite makes go-build* there): a new entry there
		// counts when it carries the product's name; the rest is logged.
		for n := range dirNames(t, "/tmp") {
			if tmpBefore[n] {
				continue
			}
			if strings.Contains(n, "claude") {
				t.Errorf("the killed launcher left /tmp/%s", n)
			} else {
				t.Logf("new in /tmp meanwhile, not the launcher's name: %s", n)
			}
		}
	})
}

func TestPlanJSONMatchesRun(t *testing.T) {
	testutil.NeedsRoot(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	r := testutil.Run(t, exec.Command(bin, "plan", "--json", "--net=none", "--mask", "/etc/shadow", "--", "true"))
	if r.Code != 0 || !strings.Contains(r.Stdout, `"net": "none"`) || !strings.Contains(r.Stdout, `"kind": "mask"`) {
		t.Errorf("plan --json: %v", r)
	}
}
