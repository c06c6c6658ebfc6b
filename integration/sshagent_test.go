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

func sshAgentLab(t *testing.T, bin, vp string, uid int) {
	l := newLab(t)
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

	inside := `set -u
echo "listed: $(ssh-add -L | wc -l) $(ssh-add -L | cut -d' ' -f3)"
test -e ` + key + ` && echo "KEY VISIBLE"
cat ` + key + ` 2>/dev/null && echo "KEY READABLE"
SSH_AUTH_SOCK=` + sock + ` ssh-add -L >/dev/null 2>&1 && echo "HOST AGENT REACHABLE"
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
