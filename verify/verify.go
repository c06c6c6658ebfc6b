// Package verify is the sandbox's self-test, run from inside a session
// (`claude-sandbox verify`, and the /verify-sandbox command): deterministic
// checks that the sandbox is what it claims (PASS, FAIL, or SKIP when a
// check does not apply), and a fixed battery of adversarial probes that
// each try one escape (BLOCKED, ESCAPED, or INCONCLUSIVE when the attempt
// could not be made).
//
// Every probe is a plain function of an [Env], so tests run it where the
// escape is possible (outside a sandbox, in namespaces they own) and
// require ESCAPED: a probe that cannot see an escape proves nothing.
package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Status is a check's or a probe's verdict.
type Status string

// Check verdicts and probe verdicts.
const (
	Pass         Status = "PASS"
	Fail         Status = "FAIL"
	Skip         Status = "SKIP"
	Blocked      Status = "BLOCKED"
	Escaped      Status = "ESCAPED"
	Inconclusive Status = "INCONCLUSIVE"
	// Warn is a check that found something to fix that is no leak (no
	// git identity, say): it does not make the result LEAKING.
	Warn Status = "WARN"
)

// Result is one line of the report.
type Result struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Status   Status `json:"status"`
	Evidence string `json:"evidence"`
}

// Env is what checks and probes look at. Production fills it from the
// running session (FromProcess); tests point it at their own fixtures.
type Env struct {
	Home      string // the session's home directory
	Workspace string // the read-write workspace ("" when unknown)
	Getenv    func(string) string
	// Root is prepended to every absolute path a check or probe reads or
	// writes (tests use a fixture tree; production uses "").
	Root string
	// Jail reports whether the egress jail is expected (tun0 present).
	Jail bool
	// AllowedIPs are the configured punches (not counted as leaks).
	AllowedIPs []string
	// HostPID is a process id that belongs to the host, outside the
	// sandbox (from the launcher, when known; 0 otherwise).
	HostPID int
	// InitPID is the process the ptrace probe aims at (0: PID 1, the
	// sandbox's own init).
	InitPID int
	// NoNestedUserNS runs the nested probes' attempts without the nested
	// user namespace (tests only: to show the probe sees an escape).
	NoNestedUserNS bool
	// NetTargets are the addresses the network probes try, by name
	// (nil: DefaultNetTargets).
	NetTargets map[string][]string
	// Scrubbed reports whether name=value is a credential the shadow kept
	// outside (from the salted digests it hands in, shadow.ScrubbedEnv).
	// nil: not known (not launched by the shadow): every credential
	// variable counts.
	Scrubbed func(name, value string) bool
}

func (e *Env) path(p string) string { return e.Root + p }

// Item is a check or a probe.
type Item struct {
	ID   string
	Name string
	Run  func(e *Env) (Status, string)
}

// Report is a whole run.
type Report struct {
	// Inside: run inside a sandbox (the caller decides; a report made
	// outside has no checks or probes, only Note).
	Inside bool     `json:"inside"`
	Checks []Result `json:"checks"`
	Probes []Result `json:"probes"`
	Note   string   `json:"note,omitempty"`
}

// Run runs every check and probe.
func Run(e *Env, checks, probes []Item) Report {
	var r Report
	for _, c := range checks {
		st, ev := c.Run(e)
		r.Checks = append(r.Checks, Result{c.ID, c.Name, st, ev})
	}
	for _, p := range probes {
		st, ev := p.Run(e)
		r.Probes = append(r.Probes, Result{p.ID, p.Name, st, ev})
	}
	return r
}

// OK reports whether nothing failed and nothing escaped.
func (r Report) OK() bool {
	if !r.Inside && len(r.Checks) == 0 && len(r.Probes) == 0 {
		return false // nothing was proved
	}
	for _, c := range r.Checks {
		if c.Status == Fail {
			return false
		}
	}
	for _, p := range r.Probes {
		if p.Status == Escaped {
			return false
		}
	}
	return true
}

// Warnings counts the checks that warn.
func (r Report) Warnings() int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == Warn {
			n++
		}
	}
	return n
}

// Counts returns the number of blocked, inconclusive and skipped probes.
// A probe is skipped only when what it attacks is off by configuration
// (the network probes with the egress jail off).
func (r Report) Counts() (blocked, inconclusive, skipped int) {
	for _, p := range r.Probes {
		switch p.Status {
		case Blocked:
			blocked++
		case Inconclusive:
			inconclusive++
		case Skip:
			skipped++
		}
	}
	return
}

// openings counts the OPEN lines (openings.go), which are no probes.
func (r Report) openings() int {
	n := 0
	for _, p := range r.Probes {
		if p.Status == Open {
			n++
		}
	}
	return n
}

// ResultLine is the report's last line.
func (r Report) ResultLine() string {
	if !r.OK() {
		return "RESULT: SANDBOX LEAKING"
	}
	b, in, sk := r.Counts()
	op := r.openings()
	line := fmt.Sprintf("RESULT: SANDBOX OK (%d checks, %d probes: %d blocked, %d inconclusive)", len(r.Checks), len(r.Probes)-sk-op, b, in)
	if op > 0 {
		line += fmt.Sprintf(", %d openings on purpose", op)
	}
	if sk > 0 {
		line += fmt.Sprintf(", %d probes skipped: the egress jail is off", sk)
	}
	if w := r.Warnings(); w > 0 {
		line += fmt.Sprintf(", %d warnings", w)
	}
	return line
}

// WriteText prints one line a check or probe, then the result line.
func (r Report) WriteText(w io.Writer) {
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-4s %-5s %s: %s\n", c.ID, c.Status, c.Name, oneLine(c.Evidence))
	}
	for _, p := range r.Probes {
		fmt.Fprintf(w, "%-4s %-12s %s: %s\n", p.ID, p.Status, p.Name, oneLine(p.Evidence))
	}
	fmt.Fprintln(w, r.ResultLine())
}

// WriteJSON prints the report as one JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	out := struct {
		Report
		OK     bool   `json:"ok"`
		Result string `json:"result"`
	}{r, r.OK(), r.ResultLine()}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
