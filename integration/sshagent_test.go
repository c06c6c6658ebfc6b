package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// The --ssh-agent lab: two OpenSSH servers in the lab's world, forge.test
// (its host key in the caller's known_hosts, hashed; a bare git
// repository) and other.test (another host key), both accepting the same
// user key, which an ssh-agent on the lab host holds.
const (
	labForge = "203.0.113.22"
	labOther = "203.0.113.23"
)

func init() {
	labNames["forge.test."] = labForge
	labNames["other.test."] = labOther
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// sshd starts an OpenSSH server in the lab's world at addr:22 with the
// host key hostKey, letting root in with the keys in authorized.
func (l *lab) sshd(t *testing.T, dir, addr, hostKey, authorized string) {
	t.Helper()
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sshd_config_"+addr)
	conf := fmt.Sprintf(`ListenAddress %s:22
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
LogLevel VERBOSE
`, addr, hostKey, authorized)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", l.world, "/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	log, err := os.Create(cfg + ".log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(cfg + ".log")
			t.Logf("sshd %s log:\n%s", addr, b)
		}
	})
}

func TestSSHAgentLab(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Fatal("openssh-server is needed (scripts/test.sh installs it)")
	}
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	vp := testutil.Build(t, "./integration/verifyprobe")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) { sshAgentLab(t, bin, vp, uid) })
	}
}

// sshForge is the lab's forge set-up for one caller.
type sshForge struct {
	srv     string   // the servers' directory (forge.git, keys)
	home    string   // the caller's home
	key     string   // the caller's private key file (~/.ssh/id_ed25519)
	userPub string   // its public key line
	sock    string   // the caller's agent's socket, holding the key and a spare
	env     []string // the caller's environment (HOME, SSH_AUTH_SOCK, PATH)
}

