package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/control"
	"github.com/claude-sandbox/claude-sandbox/jail"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// The ask mode's commands (issue 31): requests lists what running
// sandboxes ask to reach, approve and deny answer, over each launcher's
// control socket.

const requestsHelp = `Usage: claude-sandbox requests [ID] [--json]

Lists the pending requests of your sandboxes started with --ask (or of
sandbox ID): the request (REQ), the sandbox, what it asks to reach
(protocol, name or address, port), the process when known, and since
when; with --ssh-confirm, a signature the ssh agent would make (proto
ssh, the host and the key). Answer with claude-sandbox approve REQ or claude-sandbox deny REQ.
`

const approveHelp = `Usage: claude-sandbox approve REQ [--once|--session|--always]
       claude-sandbox deny REQ

Answers request REQ (ID/N, as the notice names it; N alone only while
one of your sandboxes runs in the ask mode). approve lets the held
connection(s) go: --session (the default) adds the destination to the
sandbox's reach for its life, as claude-sandbox allow does (a name with its port, an address
with every port, a host port); --once lets only the connections held for
it go, and the next one asks again; --always is --session, and stores the
approval for later sandboxes. deny refuses the held connections (the
program inside gets its normal connection error) and every later one to
the destination, without asking again. For a signature (--ssh-confirm),
--once makes it, --session also that host and key's later ones,
--always is refused, and deny refuses it only. A request no one answers is
refused after --ask-timeout (30s by default). Only the sandbox's owner
(or root), from outside every sandbox, can answer.
`

// parseAskTimeout is --ask-timeout's parser (the shadow's key's too).
func parseAskTimeout(s string) (time.Duration, error) { return shadow.ParseAskTimeout(s) }

// askOptions turns the jail's ask mode on for sandbox id: each request
// prints one line on the terminal (stderr) naming how to answer it.
// watched reports whether a claude-sandbox watch shows the requests now
// (then no notice is printed).
func askOptions(id string, timeout time.Duration, stderr io.Writer, who string, watched func() bool) *jail.AskOptions {
	raw := isTerminal(stderr)
	// OnRequest runs on the jail's packet path: the lines go to the
	// terminal from a goroutine of their own, and are dropped while it
	// is behind (a terminal stopped with Ctrl-S must not stall the
	// sandbox's network).
	lines := make(chan string, 16)
	var once sync.Once
	return &jail.AskOptions{
		Sandbox: id, Timeout: timeout,
		OnRequest: func(r ask.Request) {
			if watched != nil && watched() {
				return
			}
			once.Do(func() {
				go func() {
					for l := range lines {
						_, _ = io.WriteString(stderr, l)
					}
				}()
			})
			line := askNotice(who, r)
			if raw {
				// The program may hold the terminal in raw mode.
				line = "\r\n" + line + "\r\n"
			} else {
				line += "\n"
			}
			select {
			case lines <- line:
			default:
			}
		},
	}
}

// askNotice is the terminal's line for a new request. The process's
// command line is the session's own text (up to 40 bytes of it): it
// comes last, quoted, after the command that answers the request, so
// that it cannot put a command of its making ("): claude-sandbox approve
// 12") where a person looks for the answer.
func askNotice(who string, r ask.Request) string {
	proc := ""
	if r.Who != nil {
		proc = "; from " + processQuoted(r.Who)
	}
	verb := "asks to reach"
	if r.Kind == ask.KindSSHSign {
		// "asks for an ssh signature for HOST with key SHA256:..."
		verb = "asks for an ssh"
	}
	// ID/N: the number alone is refused while another of the caller's
	// sandboxes runs in the ask mode (see approveMain).
	req := strconv.Itoa(r.ID)
	if r.Sandbox != "" {
		req = r.Sandbox + "/" + req
	}
	return fmt.Sprintf("claude-sandbox: %s %s %s: claude-sandbox approve %s (or deny %s; refused in %s)%s",
		who, verb, escapeReport(r.What()), req, req, r.Expires.Sub(r.Since).Round(time.Second), proc)
}

// processQuoted names a request's process as the notice does: its pid,
// then its command, always quoted: pid 42 "pip install".
func processQuoted(p *ask.Process) string {
	s := "pid " + strconv.Itoa(p.PID)
	if cmd := processCommand(p); cmd != "" {
		s += " " + strconv.Quote(cmd)
	}
	return s
}

