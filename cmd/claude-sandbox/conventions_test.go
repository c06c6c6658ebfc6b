package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/guard"
)

// subcommands is every command realMain knows.
var subcommands = []string{"run", "plan", "install", "uninstall", "promote", "doctor", "gate", "verify", "version", "completion", "man", "help"}

// Every subcommand's -h and --help print its help on stdout and exit 0,
// running nothing; `help CMD` prints the same.
func TestEverySubcommandHelp(t *testing.T) {
	for _, name := range subcommands {
		help, ok := subcommandHelp(name)
		if !ok || !strings.Contains(help, "Usage:") {
			t.Errorf("%s has no help text", name)
			continue
		}
		for _, argv := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}, {"--help", name}} {
			if name == "help" && argv[0] != name {
				continue
			}
			var out, errb bytes.Buffer
			code := realMain(argv, &out, &errb)
			if code != 0 || out.String() != help || errb.Len() != 0 {
				t.Errorf("%q: exit %d, stdout %.60q, stderr %q; want exit 0 and the help on stdout only", argv, code, out.String(), errb.String())
			}
		}
	}
	for _, argv := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		var out, errb bytes.Buffer
		if code := realMain(argv, &out, &errb); code != 0 || out.String() != mainHelp() {
			t.Errorf("%q: exit %d", argv, code)
		}
	}
}

// An unknown option is the same one line everywhere: exit 2, naming the
// option and where the help is, never Go's flag message or the help.
func TestUnknownOptionOneLine(t *testing.T) {
	for _, name := range append(subcommands, "") {
		argv := []string{"--no-such-option"}
		if name != "" {
			argv = []string{name, "--no-such-option"}
		}
		var out, errb bytes.Buffer
		code := realMain(argv, &out, &errb)
		msg := errb.String()
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "unknown option --no-such-option") ||
			!strings.Contains(msg, "--help)") || strings.Contains(msg, "flag provided") || strings.Contains(msg, "Usage") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and one line", argv, code, out.String(), msg)
		}
	}
	var out, errb bytes.Buffer
	if code := realMain([]string{"install", "--prefix"}, &out, &errb); code != 2 || errb.String() != "claude-sandbox install: --prefix needs a value (see claude-sandbox install --help)\n" {
		t.Errorf("install --prefix: exit %d %q", code, errb.String())
	}
}

// version, --version and -V print the build's own version; --json the
// same as an object.
func TestVersion(t *testing.T) {
	for _, argv := range [][]string{{"version"}, {"--version"}, {"-V"}} {
		var out, errb bytes.Buffer
		code := realMain(argv, &out, &errb)
		if code != 0 || !strings.HasPrefix(out.String(), "claude-sandbox ") || strings.Contains(out.String(), " dev\n") || !strings.Contains(out.String(), "go1.") {
			t.Errorf("%q: exit %d %q", argv, code, out.String())
		}
	}
	var out, errb bytes.Buffer
	var v buildVersion
	if code := realMain([]string{"version", "--json"}, &out, &errb); code != 0 || json.Unmarshal(out.Bytes(), &v) != nil || v.Version == "" || v.Go == "" {
		t.Errorf("version --json: exit %d %q", code, out.String())
	}
	if got := (buildVersion{Version: "v1.2.0", Revision: "0123456789abcdef0123", Modified: true, Time: "2026-01-02T03:04:05Z", Go: "go1.24", Platform: "linux/amd64"}).String(); got != "claude-sandbox v1.2.0 (commit 0123456789ab+modified, 2026-01-02T03:04:05Z, go1.24, linux/amd64)" {
		t.Errorf("version line %q", got)
	}
}

// verify --json outside a sandbox prints JSON, inside false.
func TestVerifyJSONOutside(t *testing.T) {
	if guard.Inside(gateFacts()) {
		t.Fatal("the test runs inside a claude-sandbox: run it outside")
	}
	var out, errb bytes.Buffer
	code := realMain([]string{"verify", "--json"}, &out, &errb)
	var r struct {
		Inside *bool  `json:"inside"`
		OK     bool   `json:"ok"`
		Note   string `json:"note"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); code != 1 || err != nil || r.Inside == nil || *r.Inside || r.OK || !strings.Contains(r.Note, "NOT INSIDE") {
		t.Errorf("verify --json outside: exit %d, %q (%v); want 1 and JSON with inside false", code, out.String(), err)
	}
}

// doctor: a /dev/net/tun that is another device, or no device, fails.
func TestTunProblem(t *testing.T) {
	if p := tunProblem("/dev/null"); !strings.Contains(p, "1:3, not the TUN device 10:200") {
		t.Errorf("/dev/null as the TUN: %q", p)
	}
	f, err := os.CreateTemp(t.TempDir(), "tun")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if p := tunProblem(f.Name()); !strings.Contains(p, "not a character device") {
		t.Errorf("a file as the TUN: %q", p)
	}
	if p := tunProblem("/nonexistent/tun"); !strings.Contains(p, "missing") {
		t.Errorf("no TUN: %q", p)
	}
}
