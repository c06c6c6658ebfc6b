package integration

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/control"
	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// hostAs runs bin with args on the host (the test's namespaces) as uid,
// with the environment jailCmd gives the sandbox's launcher.
func hostAs(uid int, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	cmd.Dir = "/"
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	return cmd
}

// hostList runs claude-sandbox ARGS (a listing with --json) on the
// host as uid and decodes its JSON array.
func hostList[T any](t *testing.T, bin string, uid int, args ...string) ([]T, string) {
	t.Helper()
	out, err := hostAs(uid, bin, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	var list []T
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return list, string(out)
}

// psFind returns the status of uid's running sandbox whose command
// contains word (or whose id is word), as claude-sandbox ps --json lists it.
func psFind(t *testing.T, bin string, uid int, word string) control.Status {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		list, _ := hostList[control.Status](t, bin, uid, "ps", "--json")
		for _, s := range list {
			if s.ID == word || strings.Contains(strings.Join(s.Command, " "), word) {
				return s
			}
		}
	}
	t.Fatalf("ps never listed a sandbox running %s", word)
	return control.Status{}
}

// TestControlReach: a lab device refused at launch is reached once
// `claude-sandbox allow ID --ip` returns, and refused again after
// `revoke`; ps lists the sandbox with its blocked count; the control
// socket answers no other uid, nor anything inside a sandbox: its own
// user's other sandboxes (jailed, --net=host) find no socket (the /tmp
// tmpfs), one given the directory by a bind is refused by the launcher
// (another user namespace), and `claude-sandbox allow` run inside fails.
// The time from allow's return to the first connection through is
// printed, not asserted.
func TestControlReach(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		probe := testutil.Build(t, "./integration/probe")
		l.echoTCP(l.world, labDevice+":5064")
		audit := filepath.Join(testutil.MkdirFor(t, uid), "audit.jsonl")
		s := l.startLive(t, uid, "", "--audit-log", audit)
		dev := "tcp " + labDevice + ":5064"
		if got := s.try(dev); got == "ok" {
			t.Fatalf("control: %s passes before any allow", dev)
		}
		st := psFind(t, bin, uid, "egressprobe")
		if st.Net != "jail" || st.Blocked < 1 || st.ID == "" {
			t.Errorf("ps: %+v, want net jail and a blocked flow", st)
		}
		var sock string
		for _, d := range control.Candidates(uid, func(string) string { return "" }) {
			if _, err := os.Lstat(filepath.Join(d, st.ID+".sock")); err == nil {
				sock = filepath.Join(d, st.ID+".sock")
			}
		}
		if sock == "" {
			t.Fatalf("no socket for %s", st.ID)
		}

		// Another uid: refused (by the directory's mode, and the
		// launcher's credential check behind it).
		other := testutil.Nobody
		if uid == testutil.Nobody {
			other = 4242
		}
		if out, _ := hostAs(other, probe, "control-status", sock).CombinedOutput(); strings.HasPrefix(string(out), "ok") {
			t.Errorf("uid %d reached the control socket of uid %d's sandbox: %s", other, uid, out)
		}
		// The owner: answered.
		if out, _ := hostAs(uid, probe, "control-status", sock).CombinedOutput(); !strings.HasPrefix(string(out), "ok") {
			t.Errorf("the owner was not answered: %s", out)
		}
		// From inside sandboxes of the same user.
		inside := map[string][]string{
			"jailed":             {"run", "--", probe, "control-status", sock},
			"--net=host":         {"run", "--net=host", "--", probe, "control-status", sock},
			"bound in, jailed":   {"run", "--bind", filepath.Dir(sock), filepath.Dir(sock), "--", probe, "control-status", sock},
			"bound, --net=host":  {"run", "--net=host", "--bind", filepath.Dir(sock), filepath.Dir(sock), "--", probe, "control-status", sock},
			"allow inside":       {"run", "--", bin, "allow", st.ID, "--ip", labDevice},
			"allow inside, host": {"run", "--net=host", "--", bin, "allow", st.ID, "--ip", labDevice},
		}
		for name, argv := range inside {
			r := testutil.Run(t, l.jailCmd(uid, bin, argv...))
			if strings.HasPrefix(r.Stdout, "ok") || (strings.HasPrefix(name, "allow") && r.Code == 0) {
				t.Errorf("%s: reached the launcher: %q %q (exit %d)", name, r.Stdout, r.Stderr, r.Code)
			}
			t.Logf("%s: %s%s", name, strings.TrimSpace(r.Stdout), strings.TrimSpace(r.Stderr))
		}
		if got := s.try(dev); got == "ok" {
			t.Fatalf("%s passes after the attempts from inside", dev)
		}
		// Those bound in met the mask of the host's sockets (EACCES): a
		// launcher started after the sandbox has a socket no mask
		// covers, which the sandbox reaches, and the launcher refuses it
		// (another user namespace).
		bound := l.jailCmd(uid, bin, "run", "--bind", filepath.Dir(sock), filepath.Dir(sock), "--", probe, "control-status-new", filepath.Dir(sock))
		bound.Stderr = os.Stderr
		bpipe, err := bound.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := bound.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(bpipe)
		if first, _ := br.ReadString('\n'); first != "waiting\n" {
			t.Fatalf("the bound sandbox's probe: %q", first)
		}
		later := l.startLive(t, uid, "")
		rest, _ := io.ReadAll(br)
		_ = bound.Wait()
		later.in.Close()
		if !strings.Contains(string(rest), "the peer runs in another user namespace") {
			t.Errorf("a sandbox given the control directory reached a launcher started after it: %s", rest)
		}

		// allow: in force for the next connection.
		called := time.Now()
		out, err := hostAs(uid, bin, "allow", st.ID, "--ip", labDevice).CombinedOutput()
		if err != nil {
			t.Fatalf("allow: %v: %s", err, out)
		}
		returned := time.Now()
		tries := 0
		for s.try(dev) != "ok" {
			tries++
			if time.Since(returned) > 10*time.Second {
				t.Fatalf("%s still refused 10 s after allow returned", dev)
			}
		}
		t.Logf("uid %d: the allow command took %v; from its return to %s through: %v (%d refused tries first)", uid, returned.Sub(called), dev, time.Since(returned), tries)
		if st2 := psFind(t, bin, uid, st.ID); len(st2.Allowed) != 1 || st2.Allowed[0] != labDevice+"/32" {
			t.Errorf("ps after allow: allowed %v", st2.Allowed)
		}

		// revoke: refused from the next connection on.
		if out, err := hostAs(uid, bin, "revoke", st.ID, "--ip", labDevice).CombinedOutput(); err != nil {
			t.Fatalf("revoke: %v: %s", err, out)
		}
		if got := s.try(dev); got == "ok" {
			t.Errorf("%s passes right after revoke returned", dev)
		}
		s.refusedFromNowOn(dev)
		// Names need a domain allowlist.
		out, err = hostAs(uid, bin, "allow", st.ID, "--domain", "example.test").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "without a domain allowlist") {
			t.Errorf("allow --domain without an allowlist: %v: %s", err, out)
		}

		// The change is logged, and named in the exit summary.
		s.in.Close()
		_ = s.cmd.Wait()
		log, _ := os.ReadFile(s.log)
		if !strings.Contains(string(log), "claude-sandbox allow ip "+labDevice+"/32") || !strings.Contains(string(log), "claude-sandbox revoke ip "+labDevice+"/32") {
			t.Errorf("the block log lacks the changes:\n%s", log)
		}
		// The audit log: the refusal, the flow allowed (by the rule
		// allow added), the reach changes, the policy changes.
		ab, _ := os.ReadFile(audit)
		for _, want := range []string{
			`"event":"flow","proto":"tcp","addr":"` + labDevice + `","port":5064,"verdict":"refused","rule":"private range 10.0.0.0/8"`,
			`"event":"flow","proto":"tcp","addr":"` + labDevice + `","port":5064,"verdict":"allowed","rule":"allow-ip ` + labDevice + `"`,
			`"event":"reach","change":"allow ip ` + labDevice + `/32"`,
			`"event":"reach","change":"revoke ip ` + labDevice + `/32"`,
			`"sandbox":"` + st.ID + `"`,
		} {
			if !strings.Contains(string(ab), want) {
				t.Errorf("the audit log lacks %s:\n%s", want, ab)
			}
		}
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Errorf("the socket outlived its launcher: %v", err)
		}
	})
}