// processCommand is a request's process's command line as a person
// reads it: the program's base name, then its arguments, cut to 40
// bytes.
func processCommand(p *ask.Process) string {
	argv := slices.Clone(p.Argv)
	if len(argv) > 0 {
		argv[0] = filepath.Base(argv[0])
	}
	cmd := strings.Join(argv, " ")
	if len(cmd) > 40 {
		cmd = cmd[:40] + "..."
	}
	return cmd
}

// processLabel names a request's process: its command and pid.
func processLabel(p *ask.Process) string {
	// The program's base name, then its arguments: "pip install, pid 42".
	cmd := processCommand(p)
	if cmd == "" {
		return "pid " + strconv.Itoa(p.PID)
	}
	return escapeReport(cmd) + ", pid " + strconv.Itoa(p.PID)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func newRequestsFlags() (*flag.FlagSet, *bool) {
	f := newFlags("requests")
	return f, f.Bool("json", false, "the same list as a JSON array")
}

func newApproveFlags(name string) (*flag.FlagSet, *bool, *bool, *bool) {
	f := newFlags(name)
	if name == "deny" {
		return f, new(bool), new(bool), new(bool)
	}
	once := f.Bool("once", false, "only the connections held for the request go")
	session := f.Bool("session", false, "the destination joins the sandbox's reach for its life (the default)")
	always := f.Bool("always", false, "--session, and stored for later sandboxes")
	return f, once, session, always
}

// askCall sends req to sandbox s.
func askCall(verb string, s control.Sandbox, req control.Request, stderr io.Writer) (control.Response, bool) {
	uid := os.Getuid()
	r, err := control.Call(s.Path, req)
	if err == control.ErrStale {
		control.RemoveStale(s, uid)
		return r, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "claude-sandbox %s: %s: %v\n", verb, s.ID, err)
		return r, false
	}
	return r, true
}

func requestsMain(args []string, stdout, stderr io.Writer) int {
	f, asJSON := newRequestsFlags()
	id, code, done := parseWithArg(f, "requests", args, requestsHelp, stdout, stderr)
	if done {
		return code
	}
	uid := os.Getuid()
	var sandboxes []control.Sandbox
	if id != "" {
		s, err := control.Lookup(uid, os.Getenv, id)
		if err != nil {
			fmt.Fprintf(stderr, "claude-sandbox requests: %v\n", err)
			return 1
		}
		sandboxes = []control.Sandbox{s}
	} else {
		sandboxes = control.Find(uid, os.Getenv)
	}
	var list []ask.Request
	for _, s := range sandboxes {
		r, ok := askCall("requests", s, control.Request{Op: control.OpRequests}, stderr)
		if !ok {
			continue
		}
		if !r.OK {
			if id != "" {
				fmt.Fprintf(stderr, "claude-sandbox requests: %s: %s\n", s.ID, r.Error)
				code = 1
			}
			continue // not in the ask mode
		}
		list = append(list, r.Requests...)
	}
	printList(stdout, *asJSON, list, "no pending requests", "REQ\tSANDBOX\tPROTO\tDESTINATION\tPORT\tPROCESS\tHELD\tSINCE", func(_ int, r ask.Request) string {
		dst := r.Name
		switch {
		case r.Kind == "host-port":
			dst = "host loopback"
		case r.Kind == ask.KindSSHSign:
			dst += " (sign with " + r.Key + ")"
		case dst == "":
			dst = r.Addr
		}
		proc := "-"
		if r.Who != nil {
			proc = processLabel(r.Who)
		}
		return fmt.Sprintf("%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s", r.ID, r.Sandbox, r.Proto, escapeReport(dst), r.Port, proc, r.Held, r.Since.Local().Format("15:04:05"))
	})
	return code
}

