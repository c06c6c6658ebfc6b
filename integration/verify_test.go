package integration

import (
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/verify"
)

// Each probe can see an escape: run where the thing is possible (as root,
// outside any sandbox, in throwaway namespaces or fixture trees the test
// owns), it must report ESCAPED. Nothing here touches the machine's own
// routes, mounts or files.
func TestProbesDetectEscapes(t *testing.T) {
	testutil.NeedsRoot(t)
	vp := testutil.Build(t, "./integration/verifyprobe")
	fixture := testutil.MkdirFor(t, 0)
	home := filepath.Join(fixture, "home/u")
	for _, d := range []string{"usr", "etc", "var", "opt", "tmp", "home/u/.ssh", "etc/claude-code"} {
		must(t, os.MkdirAll(filepath.Join(fixture, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(home, ".netrc"), []byte("machine x login y password z"), 0o600))
	must(t, os.WriteFile(filepath.Join(fixture, "etc/claude-sandbox.conf"), nil, 0o644))
	ws := testutil.MkdirFor(t, 0)

	child := exec.Command("sleep", "600")
	child.Env = []string{"GH_TOKEN=ghp_scrubbed_but_visible"}
	must(t, child.Start())
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	pid := strconv.Itoa(child.Process.Pid)

	cases := map[string][]string{
		"P01": {"unshare", "--net", "sh", "-c", "ip link set lo up && ip route add default dev lo && exec " + vp + " P01"},
		"P02": {"unshare", "--net", "sh", "-c", "ip link set lo up && exec " + vp + " P02"},
		"P03": {"unshare", "--net", vp, "P03"},
		"P04": {vp, "P04"},
		"P05": {vp, "P05"},
		"P06": {"unshare", "--mount", "--propagation", "private", vp, "P06"},
		"P07": {"unshare", "--mount", "--propagation", "private", vp, "P07"},
		"P08": {vp, "-root", fixture, "P08"},
		"P09": {vp, "-root", fixture, "-home", "/home/u", "P09"},
		"P10": {vp, "-root", fixture, "-home", "/home/u", "P10"},
		"P11": {vp, "P11"},
		"P12": {vp, "P12"},
		"P13": {vp, "P13"},
		"P14": {vp, "P14"},
		"P15": {vp, "-initpid", pid, "P15"},
		"P16": {vp, "-hostpid", pid, "P16"},
		"P17": {vp, "-root", fixture, "P17"},
		"P18": {vp, "-workspace", ws, "P18"},
	}
	// The network probes, in the lab with no jail: the lab's servers
	// stand in for the private hosts, so every attempt gets through.
	l := newLab(t)
	l.echoTCP(l.world, labDevice+":22")
	l.echoUDP(l.world, labDevice+":5064")
	l.echoTCP(l.world, labMetadata+":80")
	l.echoUDP(l.world, labDevice+":53")
	inLab := func(args ...string) []string {
		return append([]string{"ip", "netns", "exec", l.host, vp, "-jail"}, args...)
	}
	cases["P19"] = inLab("-target", "tcp-private="+labDevice+":22", "P19")
	cases["P20"] = inLab("-target", "udp-private="+labDevice+":5064", "P20")
	cases["P21"] = inLab("-target", "metadata="+labMetadata+":80", "P21")
	cases["P22"] = inLab("-target", "dns-private="+labDevice+":53", "P22")
	// Nested attempts without the nested user namespace, as root: the
	// attempt itself works, and the probe must say so.
	marker := filepath.Join(fixture, "tmp/.claude-sandbox")
	must(t, os.WriteFile(marker, nil, 0o644))
	mountMarker := "mount --bind /dev/null " + marker + " && "
	cases["P23"] = []string{"unshare", "--mount", "--propagation", "private", vp, "-no-nested-userns", "P23"}
	cases["P24"] = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", mountMarker + vp + " -no-nested-userns -root " + fixture + " P24"}
	cases["P25"] = []string{"unshare", "--net", "sh", "-c", "ip link set lo up && ip route add default dev lo && exec " + vp + " -no-nested-userns P25"}
	cases["P26"] = []string{vp, "-hostpid", pid, "P26"}
	cases["P34"] = []string{"unshare", "--net", "sh", "-c", "ip link set lo up && exec " + vp + " -no-nested-userns P34"}
	cases["P35"] = []string{"unshare", "--net", vp, "-no-nested-userns", "P35"}
	cases["P30"] = []string{vp, "P30"}
	cases["P31"] = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", mountMarker + vp + " -root " + fixture + " P31"}
	// An abstract socket of the "host", and sockets and secrets in the
	// fixture's /tmp, /run/user and /run/secrets.
	abs, err := net.Listen("unix", "@claude-sandbox-verify-test")
	must(t, err)
	defer abs.Close()
	// The probe runs in a PID namespace of its own, so the listener (this
	// test) is outside it, as the host's would be.
	cases["P27"] = []string{"unshare", "--pid", "--fork", vp, "-jail", "P27"}
	must(t, os.MkdirAll(filepath.Join(fixture, "run/user/1000"), 0o755))
	must(t, os.MkdirAll(filepath.Join(fixture, "run/secrets"), 0o755))
	sock, err := net.Listen("unix", filepath.Join(fixture, "run/user/1000/bus"))
	must(t, err)
	defer sock.Close()
	cases["P28"] = []string{"unshare", "--pid", "--fork", vp, "-root", fixture, "P28"}
	must(t, os.WriteFile(filepath.Join(fixture, "run/secrets/token"), []byte("s3cret"), 0o600))
	cases["P29"] = []string{vp, "-root", fixture, "P29"}

	cases["P32"] = inLab("-target", "host-loopback="+labDevice+":22", "P32")
	// The lab's host without a jail: its egress device (the veth) reaches
	// the lab device, bound or not. An empty network namespace takes any
	// filter.
	cases["P36"] = inLab("-target", "tcp-private="+labDevice+":22", "-target", "udp-private="+labDevice+":5064", "P36")
	cases["P37"] = inLab("-target", "tcp-private="+labDevice+":22", "-target", "udp-private="+labDevice+":5064", "P37")
	cases["P38"] = []string{"unshare", "--net", vp, "P38"}
	cases["P39"] = []string{"unshare", "--net", vp, "-no-nested-userns", "P39"}
	// A key in this (root's) user keyring, which a probe outside any user
	// namespace of its own can read.
	key, err := unix.AddKey("user", "claude-sandbox-verify-test", []byte("x"), unix.KEY_SPEC_USER_KEYRING)
	must(t, err)
	defer func() { _, _ = unix.KeyctlInt(unix.KEYCTL_INVALIDATE, key, 0, 0, 0) }()
	cases["P33"] = []string{vp, "P33"}
	// The kernel walls: writable sysctl and sysfs files in the fixture,
	// the host's io_uring and keyring, and a process that dies of SIGSEGV.
	for _, f := range []string{"proc/sys/kernel/core_pattern", "sys/kernel/mm/ksm/pages_to_scan"} {
		must(t, os.MkdirAll(filepath.Join(fixture, filepath.Dir(f)), 0o755))
		must(t, os.WriteFile(filepath.Join(fixture, f), []byte("0\n"), 0o644))
	}
	cases["P50"] = []string{vp, "-root", fixture, "P50"}
	cases["P51"] = []string{vp, "-root", fixture, "P51"}
	cases["P52"] = []string{vp, "P52"}
	victim := exec.Command("sleep", "600")
	must(t, victim.Start())
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()
	cases["P53"] = []string{vp, "-initpid", strconv.Itoa(victim.Process.Pid), "P53"}
	// As host root with no filter, a set-ID bit holds on a root-owned
	// file in the workspace.
	cases["P54"] = []string{vp, "-workspace", ws, "P54"}
	// This test's own process: several threads, in no Landlock domain.
	cases["P60"] = []string{vp, "-initpid", strconv.Itoa(os.Getpid()), "P60"}
	maps.Copy(cases, persistProbeCases(t, vp))
	maps.Copy(cases, homeProbeCases(t, vp))
	// Issue 28, outside any sandbox as root: a root-only file in the
	// fixture's /etc, the host's own page files and cgroup tree, and an
	// unsized tmpfs mounted in a private mount namespace.
	must(t, os.MkdirAll(filepath.Join(fixture, "etc/wireguard"), 0o755))
	must(t, os.WriteFile(filepath.Join(fixture, "etc/wireguard/wg0.conf"), []byte("PrivateKey = x"), 0o600))
	cases["P64"] = []string{vp, "-root", fixture, "P64"}
	// And one at the root's top, beside the listed trees (a /data).
	top := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(top, "data"), 0o755))
	must(t, os.WriteFile(filepath.Join(top, "data/key"), []byte("x"), 0o600))
	cases["P64 (root's top)"] = []string{vp, "-root", top, "P64"}
	cases["P65"] = []string{vp, "P65"}
	cases["P66"] = []string{vp, "P66"}
	cases["P67"] = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs none " + filepath.Join(fixture, "tmp") + " && exec " + vp + " P67"}

	// A terminal of the "host" on stdin (the fixture has no devpts of its
	// own), and a host socket under the fixture's /run whose listener is
	// outside the probe's PID namespace.
	ptmx, tty, err := pty.Open()
	must(t, err)
	defer ptmx.Close()
	defer tty.Close()
	cases["P40"] = []string{"sh", "-c", vp + " -root " + fixture + " P40 < " + tty.Name()}
	hostSock, err := net.Listen("unix", filepath.Join(fixture, "run/host.sock"))
	must(t, err)
	defer hostSock.Close()
	cases["P41"] = []string{"unshare", "--pid", "--fork", vp, "-root", fixture, "P41"}

	for _, p := range verify.Probes() {
		if _, ok := cases[p.ID]; !ok {
			t.Errorf("probe %s (%s) has no escape-detection case", p.ID, p.Name)
		}
	}
	for id, argv := range cases {
		r := testutil.Run(t, exec.Command(argv[0], argv[1:]...))
		if !strings.HasPrefix(r.Stdout, "ESCAPED") {
			t.Errorf("%s where the escape is possible: %v; want ESCAPED", id, r)
		}
	}
}

