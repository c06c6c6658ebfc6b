package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/sshagent"
)

// TestSSHConfirmLab: with --ask --ssh-confirm, in the ssh lab as root and
// as uid 65534, a git push to forge.test waits for its signature's
// request (kind ssh-sign, listed by requests --json with the host, the
// key's fingerprint and the ssh client); approve --once lets the push
// complete; a second push asks again, approve --always is refused (the
// request stays), and deny makes the push fail: the audit log has an
// ssh-refuse line with reason "denied", the exit summary counts it.
func TestSSHConfirmLab(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Fatal("openssh-server is needed (scripts/test.sh installs it)")
	}
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		f := newSSHForge(t, l, uid)
		fp, err := sshagent.KeyFingerprint(f.userPub)
		if err != nil {
			t.Fatal(err)
		}
		audit := filepath.Join(testutil.MkdirFor(t, uid), "audit.jsonl")
		repo := filepath.Join(f.srv, "forge.git")
		inside := `set -u
cd /tmp && git init -q r && cd r && git -c user.email=a@b.test -c user.name=a commit -q --allow-empty -m first &&
  git push -q root@forge.test:` + repo + ` HEAD:refs/heads/main && echo "PUSH1 OK"
git -c user.email=a@b.test -c user.name=a commit -q --allow-empty -m second &&
  git push -q root@forge.test:` + repo + ` HEAD:refs/heads/main && echo "PUSH2 OK" || echo "PUSH2 FAILED"
echo end
`
		cmd := l.jailCmd(uid, bin, "run", "--ask", "--ask-timeout", "2m", "--ssh-confirm", "--ssh-agent", "forge.test", "--ssh-key", f.userPub, "--audit-log", audit, "--", "sh", "-c", inside)
		cmd.Env = f.env
		done := make(chan testutil.Result, 1)
		go func() { done <- testutil.Run(t, cmd) }()

		// Other sandboxes (other tests, other users of the machine) may
		// have requests meanwhile: this one's are the key's.
		isSign := func(q ask.Request) bool { return q.Kind == ask.KindSSHSign && q.Key == fp }
		ref := func(q ask.Request) string { return q.Sandbox + "/" + strconv.Itoa(q.ID) }
		q := waitRequest(t, bin, uid, isSign)
		if q.Proto != "ssh" || q.Name != "forge.test" || q.Port != 22 || q.Key != fp {
			t.Errorf("request %+v, want ssh forge.test:22 key %s", q, fp)
		}
		if q.Who == nil || q.Who.PID <= 0 || len(q.Who.Argv) == 0 || q.Who.Argv[0] != "ssh" {
			t.Errorf("request's process %+v, want the ssh client", q.Who)
		}
		// The push waits: nothing reached the forge yet.
		if out, err := exec.Command("git", "--git-dir", repo, "rev-parse", "-q", "--verify", "main").CombinedOutput(); err == nil {
			t.Errorf("forge.git has main before the approval: %s", out)
		}
		if out, err := hostAs(uid, bin, "approve", ref(q), "--once").CombinedOutput(); err != nil {
			t.Fatalf("approve --once: %v: %s", err, out)
		}
		q2 := waitRequest(t, bin, uid, func(r ask.Request) bool { return isSign(r) && r.ID != q.ID })
		if q2.Sandbox != q.Sandbox {
			t.Fatalf("the second signature's request is another sandbox's: %+v", q2)
		}
		out, err := hostAs(uid, bin, "approve", ref(q2), "--always").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "never stored for later sandboxes") {
			t.Errorf("approve --always of an ssh-sign request: %v: %s", err, out)
		}
		if q := waitRequest(t, bin, uid, func(r ask.Request) bool { return r.Sandbox == q2.Sandbox && r.ID == q2.ID }); q.ID != q2.ID {
			t.Errorf("the signature's request ended on approve --always")
		}
		if out, err := hostAs(uid, bin, "deny", ref(q2)).CombinedOutput(); err != nil {
			t.Fatalf("deny: %v: %s", err, out)
		}
		r := <-done
		t.Logf("%s", r)
		if !strings.Contains(r.Stdout, "PUSH1 OK") || !strings.Contains(r.Stdout, "PUSH2 FAILED") || !strings.Contains(r.Stdout, "end") {
			t.Errorf("want the first push through, the second refused")
		}
		if out, err := exec.Command("git", "--git-dir", repo, "log", "--format=%s", "main").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "first" {
			t.Errorf("forge.git's main: %q %v", out, err)
		}
		if !strings.Contains(r.Stderr, "asks for an ssh signature for forge.test with key "+fp) {
			t.Errorf("no notice naming the signature's request")
		}
		if !strings.Contains(r.Stderr, "refused a signature (forge.test): denied") {
			t.Errorf("the denied signature was not reported")
		}
		if !strings.Contains(r.Stderr, "ssh-agent: signed 1 time for forge.test; refused 1 (1 forge.test)") {
			t.Errorf("no exit summary of the agent")
		}
		b, err := os.ReadFile(audit)
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		hasLine := func(parts ...string) bool {
			for _, line := range strings.Split(log, "\n") {
				all := true
				for _, p := range parts {
					all = all && strings.Contains(line, p)
				}
				if all {
					return true
				}
			}
			return false
		}
		key := `"key":"` + fp + `"`
		if !hasLine(`"event":"ssh-refuse"`, `"reason":"denied"`, `"host":"forge.test"`, key) {
			t.Errorf("no ssh-refuse line with reason denied in the audit log:\n%s", log)
		}
		if !hasLine(`"event":"ssh-sign"`, `"host":"forge.test"`, key) {
			t.Errorf("no ssh-sign line in the audit log:\n%s", log)
		}
		if !hasLine(`"event":"request"`, `"proto":"ssh"`, `"name":"forge.test"`, `"verdict":"approved once"`, key) {
			t.Errorf("no request line approved once in the audit log:\n%s", log)
		}
		if !hasLine(`"event":"request"`, `"proto":"ssh"`, `"verdict":"denied"`, key) {
			t.Errorf("no request line denied in the audit log:\n%s", log)
		}
	})
}
