package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
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
	if got := askNotice("Claude", r); !strings.Contains(got, "pypi.org:443 (pip install, pid 4242): claude-sandbox approve 7") {
		t.Errorf("notice with a process: %q", got)
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
	want := "claude-sandbox: Claude asks for an ssh signature for github.com with key SHA256:abc (ssh git@github.com, pid 12): claude-sandbox approve 4 (or deny 4; refused in 30s)"
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
