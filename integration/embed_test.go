package integration

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// runPlan applies p through the engine's Go API (the embedrun helper) as
// uid, and returns what happened.
func runPlan(t *testing.T, uid int, p *plan.Plan) testutil.Result {
	t.Helper()
	bin := testutil.Build(t, "./integration/embedrun")
	dir := testutil.MkdirFor(t, uid)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := testutil.As(uid, []string{"PATH=/usr/bin:/bin"}, bin, f)
	cmd.Dir = "/"
	return testutil.Run(t, cmd)
}

// A generated file appears read-only at its destination, with its
// content, and nothing is written on the host.
func TestGeneratedFile(t *testing.T) {
	for _, uid := range []int{0, testutil.Nobody} {
		testutil.NeedsRoot(t)
		testutil.NeedsUserNS(t)
		p, err := plan.Build(plan.Options{
			Command: []string{"/bin/sh", "-c", "cat /etc/claude-sandbox-test.conf; stat -c %a /etc/claude-sandbox-test.conf; echo x >> /etc/claude-sandbox-test.conf || echo refused"},
			UID:     uid, GID: uid,
			// Root here is host root: the engine refuses a plan without
			// the kernel covers for it.
			HostRoot: uid == 0,
			Net:      plan.NetNone,
			Ops:      []mounts.Op{{Kind: mounts.File, Dst: "/etc/claude-sandbox-test.conf", Data: "nameserver 192.0.2.53\n", Mode: 0o444}},
		})
		if err != nil {
			t.Fatal(err)
		}
		// /etc/claude-sandbox-test.conf does not exist on the host and /etc
		// is read-only inside: put a tmpfs over a fresh parent instead.
		for i := range p.Mounts {
			if p.Mounts[i].Kind == mounts.File {
				p.Mounts[i].Dst = "/tmp/etc/claude-sandbox-test.conf"
			}
		}
		p.Argv[2] = strings.ReplaceAll(p.Argv[2], "/etc/", "/tmp/etc/")
		r := runPlan(t, uid, p)
		if r.Code != 0 || r.Stdout != "nameserver 192.0.2.53\n444\nrefused\n" {
			t.Errorf("uid %d: generated file: %v", uid, r)
		}
	}
}

// A generated file can replace an existing host file (the way a jail's
// resolv.conf replaces the host's); the host file is untouched.
func TestGeneratedFileOverHostFile(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	before, err := os.ReadFile("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(plan.Options{
		Command: []string{"/bin/cat", "/etc/hostname"},
		UID:     testutil.Nobody, GID: testutil.Nobody,
		Net: plan.NetNone,
		Ops: []mounts.Op{{Kind: mounts.File, Dst: "/etc/hostname", Data: "from-the-plan\n"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := runPlan(t, testutil.Nobody, p); r.Code != 0 || r.Stdout != "from-the-plan\n" {
		t.Errorf("file over /etc/hostname: %v", r)
	}
	if after, _ := os.ReadFile("/etc/hostname"); string(after) != string(before) {
		t.Errorf("host /etc/hostname changed: %q -> %q", before, after)
	}
}

// A program whose main forgot sandbox.Init() cannot start a sandbox: the
// re-executed binary runs main again instead of the stage, and the launch
// fails at once with the fix named, for every network mode, rather than
// hang or recurse. The jail case runs in a lab network: were the launch
// to get as far as the jail, nothing it sends would leave the test's
// namespaces.
func TestEmbedForgotInit(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./integration/noinit")
	for _, uid := range []int{0, testutil.Nobody} {
		for _, net := range []string{"none", "jail"} {
			cmd := testutil.As(uid, []string{"PATH=/usr/bin:/bin"}, bin, net)
			cmd.Dir = "/"
			if net == "jail" {
				cmd = newLab(t).jailCmd(uid, bin, net)
			}
			r := testutil.Run(t, cmd)
			if r.Code != 3 || !strings.Contains(r.Stdout, "Call sandbox.Init() (or nsexec.Init()) as the first statement of main") || strings.Contains(r.Stdout, "sandboxed") {
				t.Errorf("uid %d, net %s: a main without Init: %v", uid, net, r)
			}
		}
	}
}

// The examples/embed program, built and run the way its documentation
// says, in the lab network as root and as nobody: the writable directory
// is written through, the flows the jail blocks are reported as they
// happen with their rule (and the allowed one connects), and a cancelled
// run ends with nothing left in its PID namespace.
func TestEmbedExampleProgram(t *testing.T) {
	bin := testutil.Build(t, "./examples/embed")
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.world, labInternet+":80")
		dir := testutil.MkdirFor(t, uid)
		dial := strings.Join([]string{labInternet + ":80", labDevice + ":22", labMetadata + ":80"}, ",")
		r := testutil.Run(t, l.jailCmd(uid, bin, "-dir", dir, "-dial", dial))
		if r.Code != 0 {
			t.Fatalf("examples/embed: %v", r)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "from-the-sandbox")); err != nil || string(b) != "hello\n" {
			t.Errorf("the writable directory: %q, %v", b, err)
		}
		for _, want := range []string{
			"/usr is read-only\n",
			"writable: exit 0\n",
			"inside: " + labInternet + ":80: connected\n",
			"blocked: tcp " + labDevice + ":22 (private range 10.0.0.0/8)\n",
			"blocked: tcp " + labMetadata + ":80 (",
			"blocked by: embed, pid ", // the event names the process
			"inside: " + labDevice + ":22: dial tcp " + labDevice + ":22: connect: connection refused\n",
			"jail: exit 0\n",
			"cancel: exit 137 (context canceled); processes left in its PID namespace: 0\n",
		} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("output lacks %q:\n%v", want, r)
			}
		}
		if strings.Contains(r.Stdout, "blocked: tcp "+labInternet) {
			t.Errorf("the allowed flow was reported blocked:\n%s", r.Stdout)
		}
	})
}

// The embedding API reports the jail's live policy: with a jailed command
// running through examples/embed -watch, an address the lab host gains
// is an EventPolicy naming its subnet as blocked. As root and as nobody.
func TestEmbedPolicyEvents(t *testing.T) {
	bin := testutil.Build(t, "./examples/embed")
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		cmd := l.jailCmd(uid, bin, "-watch")
		// Written by exec's copy goroutine while the failure paths
		// below read it: a lockedBuf, not a bare Builder.
		var stderr lockedBuf
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		br := bufio.NewReader(out)
		if line, err := br.ReadString('\n'); err != nil || line != "watch: ready\n" {
			t.Fatalf("examples/embed -watch: %q %v\n%s", line, err, stderr.String())
		}
		ip(t, "-n", l.host, "addr", "add", "198.19.77.1/24", "dev", l.vh)
		defer ip(t, "-n", l.host, "addr", "del", "198.19.77.1/24", "dev", l.vh)
		rest, _ := io.ReadAll(br)
		if err := cmd.Wait(); err != nil {
			t.Errorf("examples/embed -watch: %v\n%s", err, stderr.String())
		}
		if !strings.Contains(string(rest), "policy: blocked 198.19.77.0/24 (") {
			t.Errorf("no policy event for the address the host gained:\n%s\n%s", rest, stderr.String())
		}
	})
}