// approveMain is approve, or deny.
func approveMain(verb string, args []string, stdout, stderr io.Writer) int {
	f, once, session, always := newApproveFlags(verb)
	ref, code, done := parseWithArg(f, verb, args, approveHelp, stdout, stderr)
	if done {
		return code
	}
	if ref == "" {
		return usageLine(stderr, verb, "name the request: REQ, as claude-sandbox requests lists it")
	}
	scope := ask.Session
	n := 0
	for _, b := range []*bool{once, session, always} {
		if *b {
			n++
		}
	}
	if n > 1 {
		return usageLine(stderr, verb, "give one of --once, --session, --always")
	}
	switch {
	case *once:
		scope = ask.Once
	case *always:
		scope = ask.Always
	}
	sbID, num, hasID := strings.Cut(ref, "/")
	if !hasID {
		sbID, num = "", ref
	}
	req, err := strconv.Atoi(num)
	if err != nil || req <= 0 {
		return usageLine(stderr, verb, fmt.Sprintf("%q is not a request (N or ID/N, as claude-sandbox requests lists it)", ref))
	}
	uid := os.Getuid()
	var sandboxes []control.Sandbox
	if hasID {
		s, err := control.Lookup(uid, os.Getenv, sbID)
		if err != nil {
			fmt.Fprintf(stderr, "claude-sandbox %s: %v\n", verb, err)
			return 1
		}
		sandboxes = []control.Sandbox{s}
	} else {
		// The sandbox whose pending requests hold N: exactly one, and
		// the only one in the ask mode. With two, the N a notice named
		// may have been answered or expired in its sandbox while the
		// other's N (a session can time its requests) waits: N alone
		// would answer that one.
		var asking []string
		for _, s := range control.Find(uid, os.Getenv) {
			r, ok := askCall(verb, s, control.Request{Op: control.OpRequests}, io.Discard)
			if !ok || !r.OK {
				continue
			}
			asking = append(asking, s.ID)
			for _, q := range r.Requests {
				if q.ID == req {
					sandboxes = append(sandboxes, s)
				}
			}
		}
		if len(asking) > 1 && len(sandboxes) <= 1 {
			var ids []string
			for _, id := range asking {
				ids = append(ids, id+"/"+num)
			}
			fmt.Fprintf(stderr, "claude-sandbox %s: %d sandboxes run in the ask mode: name the sandbox, %s (as the notice does; claude-sandbox requests lists them)\n", verb, len(asking), strings.Join(ids, " or "))
			return 1
		}
		switch len(sandboxes) {
		case 0:
			fmt.Fprintf(stderr, "claude-sandbox %s: no pending request %d (see claude-sandbox requests: answered, expired, or its sandbox has ended)\n", verb, req)
			return 1
		case 1:
		default:
			var ids []string
			for _, s := range sandboxes {
				ids = append(ids, s.ID+"/"+num)
			}
			fmt.Fprintf(stderr, "claude-sandbox %s: request %d is pending in %d sandboxes: name one, %s\n", verb, req, len(sandboxes), strings.Join(ids, " or "))
			return 1
		}
	}
	s := sandboxes[0]
	r, ok := askCall(verb, s, control.Request{Op: verb, Req: req, Scope: scope.String()}, stderr)
	if !ok {
		if r.Error == "" {
			fmt.Fprintf(stderr, "claude-sandbox %s: sandbox %s has ended\n", verb, s.ID)
		}
		return 1
	}
	if !r.OK {
		fmt.Fprintf(stderr, "claude-sandbox %s: %s: %s\n", verb, s.ID, r.Error)
		return 1
	}
	for _, q := range r.Requests {
		what := "denied"
		if verb == "approve" {
			what = "approved (" + scope.String() + ")"
			if scope == ask.Once && q.Kind == "host-port" && q.Proto == "udp" {
				// The jail approves a UDP host port for the session
				// (a datagram is routed to a port only while it is one).
				what = "approved (session: a UDP host port is not approved once)"
			}
		}
		fmt.Fprintf(stdout, "%s: request %d: %s %s\n", s.ID, q.ID, escapeReport(q.What()), what)
		if verb == "approve" && scope == ask.Always {
			ips, domains, hostPorts := alwaysEntries(q)
			if code := storeAlways(s.Path, s.ID, ips, domains, hostPorts, stdout, stderr); code != 0 {
				fmt.Fprintf(stderr, "claude-sandbox approve: request %d is approved for the session, but not stored for later sandboxes\n", q.ID)
				return code
			}
		}
	}
	return 0
}

// alwaysEntries is what approve --always stores for a request: what the
// session approval put in force (jail.approve), as allow takes it: a
// name with its port, a whole address, a host port with its protocol.
func alwaysEntries(q ask.Request) (ips, domains, hostPorts []string) {
	switch q.Kind {
	case "name":
		domains = []string{q.Name + ":" + strconv.Itoa(int(q.Port))}
	case "address":
		ips = []string{q.Addr}
	case "host-port":
		hostPorts = []string{strconv.Itoa(int(q.Port)) + "/" + q.Proto}
	}
	return ips, domains, hostPorts
}