// verify, run from inside the shadow's sandbox, as root and as an
// unprivileged uid, with the jail off and on: SANDBOX OK, no probe
// inconclusive. Outside, it says so and exits 1.
func TestVerifyInsideSandbox(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	fake := "#!/bin/sh\nexec " + bin + " verify\n"
	for _, jail := range []bool{false, true} {
		for _, uid := range []int{0, testutil.Nobody} {
			t.Run(fmt.Sprintf("jail=%v/uid%d", jail, uid), func(t *testing.T) {
				home := testutil.MkdirFor(t, uid)
				ws := filepath.Join(home, "project")
				must(t, os.MkdirAll(ws, 0o755))
				must(t, os.Chown(ws, uid, uid))
				gitconfig := "[user]\n\tname = Tester\n\temail = t@example.org\n"
				must(t, os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(gitconfig), 0o644))
				env := []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "GH_TOKEN=ghp_host"}
				var r testutil.Result
				if !jail {
					prelude, claude := shadowHost(t, "egress-jail = 0\n", fake)
					r = runShadow(t, uid, home, ws, prelude, claude, env, "-p", "x")
				} else {
					l := newLab(t)
					prelude, claude := shadowHost(t, "", fake)
					inner := fmt.Sprintf("%s && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && cd %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s -p x",
						prelude, ws, uid, uid, strings.Join(env, " "), claude)
					cmd := exec.Command("ip", "netns", "exec", l.host, "sh", "-c", inner)
					cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
					r = testutil.Run(t, cmd)
				}
				if r.Code != 0 || !strings.Contains(r.Stdout, "RESULT: SANDBOX OK") || !strings.Contains(r.Stdout, " 0 inconclusive)") {
					t.Errorf("verify inside: %v", r)
				}
				if strings.Contains(r.Stdout, " FAIL ") || strings.Contains(r.Stdout, "ESCAPED") {
					t.Errorf("a check failed or a probe escaped:\n%s", r.Stdout)
				}
				if jail && (strings.Contains(r.Stdout, "V19  SKIP") || strings.Contains(r.Stdout, "V20  SKIP")) {
					t.Errorf("jail checks skipped with the jail on:\n%s", r.Stdout)
				}
			})
		}
	}
	r := testutil.Run(t, exec.Command(bin, "verify"))
	if r.Code != 1 || !strings.Contains(r.Stdout, "NOT INSIDE") {
		t.Errorf("verify outside: %v", r)
	}
}
