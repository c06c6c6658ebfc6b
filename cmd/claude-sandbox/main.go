// No goroutine watching the CPU limit to move GOMAXPROCS (Go 1.25's
// updatemaxprocs): every process of this binary runs with one P (package
// oneproc; a stage's environment), an explicit setting that stops such
// updates anyway, so the goroutine, started before any initialiser, was
// only its stack and its first run: page faults in every launcher
// (issue 33, docs/performance.md).
//
//go:debug updatemaxprocs=0

// Command claude-sandbox runs a command in a rootless Linux sandbox built
// from namespaces: a read-only view of the host, an empty home, a private
// /dev and /proc, no capabilities and a minimal environment.
//
// Usage:
//
//	claude-sandbox run [OPTIONS] [--] COMMAND [ARG...]
//	claude-sandbox plan --json [OPTIONS] [--] COMMAND [ARG...]
//
// See `claude-sandbox run --help` for the options.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	_ "github.com/claude-sandbox/claude-sandbox/cmd/claude-sandbox/internal/oneproc" // GOMAXPROCS=1 before the other initialisers
	"github.com/claude-sandbox/claude-sandbox/internal/control"
	_ "github.com/claude-sandbox/claude-sandbox/internal/covrun" // a coverage build's GOCOVERDIR (tests only)
	"github.com/claude-sandbox/claude-sandbox/jail"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
	_ "github.com/claude-sandbox/claude-sandbox/nsexec/stageinit" // a stage runs from package init: fewer inits, one thread fewer
	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/sshagent"
	"github.com/claude-sandbox/claude-sandbox/verify"
)

// subcommandHelp is each command's --help text (a function, not a
// table: run's and the main one are built on first use, and a map would
// be built at every start of this binary).
func subcommandHelp(name string) (string, bool) {
	switch name {
	case "run", "plan":
		return runHelp(), true
	case "help":
		return mainHelp(), true
	case "install", "uninstall":
		return installHelp, true
	case "promote":
		return promoteHelp, true
	case "doctor":
		return doctorHelp, true
	case "gate":
		return gateHelp, true
	case "verify":
		return verifyHelp, true
	case "version":
		return versionHelp, true
	case "completion":
		return completionHelp, true
	case "man":
		return manHelp, true
	case "ps":
		return psHelp, true
	case "allow", "revoke":
		return allowHelp, true
	case "requests":
		return requestsHelp, true
	case "approve", "deny":
		return approveHelp, true
	case "watch":
		return watchHelp, true
	case "approvals":
		return approvalsHelp, true
	}
	return "", false
}

func main() {
	nsexec.Init()       // a re-executed stage runs here and never returns
	verify.InitNested() // so does the nested helper of verify's probes
	// One P: package oneproc set it during package initialisation;
	// GOMAXPROCS in the environment still decides.
	gomaxprocsFromEnv()
	if filepath.Base(os.Args[0]) == "claude" {
		os.Exit(shadowMain(os.Args[1:], false, os.Stdout, os.Stderr))
	}
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// gomaxprocsFromEnv sets the number of Ps GOMAXPROCS names, as the
// runtime would have at its start (a positive number; anything else is
// ignored), undoing package oneproc's one P.
func gomaxprocsFromEnv() {
	if n, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainHelp())
		return 2
	}
	switch args[0] {
	case "run", "plan":
		return runOrPlan(args[0], args[1:], stdout, stderr)
	case "install":
		return installMain(args[1:], stdout, stderr)
	case "uninstall":
		return uninstallMain(args[1:], stdout, stderr)
	case "promote":
		return promoteMain(args[1:], stdout, stderr)
	case "doctor":
		return doctorMain(args[1:], stdout, stderr)
	case "gate":
		return gateMain(args[1:], stdout, stderr)
	case "verify":
		if len(args) == 2 && args[1] == "--hook" {
			return verifyHookMain(stdout)
		}
		return verifyMain(args[1:], stdout, stderr)
	case "version":
		return versionMain(args[1:], stdout, stderr)
	case "ps":
		return psMain(args[1:], stdout, stderr)
	case "allow", "revoke":
		return allowMain(args[0], args[1:], stdout, stderr)
	case "requests":
		return requestsMain(args[1:], stdout, stderr)
	case "approve", "deny":
		return approveMain(args[0], args[1:], stdout, stderr)
	case "watch":
		return watchMain(args[1:], stdout, stderr)
	case "approvals":
		return approvalsMain(args[1:], stdout, stderr)
	case "completion":
		return completionMain(args[1:], stdout, stderr)
	case "man":
		return manMain(args[1:], stdout, stderr)
	case "--version", "-V":
		return versionMain(nil, stdout, stderr)
	case "help", "-h", "--help":
		if len(args) > 1 && !wantsHelp(args[1:2]) {
			if strings.HasPrefix(args[1], "-") {
				fmt.Fprintf(stderr, "claude-sandbox help: unknown option %s (see claude-sandbox --help)\n", args[1])
				return 2
			}
			if h, ok := subcommandHelp(args[1]); ok {
				fmt.Fprint(stdout, h)
				return 0
			}
			fmt.Fprintf(stderr, "claude-sandbox help: unknown command %q (see claude-sandbox help)\n", args[1])
			return 2
		}
		fmt.Fprint(stdout, mainHelp())
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "claude-sandbox: unknown option %s (see claude-sandbox --help)\n", args[0])
		return 2
	}
	fmt.Fprintf(stderr, "claude-sandbox: unknown command %q (see claude-sandbox --help)\n", args[0])
	return 2
}

