package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/internal/approvals"
	"github.com/claude-sandbox/claude-sandbox/internal/control"
)

// The control channel (internal/control): every launcher serves its own
// socket, which ps, allow and revoke reach.

const psHelp = `Usage: claude-sandbox ps [--json]

Lists your running sandboxes (claude-sandbox run, the shadow, an embedder):
their id, the launcher's pid, network mode, start time, flows the jail
refused so far, pending requests, working directory and command. Sockets
left by a launcher that has ended are removed. Root sees only its own.
`

const allowHelp = `Usage: claude-sandbox allow ID [--ip ADDR|CIDR]... [--domain NAME[:PORT]]... [--host-port PORT[/PROTO]]... [--always]
       claude-sandbox revoke ID [--ip ADDR|CIDR]... [--domain NAME[:PORT]]... [--host-port PORT[/PROTO]]...

Changes the reach of running sandbox ID (see claude-sandbox ps) while it
runs, in force for its next new connection: --ip as --allow-ip takes it
(loopback refused), --domain as --allow-domain takes it (the sandbox must
have been started with a domain allowlist), --host-port as
--allow-host-port takes it (the host's loopback port, through the
gateway). revoke takes back an entry
allowed at launch or since; connections open stay open. Each change is
logged as a policy change and named in the sandbox's exit summary.
With --always, allow also stores the entries for the sandbox's workspace
(see claude-sandbox approvals): every later launch there starts with them.
`

// stringList is a repeatable option.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func newPsFlags() (*flag.FlagSet, *bool) {
	f := newFlags("ps")
	return f, f.Bool("json", false, "the same list as a JSON array")
}

func newAllowFlags(name string) (*flag.FlagSet, *stringList, *stringList, *stringList) {
	f := newFlags(name)
	var ips, domains, hostPorts stringList
	f.Var(&ips, "ip", "an `ADDR|CIDR` the sandbox may reach, every port and protocol")
	f.Var(&domains, "domain", "a `NAME[:PORT]` (wildcard, preset) for a sandbox with a domain allowlist")
	f.Var(&hostPorts, "host-port", "a `PORT[/PROTO]` of the host's loopback, through the gateway")
	if name == "allow" {
		f.Bool("always", false, "also store the entries for the sandbox's workspace, for every later launch there")
	}
	return f, &ips, &domains, &hostPorts
}

// startControl serves the launcher's control socket; nil (and a warning)
// when it cannot: the sandbox runs all the same, without ps or allow.
func startControl(l *control.Launcher, warn func(string)) *control.Server {
	s, err := l.Serve()
	if err != nil {
		warn(fmt.Sprintf("no control socket (claude-sandbox ps, allow and revoke will not see this sandbox): %v", err))
		return nil
	}
	return s
}

func psMain(args []string, stdout, stderr io.Writer) int {
	f, asJSON := newPsFlags()
	if code, done := parseFlags(f, args, psHelp, stdout, stderr); done {
		return code
	}
	if f.NArg() > 0 {
		return usageLine(stderr, "ps", fmt.Sprintf("unexpected argument %q", f.Arg(0)))
	}
	uid := os.Getuid()
	var list []control.Status
	for _, s := range control.Find(uid, os.Getenv) {
		r, err := control.Call(s.Path, control.Request{Op: control.OpStatus})
		if err == control.ErrStale {
			control.RemoveStale(s, uid)
			continue
		}
		if err != nil || !r.OK || r.Status == nil {
			msg := r.Error
			if err != nil {
				msg = err.Error()
			}
			fmt.Fprintf(stderr, "claude-sandbox ps: %s: %s\n", s.ID, msg)
			continue
		}
		list = append(list, *r.Status)
	}
	printList(stdout, *asJSON, list, "no running sandboxes", "ID\tPID\tNET\tSTARTED\tBLOCKED\tPENDING\tCWD\tCOMMAND", func(_ int, s control.Status) string {
		return fmt.Sprintf("%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s", s.ID, s.PID, s.Net, s.Started.Local().Format("Jan 02 15:04:05"), s.Blocked, s.Pending, s.Cwd, escapeReport(strings.Join(s.Command, " ")))
	})
	return 0
}

// allowMain is allow, or revoke.
func allowMain(verb string, args []string, stdout, stderr io.Writer) int {
	f, ips, domains, hostPorts := newAllowFlags(verb)
	id, code, done := parseWithArg(f, verb, args, allowHelp, stdout, stderr)
	if done {
		return code
	}
	if id == "" {
		return usageLine(stderr, verb, "name the sandbox: its id, as claude-sandbox ps lists it")
	}
	if len(*ips)+len(*domains)+len(*hostPorts) == 0 {
		return usageLine(stderr, verb, "give what to "+verb+": --ip, --domain or --host-port")
	}
	uid := os.Getuid()
	s, err := control.Lookup(uid, os.Getenv, id)
	if err != nil {
		fmt.Fprintf(stderr, "claude-sandbox %s: %v\n", verb, err)
		return 1
	}
	always := false
	if a := f.Lookup("always"); a != nil && a.Value.String() == "true" {
		always = true
	}
	r, err := control.Call(s.Path, control.Request{Op: verb, IP: *ips, Domain: *domains, HostPort: *hostPorts})
	if err == control.ErrStale {
		control.RemoveStale(s, uid)
		fmt.Fprintf(stderr, "claude-sandbox %s: sandbox %s has ended\n", verb, id)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "claude-sandbox %s: %s: %v\n", verb, id, err)
		return 1
	}
	if !r.OK {
		fmt.Fprintf(stderr, "claude-sandbox %s: %s: %s\n", verb, id, r.Error)
		return 1
	}
	for _, c := range r.Changes {
		fmt.Fprintf(stdout, "%s: %s\n", id, c)
	}
	if always {
		return storeAlways(s.Path, id, *ips, *domains, *hostPorts, stdout, stderr)
	}
	return 0
}

// storeAlways stores what allow --always let through for the sandbox's
// workspace (its working directory when it has none).
func storeAlways(sock, id string, ips, domains, hostPorts []string, stdout, stderr io.Writer) int {
	r, err := control.Call(sock, control.Request{Op: control.OpStatus})
	if err != nil || !r.OK || r.Status == nil {
		fmt.Fprintf(stderr, "claude-sandbox allow: %s: --always: the sandbox's workspace is unknown (%v %s): nothing stored\n", id, err, r.Error)
		return 1
	}
	ws := r.Status.Workspace
	if ws == "" {
		ws = r.Status.Cwd
	}
	var entries []approvals.Entry
	for _, v := range ips {
		entries = append(entries, approvals.Entry{Kind: approvals.IP, Value: v})
	}
	for _, v := range domains {
		entries = append(entries, approvals.Entry{Kind: approvals.Domain, Value: v})
	}
	for _, v := range hostPorts {
		entries = append(entries, approvals.Entry{Kind: approvals.HostPort, Value: v})
	}
	code := 0
	for _, e := range entries {
		e, _, err := approvals.Add(ws, e)
		if err != nil {
			fmt.Fprintf(stderr, "claude-sandbox allow: --always: %v\n", err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "%s: approved always for %s: %s\n", id, ws, e)
	}
	return code
}
