package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/approvals"
	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestApprovalsAlways: `allow ID --ip ... --always` stores the entry for
// the sandbox's workspace; the next launch in that workspace (a restart:
// the first sandbox has ended) lists it in plan --json and reaches the
// address, and its exit summary names it; from inside, the store is not
// writable; a launch whose writable bind covers the store, and a store
// file that is a FIFO or bad JSON, apply nothing (a warning names the
// fix); `approvals remove` takes it back.
func TestApprovalsAlways(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		probe := testutil.Build(t, "./integration/probe")
		l.echoTCP(l.world, labDevice+":5064")
		base := testutil.MkdirFor(t, uid)
		state := filepath.Join(base, "state")
		ws := filepath.Join(base, "ws")
		for _, d := range []string{state, ws} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		env := func(cmd *exec.Cmd) *exec.Cmd {
			cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+state)
			cmd.Dir = ws
			return cmd
		}
		jailed := func(args ...string) testutil.Result { return testutil.Run(t, env(l.jailCmd(uid, bin, args...))) }
		host := func(args ...string) testutil.Result { return testutil.Run(t, env(hostAs(uid, bin, args...))) }
		approvedIn := func(r testutil.Result) []string {
			var p struct {
				Egress struct {
					Allow    []string `json:"allow"`
					Approved []string `json:"approved"`
				} `json:"egress"`
			}
			if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
				t.Fatalf("plan --json: %v: %+v", err, r)
			}
			return p.Egress.Approved
		}
		dev := labDevice + ":5064"
		if got := approvedIn(jailed("plan", "--json", "--", "true")); len(got) != 0 {
			t.Fatalf("approved before any: %v", got)
		}

		// Stored from a running sandbox.
		cmd := env(l.jailCmd(uid, bin, "run", "--", "/bin/sh", "-c", "read x"))
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		st := psFind(t, bin, uid, "read x")
		var r testutil.Result
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if r = host("allow", st.ID, "--ip", labDevice, "--host-port", "5432", "--always"); r.Code == 0 {
				break
			}
		}
		in.Close()
		_ = cmd.Wait()
		if r.Code != 0 || !strings.Contains(r.Stdout, "approved always for "+ws) {
			t.Fatalf("allow --always: %+v", r)
		}
		// A host port changes live too (ask mode's live --host-port),
		// then is stored like the rest.
		if !strings.Contains(r.Stdout, st.ID+": allow host-port 5432/tcp") || !strings.Contains(r.Stdout, "approved always for "+ws+": host-port 5432/tcp\n") {
			t.Errorf("allow --always --host-port: %+v", r)
		}
		if r := host("approvals", "remove", "host-port 5432/tcp"); r.Code != 0 {
			t.Errorf("approvals remove host-port: %+v", r)
		}
		if r := host("approvals", "--json"); !strings.Contains(r.Stdout, `"value": "`+labDevice+`/32"`) {
			t.Fatalf("approvals --json: %+v", r)
		}

		// The next launch: applied.
		want := "ip " + labDevice + "/32"
		if got := approvedIn(jailed("plan", "--json", "--", "true")); len(got) != 1 || got[0] != want {
			t.Errorf("plan --json approved %v, want [%s]", got, want)
		}
		r = jailed("run", "--", probe, "tcp", dev)
		if !strings.HasPrefix(r.Stdout, "ok") || !strings.Contains(r.Stderr, "claude-sandbox: approved always: "+labDevice+"/32") {
			t.Errorf("the launch after the approval: %+v", r)
		}

		// From inside: the store is not writable.
		store := filepath.Join(state, "claude-sandbox", "approvals")
		r = jailed("run", "--", "/bin/sh", "-c", `for f in "$1"/*.json; do echo '{}' > "$f" && echo wrote; done; echo x > "$1"/new.json && echo created; true`, "sh", store)
		if strings.Contains(r.Stdout, "wrote") || strings.Contains(r.Stdout, "created") {
			t.Fatalf("the sandbox wrote its approvals store: %+v", r)
		}
		t.Logf("writing the store from inside: %s", strings.TrimSpace(r.Stderr))

		// A writable bind covering the store: nothing applied.
		r = jailed("plan", "--json", "--bind", state, state, "--", "true")
		if got := approvedIn(r); len(got) != 0 || !strings.Contains(r.Stderr, "approvals not applied") || !strings.Contains(r.Stderr, "may write") {
			t.Errorf("a bind over the store: approved %v\n%s", got, r.Stderr)
		}
		r = jailed("run", "--bind", state, state, "--", probe, "tcp", dev)
		if strings.HasPrefix(r.Stdout, "ok") {
			t.Errorf("approved reach applied with the store bound writable: %+v", r)
		}

		// A hostile store file: refused whole.
		files, _ := filepath.Glob(filepath.Join(store, "*.json"))
		if len(files) != 1 {
			t.Fatalf("store files %v", files)
		}
		good, _ := os.ReadFile(files[0])
		for name, make := range map[string]func(string) error{
			"fifo":     func(p string) error { return unix.Mkfifo(p, 0o600) },
			"bad json": func(p string) error { return os.WriteFile(p, []byte(`{"v":1,`), 0o600) },
			"symlink":  func(p string) error { return os.Symlink("/etc/passwd", p) },
		} {
			os.Remove(files[0])
			if err := make(files[0]); err != nil {
				t.Fatal(err)
			}
			_ = os.Lchown(files[0], uid, uid)
			r := jailed("plan", "--json", "--", "true")
			if got := approvedIn(r); len(got) != 0 || !strings.Contains(r.Stderr, "approvals not applied") || !strings.Contains(r.Stderr, "remove the file") {
				t.Errorf("%s: approved %v\n%s", name, got, r.Stderr)
			}
			if r := host("approvals"); r.Code == 0 {
				t.Errorf("%s: approvals listed it: %+v", name, r)
			}
		}
		os.Remove(files[0])
		if err := os.WriteFile(files[0], good, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(files[0], uid, uid); err != nil {
			t.Fatal(err)
		}

		// remove.
		if r := host("approvals", "remove", "1"); r.Code != 0 || !strings.Contains(r.Stdout, "removed: "+want) {
			t.Errorf("approvals remove: %+v", r)
		}
		if got := approvedIn(jailed("plan", "--json", "--", "true")); len(got) != 0 {
			t.Errorf("approved after remove: %v", got)
		}
	})
}

