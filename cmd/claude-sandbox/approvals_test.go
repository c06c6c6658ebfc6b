package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/approvals"
)

func TestApprovalsCommand(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	ws := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := approvalsMain(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, _ := run("--workspace", ws); code != 0 || !strings.Contains(out, "no approvals") {
		t.Fatalf("empty: %d %q", code, out)
	}
	for _, e := range []approvals.Entry{{Kind: approvals.Domain, Value: "pypi.org"}, {Kind: approvals.IP, Value: "10.1.2.3"}} {
		if _, _, err := approvals.Add(ws, e); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, _ := run("--json", "--workspace", ws); code != 0 || !strings.Contains(out, `"value": "10.1.2.3/32"`) {
		t.Errorf("--json: %d %q", code, out)
	}
	if code, out, _ := run("--workspace", ws); code != 0 || !strings.Contains(out, "1  domain  pypi.org") {
		t.Errorf("list: %d %q", code, out)
	}
	if code, out, _ := run("remove", "--workspace", ws, "ip 10.1.2.3/32"); code != 0 || out != "removed: ip 10.1.2.3/32\n" {
		t.Errorf("remove by entry, options first: %d %q", code, out)
	}
	if code, out, _ := run("remove", "1", "--workspace", ws); code != 0 || out != "removed: domain pypi.org\n" {
		t.Errorf("remove by number: %d %q", code, out)
	}
	if code, _, errs := run("remove", "1", "--workspace", ws); code != 1 || !strings.Contains(errs, "no approval number 1") {
		t.Errorf("remove from none: %d %q", code, errs)
	}
	if code, _, errs := run("bogus"); code != 2 || !strings.Contains(errs, "unexpected argument") {
		t.Errorf("stray word: %d %q", code, errs)
	}
}
