package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/shadow"
	"github.com/claude-sandbox/claude-sandbox/verify"
)

const verifyHelp = `Usage: claude-sandbox verify [--json]
       claude-sandbox verify --hook

Run from inside a sandboxed session (the /verify-sandbox command does), it
proves the sandbox holds: deterministic checks (PASS, FAIL, WARN, SKIP)
and adversarial probes that each try one escape (BLOCKED, ESCAPED,
INCONCLUSIVE). The last line is RESULT: SANDBOX OK or RESULT: SANDBOX
LEAKING; the exit status is 0 or 1. Outside a sandbox it says so and
exits 1.

  --json   the same report as one JSON object ("inside", "checks",
           "probes", "ok", "result")
  --hook   the SessionStart hook of the integrity guard: a warning for the
           session when it runs unwrapped; always exits 0
`

// verifyMain is `claude-sandbox verify [--json]`: the checks and probes,
// run from inside a session. Outside a sandbox it says so and exits 1.
func verifyMain(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fmt.Fprint(stdout, verifyHelp)
		return 0
	}
	asJSON := false
	for _, a := range args {
		switch a {
		case "--json":
			asJSON = true
		default:
			return usageLine(stderr, "verify", "unknown option "+a)
		}
	}
	if f := gateFacts(); !guard.Inside(f) {
		outside := outsideVerdict(f)
		if asJSON {
			_ = verify.Report{Note: outside, Checks: []verify.Result{}, Probes: []verify.Result{}}.WriteJSON(stdout)
			return 1
		}
		fmt.Fprintln(stdout, outside)
		return 1
	}
	e := &verify.Env{Home: os.Getenv("HOME"), Getenv: os.Getenv, Scrubbed: scrubbedMatcher()}
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
	r.Probes = append(r.Probes, verify.Openings(e)...)
	r.Inside = true
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

// scrubbedMatcher reads the shadow's digests of what it kept outside
// (nil when this sandbox was not launched by the shadow).
func scrubbedMatcher() func(name, value string) bool {
	s, ok := shadow.ParseScrubbed(os.Getenv(shadow.ScrubbedEnv))
	if !ok {
		return nil
	}
	return s.Contains
}

// outsideVerdict is verify's one verdict outside the shadow's sandbox: no
// sandbox at all, or a sandbox without the shadow's marker mount (a
// `claude-sandbox run`), whose walls verify's checks do not describe.
func outsideVerdict(f guard.Facts) string {
	f.MarkerIsMount = true
	if guard.Inside(f) {
		return "RESULT: NOT INSIDE the shadow: this process runs in a sandbox without the shadow's marker (`claude-sandbox run`?), whose checks are written for the shadow's session. Start Claude as `claude`, then run this from its session."
	}
	return "RESULT: NOT INSIDE claude-sandbox: this process has no sandbox around it (no marker mount, or capabilities / no_new_privs say otherwise). Start Claude as `claude`, then run this from its session."
}
