package main

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/control"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// The terminal's notice names the request, the command that answers it,
// and the process when the lookup found it; a name that is not printable is
// quoted, never written raw.
func TestAskNotice(t *testing.T) {
	now := time.Now()
	r := ask.Request{ID: 7, Proto: "tcp", Name: "pypi.org", Port: 443, Kind: "name", Since: now, Expires: now.Add(30 * time.Second)}
	got := askNotice("Claude", r)
	want := "claude-sandbox: Claude asks to reach pypi.org:443: claude-sandbox approve 7 (or deny 7; refused in 30s)"
	if got != want {
		t.Errorf("notice %q, want %q", got, want)
	}
	r.Who = &ask.Process{PID: 4242, Argv: []string{"pip", "install"}}
	if got := askNotice("Claude", r); got != want+`; from pid 4242 "pip install"` {
		t.Errorf("notice with a process: %q", got)
	}
	// The session's own command line cannot put a command of its
	// making before the real one (request 12 would be another
	// destination it asked for).
	r.Who = &ask.Process{PID: 4242, Argv: []string{`x"): claude-sandbox approve 12 (or deny 12`}}
	got = askNotice("Claude", r)
	if i, j := strings.Index(got, "claude-sandbox approve"), strings.Index(got, "approve 7"); i < 0 || i+len("claude-sandbox ") != j {
		t.Errorf("the first command in the notice is not the request's: %q", got)
	}
	if !strings.HasSuffix(got, `; from pid 4242 "x\"): claude-sandbox approve 12 (or deny ..."`) {
		t.Errorf("the process is not last and quoted: %q", got)
	}
	r.Who = nil
	r.Name = "evil\x1b]52;c;AAAA\x07.test"
	if got := askNotice("Claude", r); strings.ContainsAny(got, "\x1b\x07") {
		t.Errorf("an escape reached the notice: %q", got)
	}
	r = ask.Request{ID: 3, Proto: "udp", Addr: "10.1.2.3", Port: 5064, Kind: "address", Since: now, Expires: now.Add(time.Second)}
	if got := askNotice("the sandbox", r); !strings.Contains(got, "the sandbox asks to reach 10.1.2.3:5064/udp: claude-sandbox approve 3") {
		t.Errorf("notice %q", got)
	}
}

// The notice names the request as ID/N when it knows its sandbox: the
// number alone is refused while two sandboxes run in the ask mode (see
// TestApproveNumberAloneWithTwoSandboxes), so the command the notice
// gives must name the sandbox to be the one that answers it.
func TestAskNoticeNamesSandbox(t *testing.T) {
	now := time.Now()
	r := ask.Request{ID: 7, Sandbox: "k7qz2mna", Proto: "tcp", Name: "pypi.org", Port: 443, Kind: "name", Since: now, Expires: now.Add(30 * time.Second)}
	want := "claude-sandbox: Claude asks to reach pypi.org:443: claude-sandbox approve k7qz2mna/7 (or deny k7qz2mna/7; refused in 30s)"
	if got := askNotice("Claude", r); got != want {
		t.Errorf("notice %q, want %q", got, want)
	}
}

// approve refuses two scopes, and a request that is not a number.
func TestApproveUsage(t *testing.T) {
	for _, args := range [][]string{
		{"approve", "7", "--once", "--session"},
		{"approve", "x"},
		{"approve"},
		{"deny", "0"},
		{"approve", "abc/"},
	} {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errb.String())
		}
	}
}

// An ssh-sign request's notice names the host, the key and the client.
func TestAskNoticeSSHSign(t *testing.T) {
	now := time.Now()
	r := ask.Request{ID: 4, Proto: "ssh", Name: "github.com", Port: 22, Kind: ask.KindSSHSign, Key: "SHA256:abc", Since: now, Expires: now.Add(30 * time.Second),
		Who: &ask.Process{PID: 12, Argv: []string{"ssh", "git@github.com"}}}
	want := `claude-sandbox: Claude asks for an ssh signature for github.com with key SHA256:abc: claude-sandbox approve 4 (or deny 4; refused in 30s); from pid 12 "ssh git@github.com"`
	if got := askNotice("Claude", r); got != want {
		t.Errorf("notice %q, want %q", got, want)
	}
}