func runOrPlan(verb string, args []string, stdout, stderr io.Writer) int {
	if verb == "plan" && len(args) >= 2 && args[0] == "--json" && args[1] == "--shadow" {
		rest := args[2:]
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		}
		return shadowMain(rest, true, stdout, stderr)
	}
	r, err := parseRunArgs(args, verb == "plan")
	if err != nil {
		fmt.Fprintf(stderr, "claude-sandbox %s: %v\n", verb, err)
		return 2
	}
	if r.help {
		fmt.Fprint(stdout, runHelp())
		return 0
	}
	if verb == "plan" && !r.json {
		fmt.Fprintln(stderr, "claude-sandbox plan: only --json output exists; add --json")
		return 2
	}
	r.opts.UID, r.opts.GID = os.Getuid(), os.Getgid()
	r.opts.Environ = os.Environ()
	r.opts.Home = os.Getenv("HOME")
	if !r.clearenv {
		baseEnv(&r.opts, r.opts.Environ)
	}
	if wd, err := os.Getwd(); err == nil {
		r.opts.Cwd = wd
	} else if r.opts.Chdir == "" && verb == "run" {
		fmt.Fprintf(stderr, "claude-sandbox: warning: the current directory cannot be found (%v): starting in /\n", err)
	}
	x := runExtras{ask: r.ask, sshConfirm: r.sshConfirm, askTimeout: r.askTimeout, logBlocked: r.logBlocked, auditLog: r.auditLog, statusBlocked: r.statusBlocked, udpFlows: r.udpFlows, udpIdle: r.udpIdle, debug: r.debug, debugFile: r.debugFile, osc52: r.osc52}
	if len(r.sshAgent) == 0 {
		for _, o := range []struct {
			name string
			n    int
		}{{"--ssh-confirm", b2i(r.sshConfirm)}, {"--ssh-key", len(r.sshKeys)}, {"--ssh-key-file", len(r.sshKeyFiles)}, {"--ssh-host-key", len(r.sshHostKeys)}} {
			if o.n > 0 {
				fmt.Fprintf(stderr, "claude-sandbox %s: %s needs --ssh-agent\n", verb, o.name)
				return 2
			}
		}
	}
	if len(r.sshAgent) > 0 {
		x.sshAgent = &sshagent.Config{Hosts: r.sshAgent, Keys: r.sshKeys, KeyFiles: r.sshKeyFiles, HostKeys: r.sshHostKeys, KnownHosts: sshagent.KnownHostsFiles(r.opts.Home)}
	}
	if r.statusFD >= 0 {
		f, err := openStatusFD(r.statusFD)
		if err != nil {
			fmt.Fprintf(stderr, "claude-sandbox %s: %v\n", verb, err)
			return 2
		}
		x.status = f
	}
	return launch(verb, r.opts, x, verb == "plan", stdout, stderr)
}