// TestApprovalsShadow: the shadow's session in a workspace with an
// approval reaches the approved address, and its exit summary names it.
func TestApprovalsShadow(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.world, labDevice+":5064")
		probe := testutil.Build(t, "./integration/probe")
		fake := fmt.Sprintf("#!/bin/sh\necho \"device: $(%s tcp %s:5064)\"\n", probe, labDevice)
		prelude, claude := shadowHost(t, "", fake)
		home := testutil.MkdirFor(t, uid)
		ws := home + "/project"
		must(t, os.MkdirAll(ws, 0o755))
		must(t, os.Chown(ws, uid, uid))
		state := filepath.Join(home, ".local", "state")
		s := approvals.Store{Dir: filepath.Join(state, "claude-sandbox", "approvals")}
		if _, _, err := s.Add(ws, approvals.Entry{Kind: approvals.IP, Value: labDevice}); err != nil {
			t.Fatal(err)
		}
		must(t, filepath.Walk(filepath.Join(home, ".local"), func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, uid)
		}))
		env := []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin"}
		inner := fmt.Sprintf("%s && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200 && cd %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s -p x",
			prelude, ws, uid, uid, strings.Join(env, " "), claude)
		cmd := exec.Command("ip", "netns", "exec", l.host, "sh", "-c", inner)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		r := testutil.Run(t, cmd)
		if !strings.Contains(r.Stdout, "device: ok") || !strings.Contains(r.Stderr, "approved always: "+labDevice+"/32") {
			t.Errorf("the shadow's session with an approval: %v", r)
		}
	})
}