// newSSHForge starts forge.test and other.test in l's world and the
// caller's agent on the lab host, for uid.
func newSSHForge(t *testing.T, l *lab, uid int) sshForge {
	l.dns(l.world, labDNS+":53")
	for _, a := range []string{labForge, labOther} {
		ip(t, "-n", l.world, "addr", "add", a+"/32", "dev", "lo")
	}
	srv := testutil.MkdirFor(t, 0)
	for _, n := range []string{"forge_host", "other_host", "user"} {
		sh(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", n, "-f", filepath.Join(srv, n))
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(srv, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	userPub := read("user.pub")
	if err := os.WriteFile(filepath.Join(srv, "authorized_keys"), []byte(userPub+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, "git", "init", "-q", "--bare", filepath.Join(srv, "forge.git"))
	l.sshd(t, srv, labForge, filepath.Join(srv, "forge_host"), filepath.Join(srv, "authorized_keys"))
	l.sshd(t, srv, labOther, filepath.Join(srv, "other_host"), filepath.Join(srv, "authorized_keys"))

	// The caller: a home with the private key and a known_hosts (hashed)
	// holding forge.test's key, an agent in the lab host's namespace
	// holding the key, its socket outside the home.
	d := testutil.MkdirFor(t, uid)
	home := filepath.Join(d, "home")
	for _, p := range []string{home, filepath.Join(home, ".ssh"), filepath.Join(d, "agent")} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key := filepath.Join(home, ".ssh", "id_ed25519")
	if err := os.WriteFile(key, []byte(read("user")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fh := strings.Fields(read("forge_host.pub"))
	if err := os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte("forge.test "+fh[0]+" "+fh[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, "ssh-keygen", "-q", "-H", "-f", filepath.Join(home, ".ssh", "known_hosts"))
	// A second key in the agent that the sandbox must not see.
	sh(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "spare", "-f", filepath.Join(home, ".ssh", "spare"))
	sh(t, "chown", "-R", fmt.Sprintf("%d:%d", uid, uid), d)
	sock := filepath.Join(d, "agent", "agent.sock")
	agentCmd := exec.Command("ip", "netns", "exec", l.host, "setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", "--", "ssh-agent", "-D", "-a", sock)
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agentCmd.Process.Kill(); _ = agentCmd.Wait() })
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "SSH_AUTH_SOCK=" + sock}
	for _, k := range []string{"id_ed25519", "spare"} {
		var r testutil.Result
		for i := 0; i < 100; i++ { // until the agent listens (no timing assertion)
			r = testutil.Run(t, testutil.As(uid, env, "ssh-add", "-q", filepath.Join(home, ".ssh", k)))
			if r.Code == 0 {
				break
			}
			_ = exec.Command("sleep", "0.05").Run()
		}
		if r.Code != 0 {
			t.Fatalf("ssh-add: %s", r)
		}
	}

	return sshForge{srv: srv, home: home, key: key, userPub: userPub, sock: sock, env: env}
}

func sshAgentLab(t *testing.T, bin, vp string, uid int) {
	l := newLab(t)
	f := newSSHForge(t, l, uid)
	srv, key, userPub, sock, env := f.srv, f.key, f.userPub, f.sock, f.env
	inside := `set -u
echo "listed: $(ssh-add -L | wc -l) $(ssh-add -L | cut -d' ' -f3)"
test -e ` + key + ` && echo "KEY VISIBLE"
cat ` + key + ` 2>/dev/null && echo "KEY READABLE"
SSH_AUTH_SOCK=` + sock + ` ssh-add -L >/dev/null 2>&1 && echo "HOST AGENT REACHABLE"
unshare -U ssh-add -L | grep -q . && echo "NESTED USERNS LISTED"
cd /tmp && git init -q r && cd r && git -c user.email=a@b.test -c user.name=a commit -q --allow-empty -m lab &&
  git push -q root@forge.test:` + filepath.Join(srv, "forge.git") + ` HEAD:refs/heads/main && echo "PUSH OK"
ssh -F /run/claude-sandbox/ssh_config -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no root@other.test true && echo "OTHER OK"
echo "` + userPub + `" > /tmp/u.pub && ssh-add -T /tmp/u.pub && echo "UNBOUND SIGNED"
` + vp + ` openings
echo end
`
	cmd := l.jailCmd(uid, bin, "run", "--ssh-agent", "forge.test", "--ssh-key", userPub, "--allow-domain", "other.test:22", "--", "sh", "-c", inside)
	cmd.Env = env
	r := testutil.Run(t, cmd)
	t.Logf("%s", r)
	if !strings.Contains(r.Stdout, "listed: 1 user") {
		t.Errorf("ssh-add -L inside does not list exactly the allowed key")
	}
	for _, bad := range []string{"KEY VISIBLE", "KEY READABLE", "HOST AGENT REACHABLE", "OTHER OK", "UNBOUND SIGNED"} {
		if strings.Contains(r.Stdout, bad) {
			t.Errorf("inside: %s", bad)
		}
	}
	// A tool of the sandbox in a user namespace of its own (unshare,
	// bwrap, a nested sandbox) is the sandbox's: the agent serves it.
	if !strings.Contains(r.Stdout, "NESTED USERNS LISTED") {
		t.Errorf("ssh-add -L from a user namespace nested in the sandbox's lists nothing")
	}
	if !strings.Contains(r.Stdout, "P93 OPEN ssh-agent host forge.test:") {
		t.Errorf("verify inside does not name the opening (P93)")
	}
	if !strings.Contains(r.Stdout, "PUSH OK") || !strings.Contains(r.Stdout, "end") {
		t.Errorf("git push over SSH to forge.test failed")
	}
	if out, err := exec.Command("git", "--git-dir", filepath.Join(srv, "forge.git"), "log", "--format=%s", "main").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "lab" {
		t.Errorf("forge.git's main: %q %v", out, err)
	}
	if !strings.Contains(r.Stderr, "ssh-agent: refused a signature") {
		t.Errorf("the refusal for other.test was not reported")
	}
	if !strings.Contains(r.Stderr, "refused a signature (unbound): the connection is not bound") {
		t.Errorf("the unbound signature (ssh-add -T) was not refused and reported")
	}
	if !strings.Contains(r.Stderr, "ssh-agent: signed 1 time for forge.test; refused 2 ") {
		t.Errorf("no exit summary of the agent")
	}
}

// The claude shadow with ssh-agent in its configuration, signing with a
// key file the launcher reads (ssh-key-file), in the lab as root and as
// uid 65534: git push over SSH to forge.test works inside the session;
// ssh-add -L lists only the key file's key (not the caller's agent's);
// the key file and the caller's agent socket are not reachable inside;
// ssh to other.test is refused; the audit log has an ssh-sign line for
// forge.test and an ssh-refuse line.
func TestSSHAgentShadowKeyFile(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Fatal("openssh-server is needed (scripts/test.sh installs it)")
	}
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		f := newSSHForge(t, l, uid)
		audit := filepath.Join(testutil.MkdirFor(t, uid), "audit.jsonl")
		ws := filepath.Join(f.home, "project")
		must(t, os.Mkdir(ws, 0o755))
		must(t, os.Chown(ws, uid, uid))
		inside := `#!/bin/sh
echo "listed: $(ssh-add -L | wc -l) $(ssh-add -L | cut -d' ' -f3)"
test -e ` + f.key + ` && echo "KEY VISIBLE"
cat ` + f.key + ` 2>/dev/null && echo "KEY READABLE"
SSH_AUTH_SOCK=` + f.sock + ` ssh-add -L >/dev/null 2>&1 && echo "HOST AGENT REACHABLE"
cd /tmp && git init -q r && cd r && git -c user.email=a@b.test -c user.name=a commit -q --allow-empty -m shadow &&
  git push -q root@forge.test:` + filepath.Join(f.srv, "forge.git") + ` HEAD:refs/heads/main && echo "PUSH OK"
ssh -F /run/claude-sandbox/ssh_config -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no root@other.test true && echo "OTHER OK"
echo end
`
		conf := fmt.Sprintf("ssh-agent = forge.test\nssh-key-file = %s\naudit-log = %s\nallow-domain = other.test:22\n", f.key, audit)
		prelude, claude := shadowHost(t, conf, inside)
		inner := fmt.Sprintf("%s && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && cd %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s -p x",
			prelude, ws, uid, uid, strings.Join(append(f.env, "USER=tester"), " "), claude)
		cmd := exec.Command("ip", "netns", "exec", l.host, "sh", "-c", inner)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		r := testutil.Run(t, cmd)
		t.Logf("%s", r)
		if !strings.Contains(r.Stdout, "listed: 1 id_ed25519\n") {
			t.Errorf("ssh-add -L inside does not list exactly the key file's key")
		}
		for _, bad := range []string{"KEY VISIBLE", "KEY READABLE", "HOST AGENT REACHABLE", "OTHER OK"} {
			if strings.Contains(r.Stdout, bad) {
				t.Errorf("inside: %s", bad)
			}
		}
		if !strings.Contains(r.Stdout, "PUSH OK") || !strings.Contains(r.Stdout, "end") {
			t.Errorf("git push over SSH to forge.test failed")
		}
		if out, err := exec.Command("git", "--git-dir", filepath.Join(f.srv, "forge.git"), "log", "--format=%s", "main").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "shadow" {
			t.Errorf("forge.git's main: %q %v", out, err)
		}
		if !strings.Contains(r.Stderr, "ssh-agent: signed 1 time for forge.test; refused 1 ") {
			t.Errorf("no exit summary of the agent")
		}
		b, err := os.ReadFile(audit)
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		if !strings.Contains(log, `"event":"ssh-sign","host":"forge.test","key":"SHA256:`) {
			t.Errorf("no ssh-sign line for forge.test in the audit log:\n%s", log)
		}
		if !strings.Contains(log, `"event":"ssh-refuse","reason":"the connection is bound to a host key that is no allowed host's`) {
			t.Errorf("no ssh-refuse line for other.test in the audit log:\n%s", log)
		}
	})
}
