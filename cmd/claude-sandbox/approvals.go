package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/internal/approvals"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// The approvals store (internal/approvals): reach approved "always" for a
// workspace joins the allowlist of every later launch there.

const approvalsHelp = `Usage: claude-sandbox approvals [--json] [--workspace DIR]
       claude-sandbox approvals remove N|ENTRY [--workspace DIR]

Lists the reach approved "always" for a workspace (the current directory
unless --workspace): entries stored by claude-sandbox allow ID ... --always
(or an ask-mode approve --always), each a domain[:port], an address or
CIDR, or a host port. Every later launch of run and of the shadow in that
workspace adds them to its allowlist (domains only when the launch has a
domain allowlist), shows them in plan --json (egress.approved) and names
them in its exit summary ("approved always: pypi.org").

remove takes one back: its number as listed, or the entry ("domain
pypi.org", "ip 10.1.2.3/32", "host-port 5432/tcp", or a bare name or
address).

The store lives in $XDG_STATE_HOME/claude-sandbox/approvals (or
~/.local/state/claude-sandbox/approvals), one file per workspace, outside
every sandbox's writable view; a launch whose writable binds would cover
it applies none of it, and says so.
`

func newApprovalsFlags() (*flag.FlagSet, *bool, *string) {
	f := newFlags("approvals")
	j := f.Bool("json", false, "the entries as a JSON array")
	ws := f.String("workspace", "", "the workspace `DIR` (default: the current directory)")
	return f, j, ws
}

func approvalsMain(args []string, stdout, stderr io.Writer) int {
	f, asJSON, ws := newApprovalsFlags()
	remove := len(args) > 0 && args[0] == "remove"
	if remove {
		args = args[1:]
	}
	// The entry may come before or after the options.
	which, code, done := parseWithArg(f, "approvals", args, approvalsHelp, stdout, stderr)
	if done {
		return code
	}
	if !remove && which != "" {
		return usageLine(stderr, "approvals", fmt.Sprintf("unexpected argument %q", which))
	}
	workspace := *ws
	if workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(stderr, "claude-sandbox approvals: the current directory: %v\n", err)
			return 1
		}
		workspace = wd
	}
	if remove {
		if which == "" {
			return usageLine(stderr, "approvals", "name the approval to remove: its number or the entry")
		}
		if *asJSON {
			return usageLine(stderr, "approvals", "remove takes no --json")
		}
		e, err := approvals.Remove(workspace, which)
		if err != nil {
			fmt.Fprintf(stderr, "claude-sandbox approvals: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "removed: %s\n", e)
		return 0
	}
	list, err := approvals.List(workspace)
	if err != nil {
		fmt.Fprintf(stderr, "claude-sandbox approvals: %v\n", err)
		return 1
	}
	printList(stdout, *asJSON, list, "no approvals for this workspace", "N\tKIND\tENTRY\tADDED", func(i int, e approvals.Entry) string {
		return fmt.Sprintf("%d\t%s\t%s\t%s", i+1, e.Kind, e.Value, e.Added.Local().Format("2006-01-02 15:04"))
	})
	return 0
}

// applyApprovals adds workspace's stored approvals to opts' allowlist
// (a jailed launch only) and returns those applied, as "kind value". A
// store that cannot be read, or that a writable bind of the sandbox
// would cover (a session could approve itself), is applied not at all,
// with a warning naming the fix.
func applyApprovals(opts *plan.Options, workspace string, warn func(string)) []string {
	if (opts.Net != "" && opts.Net != plan.NetJail) || workspace == "" {
		return nil
	}
	s, err := approvals.Default()
	if err != nil {
		return nil
	}
	list, err := s.List(workspace)
	if err != nil {
		warn("approvals not applied: " + err.Error())
		return nil
	}
	if len(list) == 0 {
		return nil
	}
	trial := *opts
	trial.Warn = nil
	p, err := plan.Build(trial)
	if err != nil {
		warn("approvals not applied: the sandbox's writable binds could not be checked: " + err.Error())
		return nil
	}
	{
		var writable []string
		for _, op := range p.Mounts {
			if op.Kind == mounts.Bind || op.Kind == mounts.DevBind {
				writable = append(writable, op.Src)
			}
		}
		if src, ok := approvals.Covered(s.Dir, writable); ok {
			warn(fmt.Sprintf("approvals not applied: their store %s is inside %s, which this sandbox may write (a session could approve reach for itself): bind a narrower directory, or set XDG_STATE_HOME to a directory outside it", s.Dir, src))
			return nil
		}
	}
	var applied []string
	for _, e := range list {
		switch e.Kind {
		case approvals.Domain:
			if len(opts.AllowDomains) == 0 {
				continue // no domain allowlist: every name is reachable
			}
			opts.AllowDomains = append(opts.AllowDomains, e.Value)
		case approvals.IP:
			pfx, err := netpolicy.ParseAllow(e.Value)
			if err != nil {
				continue
			}
			opts.Allow = append(opts.Allow, pfx)
		case approvals.HostPort:
			h, err := netpolicy.ParseHostPort(e.Value)
			if err != nil {
				continue
			}
			dup := false
			for _, o := range opts.HostPorts {
				dup = dup || o == h
			}
			if !dup {
				opts.HostPorts = append(opts.HostPorts, h)
			}
		default:
			continue
		}
		applied = append(applied, e.String())
	}
	return applied
}

// approvedSummary is the exit summary's line for the approvals applied.
func approvedSummary(applied []string) string {
	if len(applied) == 0 {
		return ""
	}
	names := make([]string, len(applied))
	for i, a := range applied {
		_, v, _ := strings.Cut(a, " ")
		names[i] = v
	}
	return "approved always: " + strings.Join(names, ", ")
}
