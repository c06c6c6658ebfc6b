package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
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