// TestControlReachDomain: in a sandbox started with a domain allowlist,
// `allow ID --domain` lets the next lookup and connection to a name
// through, and `revoke` refuses it again.
func TestControlReachDomain(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		d := &namesLab{names: map[string]string{"api.test.": labInternet, "other.test.": labInternet}}
		l.serveNames(l.world, labDNS+":53", d)
		l.echoTCP(l.world, labInternet+":7000")
		s := l.startLive(t, uid, "", "--allow-domain", "api.test")
		if got := s.try("tcp-name api.test:7000"); got != "ok" {
			t.Fatalf("control: api.test: %s", got)
		}
		other := "tcp-name other.test:7000"
		if got := s.try(other); got == "ok" {
			t.Fatalf("%s passes before any allow", other)
		}
		st := psFind(t, bin, uid, "egressprobe")
		if !st.Names {
			t.Errorf("ps: no domain allowlist: %+v", st)
		}
		if out, err := hostAs(uid, bin, "allow", st.ID, "--domain", "other.test:7000").CombinedOutput(); err != nil {
			t.Fatalf("allow --domain: %v: %s", err, out)
		}
		if got := s.try(other); got != "ok" {
			t.Errorf("%s after allow: %s", other, got)
		}
		if out, err := hostAs(uid, bin, "revoke", st.ID, "--domain", "other.test:7000").CombinedOutput(); err != nil {
			t.Fatalf("revoke --domain: %v: %s", err, out)
		}
		if got := s.try(other); got == "ok" {
			t.Errorf("%s passes after revoke", other)
		}
	})
}

// TestControlReachSummary: the exit summary names the reach changed
// while the sandbox ran.
func TestControlReachSummary(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		cmd := l.jailCmd(uid, bin, "run", "--", "/bin/sh", "-c", "read x")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { in.Close(); _ = cmd.Wait() }()
		st := psFind(t, bin, uid, "read x")
		var out []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			// Until the jail is attached ("not up yet").
			if out, err = hostAs(uid, bin, "allow", st.ID, "--ip", labDevice).CombinedOutput(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("allow: %v: %s", err, out)
		}
		in.Close()
		_ = cmd.Wait()
		if !strings.Contains(stderr.String(), "claude-sandbox: reach changed while running: ") || !strings.Contains(stderr.String(), "allow ip "+labDevice+"/32") {
			t.Errorf("the exit summary does not name the change:\n%s", stderr.String())
		}
	})
}
