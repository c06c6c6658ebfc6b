package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/verify"
)

// verifyMain is `claude-sandbox verify [--json]`: the checks and probes,
// run from inside a session. Outside a sandbox it says so and exits 1.
func verifyMain(args []string, stdout, stderr io.Writer) int {
	asJSON := false
	for _, a := range args {
		switch a {
		case "--json":
			asJSON = true
		default:
			fmt.Fprintf(stderr, "claude-sandbox verify: unknown option %s (use --json, or --hook for the SessionStart hook)\n", a)
			return 2
		}
	}
	if !guard.Inside(gateFacts()) {
		fmt.Fprintln(stdout, "NOT INSIDE claude-sandbox: this process has no sandbox around it (no marker mount, or capabilities / no_new_privs say otherwise). Start Claude as `claude`, then run this from its session.")
		fmt.Fprintln(stdout, "RESULT: SANDBOX LEAKING")
		return 1
	}
	e := &verify.Env{Home: os.Getenv("HOME"), Getenv: os.Getenv}
	if wd, err := os.Getwd(); err == nil && wd != e.Home {
		e.Workspace = wd
	}
	if ws := os.Getenv("CLAUDE_SANDBOX_WORKSPACE_ROOT"); ws != "" {
		e.Workspace = ws
	}
	if b, err := os.ReadFile("/proc/net/dev"); err == nil && strings.Contains(string(b), "tun0:") {
		e.Jail = true
	}
	r := verify.Run(e, verify.Checks(), verify.Probes())
	if asJSON {
		_ = r.WriteJSON(stdout)
	} else {
		r.WriteText(stdout)
	}
	if !r.OK() {
		return 1
	}
	return 0
}