// runExtras are the run's reporting choices, beside the plan.
type runExtras struct {
	logBlocked    string           // --log-blocked FILE
	auditLog      string           // --audit-log FILE, or the shadow's audit-log key
	ask           bool             // --ask, or the shadow's ask key
	sshConfirm    bool             // --ssh-confirm, or the shadow's ssh-confirm key
	askTimeout    time.Duration    // --ask-timeout; 0: the default
	status        *os.File         // --json-status-fd
	statusBlocked bool             // --json-status-blocked
	udpFlows      int              // --udp-flows; 0: the jail's default
	udpIdle       time.Duration    // --udp-idle-timeout; 0: the jail's default
	debug         bool             // --debug, or the shadow's debug key
	debugFile     string           // --debug-file; "": stderr
	osc52         bool             // --osc52 allow, or the shadow's osc52 key
	sshAgent      *sshagent.Config // --ssh-agent, or the shadow's ssh-agent key
	workspace     string           // the shadow's workspace, for ps
	shadow        bool             // launched by the shadow (the notices say "Claude")
}

// launch builds the plan from opts (with the egress jail's setup when the
// network is jailed) and either prints it (dryRun) or runs it.
func launch(verb string, opts plan.Options, x runExtras, dryRun bool, stdout, stderr io.Writer) int {
	// Without the jail, the sandbox's init starts now, while the plan is
	// built: it runs nothing until the plan reaches it (nsexec.Prestart),
	// and is stopped if the launch ends before.
	var early *nsexec.Early
	if !dryRun {
		early = nsexec.Prestart(opts.Net, opts.UID, opts.GID, nsexec.Options{ThreadsNeverEnd: true})
		defer early.Abort()
	}
	var sw *statusWriter
	if x.status != nil {
		sw = newStatusWriter(x.status, x.statusBlocked)
	}
	// fail reports a launch that ends before the sandbox is started.
	fail := func(code int, format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintln(stderr, safeText(msg))
		if sw != nil {
			sw.end("failed", code, errors.New(msg))
		}
		return code
	}
	if x.sshConfirm {
		// Each signature becomes a request of the ask mode's broker,
		// which the jail holds: without them nothing could answer.
		switch {
		case x.sshAgent == nil:
			return fail(2, "claude-sandbox %s: --ssh-confirm (ssh-confirm) confirms the signatures of --ssh-agent's agent: there is none (add --ssh-agent, or the ssh-agent key)", verb)
		case !x.ask:
			return fail(2, "claude-sandbox %s: --ssh-confirm (ssh-confirm) asks through the ask mode: add --ask (the ask key)", verb)
		case opts.Net != "" && opts.Net != plan.NetJail:
			return fail(2, "claude-sandbox %s: --ssh-confirm asks through the ask mode (--ask), which needs the egress jail: with --net=%s there is none", verb, opts.Net)
		}
		c := *x.sshAgent
		c.Confirm = true
		x.sshAgent = &c
	}
	var agentSrv *sshagent.Server
	if x.sshAgent != nil {
		srv, err := startSSHAgent(*x.sshAgent, &opts, stderr)
		agentSrv = srv
		if err != nil {
			return fail(nsexec.ExitSetup, "claude-sandbox %s: %v", verb, err)
		}
		defer func() {
			srv.Close()
			if s := srv.Policy.Summary(); s != "" && !dryRun {
				fmt.Fprintln(stderr, "claude-sandbox:", s)
			}
		}()
	}
	// Reach approved always for this workspace joins the allowlist.
	workspace := x.workspace
	if workspace == "" {
		workspace = opts.Cwd
	}
	approved := applyApprovals(&opts, workspace, func(w string) { fmt.Fprintln(stderr, "claude-sandbox: warning:", w) })
	var setup *jail.Setup
	if opts.Net == "" || opts.Net == plan.NetJail {
		facts, err := jail.DiscoverHost("/etc/resolv.conf")
		if err != nil {
			return fail(nsexec.ExitSetup, "claude-sandbox %s: egress jail: read the host's network: %v", verb, err)
		}
		facts.Internet = opts.Internet
		if setup, err = jail.PrepareNames(facts, opts.Allow, opts.AllowDomains, opts.DenyDomains); err != nil {
			// The jail cannot be built: the sandbox could not be, as for
			// any later step (docs/cli.md, exit status).
			return fail(nsexec.ExitSetup, "claude-sandbox %s: %v", verb, err)
		}
		opts.Late = append(opts.Late, setup.ResolvConf)
		if len(opts.HostPorts) > 0 {
			op, err := jail.HostHostsFile(setup.Gateway, opts.HostPorts)
			if err != nil {
				return fail(nsexec.ExitSetup, "claude-sandbox %s: --allow-host-port: %v", verb, err)
			}
			opts.Late = append(opts.Late, op)
		}
	}
	if len(opts.Publish) > 0 {
		// The command (and verify) can tell what is published.
		opts.SetEnv = append(opts.SetEnv, [2]string{verify.PublishedEnv, publishedEnv(opts.Publish)})
	}
	opts.HostRoot = nsexec.CallerIsHostRoot()
	opts.RootCaller = os.Geteuid() == 0
	if m := verify.CallerUIDMaps(os.Getenv); m != "" {
		// verify's P54 reads the whole chain of uid maps, as decided here.
		opts.SetEnv = append(opts.SetEnv, [2]string{verify.CallerUIDMapEnv, m})
	}
	if opts.PidsLimit < 0 && !dryRun {
		fmt.Fprintln(stderr, "claude-sandbox: warning: --pids-limit 0: no process limit, a fork bomb inside can exhaust the host's process table")
	}
	if opts.Warn == nil {
		opts.Warn = func(w string) { fmt.Fprintln(stderr, "claude-sandbox: warning:", w) }
	}
	p, err := plan.Build(opts)
	if err != nil {
		return fail(2, "claude-sandbox %s: %v", verb, err)
	}
	if x.sshAgent != nil {
		// The key stays in the launcher: a key file the sandbox would
		// show (the workspace, a directory of the read-only root) is
		// refused.
		for _, f := range x.sshAgent.KeyFiles {
			if at := p.ShownAt(f); len(at) > 0 {
				return fail(2, "claude-sandbox %s: ssh-key-file %s would show inside the sandbox (at %s): keep the key where the sandbox shows nothing, such as ~/.ssh (the sandbox's home is empty)", verb, f, strings.Join(at, ", "))
			}
		}
	}
	if setup != nil {
		p.Egress.Approved = approved
		p.Egress.Routes = strings.Split(strings.TrimSuffix(setup.Routes.String(), "\n"), "\n")
		if len(p.Egress.HostPorts) > 0 {
			gw := setup.Gateway
			p.Egress.HostAddress = &gw
		}
	}
	if dryRun {
		if err := printJSON(stdout, p); err != nil {
			fmt.Fprintln(stderr, "claude-sandbox plan:", err)
			return 1
		}
		return 0
	}
	nopts := nsexec.Options{Early: early, Clipboard: x.osc52}
	// Each degraded mode's warning names its remedy for the container
	// runtime, which is looked for only then (launchWarning).
	warn := func(w string) { fmt.Fprintln(stderr, "claude-sandbox: warning:", launchWarning(w)) }
	nopts.Warn = warn
	var logger *slog.Logger
	if x.debug {
		l, closeLog, err := debugLogger(x.debugFile, stderr)
		if err != nil {
			return fail(2, "claude-sandbox %s: --debug-file: %v", verb, err)
		}
		defer closeLog()
		logger = l
		logger.Debug("launch", "verb", verb, "net", opts.Net, "jail", setup != nil)
		nopts.Logger = logger
	}
	sandboxID := control.NewID()
	var lastWatch atomic.Int64 // a claude-sandbox watch's last poll (the ask mode)
	if x.auditLog != "" && setup == nil {
		fmt.Fprintf(stderr, "claude-sandbox: warning: --audit-log records the egress jail's decisions; with --net=%s there is no jail and nothing is recorded\n", opts.Net)
	}
	if setup != nil {
		for _, w := range setup.Warnings {
			warn(w)
		}
		jo := jail.Options{Summary: stderr, MaxUDPFlows: x.udpFlows, UDPIdleTimeout: x.udpIdle, Logger: logger, Warn: warn}
		jo.HostPorts = p.Egress.HostPorts
		if len(p.Egress.Publish) > 0 {
			// Before the sandbox starts: a port in use fails the launch.
			pubs, err := jail.Listen(p.Egress.Publish)
			if err != nil {
				return fail(nsexec.ExitSetup, "claude-sandbox %s: %v", verb, err)
			}
			jo.Publish = pubs
		}
		if sw != nil {
			jo.OnBlock = sw.block
		}
		if x.logBlocked != "" {
			f, err := os.OpenFile(x.logBlocked, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				return fail(2, "claude-sandbox: --log-blocked: %v", err)
			}
			defer f.Close()
			jo.Log, jo.Summary = f, nil
		}
		if x.auditLog != "" {
			a, err := jail.OpenAudit(x.auditLog, sandboxID, 0)
			if err != nil {
				return fail(2, "claude-sandbox %s: --audit-log: %v", verb, err)
			}
			defer a.Close()
			jo.Audit = a
			if agentSrv != nil {
				agentSrv.Policy.SetEvents(func(e sshagent.Event) {
					a.Write(jail.AuditRecord{Event: e.Name(), Host: e.Host, Key: e.Key, Reason: e.Reason})
				})
			}
		}
		if x.ask {
			jo.Ask = askOptions(sandboxID, x.askTimeout, stderr, x.askWho(), func() bool {
				return time.Since(time.Unix(0, lastWatch.Load())) < watchQuiet
			})
		}
		j := jail.New(setup, jo)
		nopts.Jail = j
		if agentSrv != nil {
			// Only this sandbox's processes use its agent.
			agentSrv.SetSandboxNS(j.SandboxUserNS)
		}
		if agentSrv != nil && x.sshConfirm {
			agentSrv.Policy.SetConfirm(sshagent.ConfirmBy(j.Asks()))
		}
	} else if x.ask {
		fmt.Fprintf(stderr, "claude-sandbox: warning: --ask holds what the egress jail refuses; with --net=%s there is no jail and nothing is held\n", opts.Net)
	}
	// The control socket (claude-sandbox ps, allow, revoke), before the
	// start: the started line names its id.
	cs := &control.Launcher{ID: sandboxID, Command: opts.Command, Cwd: p.Dir, Workspace: workspace, Net: string(opts.Net), Started: time.Now(), WatchedAt: &lastWatch}
	if j, ok := nopts.Jail.(*jail.Jail); ok {
		cs.Jail = j
	}
	if ctl := startControl(cs, func(w string) { fmt.Fprintln(stderr, "claude-sandbox: warning:", w) }); ctl != nil {
		defer ctl.Close()
		if sw != nil {
			sw.id = cs.ID
		}
	}
	nopts.ForwardSignals = true
	// No goroutine of this program returns locked to its thread, so no
	// thread ends: the stages may be started from any (a thread kept for
	// that, or the main thread locked until then, cost the launcher 0.6
	// threads on average for the sandbox's life; issue 19).
	nopts.ThreadsNeverEnd = true
	var code int
	if sw != nil {
		code, err = runWithStatus(sw, setup, func() (*nsexec.Process, error) { return nsexec.Start(context.Background(), p, nopts) })
	} else {
		code, err = nsexec.Run(p, nopts)
	}
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox:", err)
		if h := setupHint(err.Error(), currentRuntime(), realSys); h != "" {
			fmt.Fprintln(stderr, "claude-sandbox:", h)
		}
	}
	if o := openings(p); o != "" {
		fmt.Fprintln(stderr, "claude-sandbox:", o)
	}
	if a := approvedSummary(approved); a != "" {
		fmt.Fprintln(stderr, "claude-sandbox:", a)
	}
	return code
}

// askWho is who the ask mode's notices say asks.
func (x runExtras) askWho() string {
	if x.shadow {
		return "Claude"
	}
	return "the sandbox"
}