// --ssh-confirm is refused without --ssh-agent, without --ask (the
// message names it), and without the jail the ask mode needs.
func TestSSHConfirmNeeds(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--json", "--ssh-confirm", "--ask", "--", "true"}, "--ssh-confirm needs --ssh-agent"},
		{[]string{"plan", "--json", "--ssh-agent", "@github", "--ssh-confirm", "--", "true"}, "add --ask"},
		{[]string{"plan", "--json", "--net=none", "--ssh-agent", "@github", "--ask", "--ssh-confirm", "--", "true"}, "needs the egress jail"},
	} {
		var out, errb bytes.Buffer
		if code := realMain(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	cfg := shadow.DefaultConfig()
	cfg.SSHConfirm = true
	if x := shadowExtras(cfg, "/home/u", ""); !x.sshConfirm {
		t.Error("the shadow's ssh-confirm does not reach the launch")
	}
}

// Two sandboxes in the ask mode: a notice of sandbox A named request 3,
// which expired (or was answered) there, and sandbox B's session has
// timed a request 3 of its own. approve 3 must not answer B's: with
// more than one sandbox in the ask mode, N alone is refused.
func TestApproveNumberAloneWithTwoSandboxes(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	handler := func(pending []ask.Request, answered *atomic.Int32) control.Handler {
		return func(req control.Request) control.Response {
			switch req.Op {
			case control.OpRequests:
				return control.Response{OK: true, Requests: pending}
			case control.OpApprove, control.OpDeny:
				answered.Add(1)
				for _, q := range pending {
					if q.ID == req.Req {
						return control.Response{OK: true, Requests: []ask.Request{q}}
					}
				}
				return control.Response{Error: "no such request"}
			}
			return control.Response{Error: "unknown"}
		}
	}
	var aAnswered, bAnswered atomic.Int32
	a, err := control.Listen("aaaaaaaa", handler(nil, &aAnswered))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	now := time.Now()
	evil := ask.Request{ID: 3, Sandbox: "bbbbbbbb", Proto: "tcp", Name: "evil.test", Port: 443, Kind: "name", Since: now, Expires: now.Add(time.Minute)}
	b, err := control.Listen("bbbbbbbb", handler([]ask.Request{evil}, &bAnswered))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, verb := range []string{"approve", "deny"} {
		var out, errb bytes.Buffer
		code := realMain([]string{verb, "3"}, &out, &errb)
		if code == 0 || bAnswered.Load() != 0 {
			t.Fatalf("%s 3 answered sandbox B's request 3 (exit %d): %s%s", verb, code, out.String(), errb.String())
		}
		if !strings.Contains(errb.String(), "bbbbbbbb/3") || !strings.Contains(errb.String(), "aaaaaaaa/3") {
			t.Errorf("%s 3: the refusal does not name the choices: %s", verb, errb.String())
		}
	}
	// Named, it is answered.
	var out, errb bytes.Buffer
	if code := realMain([]string{"approve", "bbbbbbbb/3", "--once"}, &out, &errb); code != 0 || bAnswered.Load() != 1 {
		t.Fatalf("approve bbbbbbbb/3: exit %d: %s%s", code, out.String(), errb.String())
	}
}

// approve --once of a UDP host port says what the jail does with it: the
// port is approved for the session, not once.
func TestApproveOnceUDPHostPortSaysSession(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	now := time.Now()
	reqs := []ask.Request{
		{ID: 1, Sandbox: "cccccccc", Proto: "udp", Port: 5353, Kind: "host-port", Since: now, Expires: now.Add(time.Minute)},
		{ID: 2, Sandbox: "cccccccc", Proto: "tcp", Port: 8080, Kind: "host-port", Since: now, Expires: now.Add(time.Minute)},
	}
	srv, err := control.Listen("cccccccc", func(req control.Request) control.Response {
		for _, q := range reqs {
			if req.Op == control.OpApprove && q.ID == req.Req {
				return control.Response{OK: true, Requests: []ask.Request{q}}
			}
		}
		return control.Response{Error: "no such request"}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, c := range []struct{ req, want string }{
		{"cccccccc/1", "approved (session: a UDP host port is not approved once)"},
		{"cccccccc/2", "approved (once)"},
	} {
		var out, errb bytes.Buffer
		if code := realMain([]string{"approve", c.req, "--once"}, &out, &errb); code != 0 || !strings.Contains(out.String(), c.want) {
			t.Errorf("approve %s --once: exit %d, %q %q; want %q", c.req, code, out.String(), errb.String(), c.want)
		}
	}
}
