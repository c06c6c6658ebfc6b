package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/sshagent"
)

// usageError is bad input on the command line: printed as one line, exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }

// runArgs is what `run` and `plan` accept, before it becomes plan.Options.
type runArgs struct {
	opts       plan.Options
	json       bool // plan --json
	help       bool
	logBlocked string
	auditLog   string
	ask        bool          // --ask
	sshConfirm bool          // --ssh-confirm
	askTimeout time.Duration // --ask-timeout; 0: the default
	// --json-status-fd (-1: none) and --json-status-blocked.
	statusFD      int
	statusBlocked bool
	udpFlows      int           // --udp-flows; 0: the jail's default
	udpIdle       time.Duration // --udp-idle-timeout; 0: the jail's default
	clearenv      bool          // --clearenv: no base environment
	debug         bool          // --debug (or --debug-file)
	debugFile     string        // --debug-file FILE
	osc52         bool          // --osc52 allow
	sshAgent      []string      // --ssh-agent hosts
	sshKeys       []string      // --ssh-key keys
	sshKeyFiles   []string      // --ssh-key-file files
	sshHostKeys   []string      // --ssh-host-key pinned host keys
}

// baseEnv puts the base environment a command gets unless --clearenv was
// given in front of opts' own: PATH (plan.DefaultPath), and HOME and TERM
// from environ when set there. A name the caller set or kept itself is
// left to that option.
func baseEnv(opts *plan.Options, environ []string) {
	named := map[string]bool{}
	for _, k := range opts.KeepEnv {
		named[k] = true
	}
	for _, kv := range opts.SetEnv {
		named[kv[0]] = true
	}
	lookup := func(k string) (string, bool) {
		v, ok := "", false
		for _, kv := range environ {
			if n, val, found := strings.Cut(kv, "="); found && n == k {
				v, ok = val, true
			}
		}
		return v, ok
	}
	var base [][2]string
	if !named["PATH"] {
		base = append(base, [2]string{"PATH", plan.DefaultPath})
	}
	for _, k := range []string{"HOME", "TERM"} {
		if v, ok := lookup(k); ok && !named[k] {
			base = append(base, [2]string{k, v})
		}
	}
	opts.SetEnv = append(base, opts.SetEnv...)
}

// parseRunArgs reads the options of `run` (and `plan`, which also takes
// --json). Options may not follow the command: everything after `--`, or
// from the first word that is not an option, is the command.
func parseRunArgs(args []string, forPlan bool) (*runArgs, error) {
	r := &runArgs{statusFD: -1}
	perms := uint32(0)
	var havePerms bool
	need := func(i, n int, name string) error {
		if i+n >= len(args) {
			if n == 1 {
				return usagef("%s needs a value", name)
			}
			return usagef("%s needs %d values", name, n)
		}
		return nil
	}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, inline, hasInline := strings.Cut(a, "=")
		// Options that take one value accept --opt=value as well.
		value := func() (string, error) {
			if hasInline {
				return inline, nil
			}
			if err := need(i, 1, name); err != nil {
				return "", err
			}
			i++
			return args[i], nil
		}
		noInline := func() error {
			if hasInline {
				return usagef("%s takes no =value", name)
			}
			return nil
		}
		if _, ok := findRunOption(name); !ok && name != "-h" && name != "--help" {
			return nil, usagef("unknown option %s (see claude-sandbox %s --help)", name, map[bool]string{true: "plan", false: "run"}[forPlan])
		}
		switch name {
		case "-h", "--help":
			r.help = true
			return r, nil
		case "--json":
			if !forPlan {
				return nil, usagef("--json belongs to `claude-sandbox plan`")
			}
			if err := noInline(); err != nil {
				return nil, err
			}
			r.json = true
		case "--net":
			v, err := value()
			if err != nil {
				return nil, err
			}
			switch plan.Net(v) {
			case plan.NetJail, plan.NetHost, plan.NetNone:
				r.opts.Net = plan.Net(v)
			default:
				return nil, usagef("--net: unknown mode %q (use jail, host or none)", v)
			}
		case "--allow-ip", "--allow-cidr":
			v, err := value()
			if err != nil {
				return nil, err
			}
			pfx, err := netpolicy.ParseAllow(v)
			if err != nil {
				return nil, usagef("%s: %v", name, err)
			}
			if name == "--allow-ip" && !pfx.IsSingleIP() {
				return nil, usagef("--allow-ip takes one address; use --allow-cidr %s for a range", v)
			}
			r.opts.Allow = append(r.opts.Allow, pfx)
		case "--internet-cidr":
			v, err := value()
			if err != nil {
				return nil, err
			}
			pfx, err := netpolicy.ParseInternetCIDR(v)
			if err != nil {
				return nil, usagef("--internet-cidr: %v", err)
			}
			r.opts.Internet = append(r.opts.Internet, pfx)
		case "--allow-domain", "--deny-domain":
			v, err := value()
			if err != nil {
				return nil, err
			}
			if _, err := netpolicy.ExpandDomains([]string{v}); err != nil {
				return nil, usagef("%s: %v", name, err)
			}
			if name == "--allow-domain" {
				r.opts.AllowDomains = append(r.opts.AllowDomains, v)
			} else {
				r.opts.DenyDomains = append(r.opts.DenyDomains, v)
			}
		case "--allow-host-port":
			v, err := value()
			if err != nil {
				return nil, err
			}
			h, err := netpolicy.ParseHostPort(v)
			if err != nil {
				return nil, usagef("--allow-host-port: %v", err)
			}
			r.opts.HostPorts = append(r.opts.HostPorts, h)
		case "--publish":
			v, err := value()
			if err != nil {
				return nil, err
			}
			pb, err := netpolicy.ParsePublish(v)
			if err != nil {
				return nil, usagef("--publish: %v", err)
			}
			r.opts.Publish = append(r.opts.Publish, pb)
		case "--allow-socket":
			v, err := value()
			if err != nil {
				return nil, err
			}
			r.opts.AllowSockets = append(r.opts.AllowSockets, v)
		case "--ssh-agent":
			v, err := value()
			if err != nil {
				return nil, err
			}
			for _, h := range strings.Split(v, ",") {
				if _, _, err := sshagent.ParseHost(strings.TrimSpace(h)); err != nil {
					return nil, usagef("--ssh-agent: %v", err)
				}
				r.sshAgent = append(r.sshAgent, strings.TrimSpace(h))
			}
		case "--ssh-key":
			v, err := value()
			if err != nil {
				return nil, err
			}
			if _, err := sshagent.KeyFingerprint(v); err != nil {
				return nil, usagef("--ssh-key: %v", err)
			}
			r.sshKeys = append(r.sshKeys, v)
		case "--ssh-key-file":
			v, err := value()
			if err != nil {
				return nil, err
			}
			if v == "" {
				return nil, usagef("--ssh-key-file: an empty path")
			}
			abs, err := filepath.Abs(v)
			if err != nil {
				return nil, usagef("--ssh-key-file: %v", err)
			}
			r.sshKeyFiles = append(r.sshKeyFiles, abs)
		case "--ssh-host-key":
			v, err := value()
			if err != nil {
				return nil, err
			}
			if _, _, _, err := sshagent.ParseHostKey(v); err != nil {
				return nil, usagef("--ssh-host-key: %v", err)
			}
			r.sshHostKeys = append(r.sshHostKeys, v)
		case "--log-blocked":
			v, err := value()
			if err != nil {
				return nil, err
			}
			r.logBlocked = v
		case "--ask":
			if err := noInline(); err != nil {
				return nil, err
			}
			r.ask = true
		case "--ssh-confirm":
			if err := noInline(); err != nil {
				return nil, err
			}
			r.sshConfirm = true
		case "--ask-timeout":
			v, err := value()
			if err != nil {
				return nil, err
			}
			d, err := parseAskTimeout(v)
			if err != nil {
				return nil, usagef("--ask-timeout: %v", err)
			}
			r.askTimeout = d
		case "--audit-log":
			v, err := value()
			if err != nil {
				return nil, err
			}
			r.auditLog = v
		case "--debug":
			if err := noInline(); err != nil {
				return nil, err
			}
			r.debug = true
		case "--debug-file":
			v, err := value()
			if err != nil {
				return nil, err
			}
			r.debug, r.debugFile = true, v
		case "--json-status-fd":
			if forPlan {
				return nil, usagef("--json-status-fd belongs to `claude-sandbox run`")
			}
			v, err := value()
			if err != nil {
				return nil, err
			}
			fd, err := strconv.Atoi(v)
			if err != nil || fd < 0 {
				return nil, usagef("--json-status-fd: %q is not a file descriptor number", v)
			}
			r.statusFD = fd
		case "--json-status-blocked":
			if err := noInline(); err != nil {
				return nil, err
			}
			r.statusBlocked = true
		case "--osc52":
			v, err := value()
			if err != nil {
				return nil, err
			}
			switch v {
			case "allow", "deny":
				r.osc52 = v == "allow"
			default:
				return nil, usagef("--osc52 takes allow or deny, not %q", v)
			}
		case "--udp-flows":
			v, err := value()
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return nil, usagef("--udp-flows takes a number of flows from 1 to 65535, e.g. --udp-flows 512")
			}
			r.udpFlows = n
		case "--udp-idle-timeout":
			v, err := value()
			if err != nil {
				return nil, err
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second || d > 24*time.Hour {
				return nil, usagef("--udp-idle-timeout takes a duration from 1s to 24h, e.g. --udp-idle-timeout 5m")
			}
			r.udpIdle = d
		case "--tmpfs", "--mask":
			v, err := value()
			if err != nil {
				return nil, err
			}
			op := mounts.Op{Kind: mounts.Kind(strings.TrimPrefix(name, "--")), Dst: v}
			if op.Kind == mounts.Tmpfs && havePerms {
				op.Mode, havePerms = mounts.Mode(perms), false
			}
			r.opts.Ops = append(r.opts.Ops, op)
		case "--perms":
			v, err := value()
			if err != nil {
				return nil, err
			}
			m, err := strconv.ParseUint(v, 8, 32)
			if err != nil || m > 0o7777 {
				return nil, usagef("--perms: %q is not an octal mode like 0755 or 1777", v)
			}
			perms, havePerms = uint32(m), true
		case "--bind", "--ro-bind", "--bind-try", "--ro-bind-try", "--dev-bind", "--dev-bind-try":
			if err := noInline(); err != nil {
				return nil, err
			}
			if err := need(i, 2, name); err != nil {
				return nil, err
			}
			kind, optional := strings.CutSuffix(strings.TrimPrefix(name, "--"), "-try")
			r.opts.Ops = append(r.opts.Ops, mounts.Op{Kind: mounts.Kind(kind), Src: args[i+1], Dst: args[i+2], Optional: optional})
			i += 2
		case "--setenv":
			if err := noInline(); err != nil {
				return nil, err
			}
			if err := need(i, 2, name); err != nil {
				return nil, err
			}
			r.opts.SetEnv = append(r.opts.SetEnv, [2]string{args[i+1], args[i+2]})
			i += 2
		case "--keep-env":
			v, err := value()
			if err != nil {
				return nil, err
			}
			r.opts.KeepEnv = append(r.opts.KeepEnv, v)
		case "--chdir":
			v, err := value()
			if err != nil {
				return nil, err
			}
			r.opts.Chdir = v
		case "--hostname":
			v, err := value()
			if err != nil {
				return nil, err
			}
			r.opts.Hostname = v
		case "--tmpfs-size":
			v, err := value()
			if err != nil {
				return nil, err
			}
			n, err := plan.ParseSize(v)
			if err != nil {
				return nil, usagef("--tmpfs-size: %v", err)
			}
			if n < plan.MinTmpfsSize {
				return nil, usagef("--tmpfs-size: %q is too small: use at least 1M", v)
			}
			r.opts.TmpfsSize = n
		case "--pids-limit":
			v, err := value()
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, usagef("--pids-limit: %q is not a number of processes (0 for no limit)", v)
			}
			if n == 0 {
				n = -1 // plan.Options: negative is no limit, 0 the default
			}
			r.opts.PidsLimit = n
		case "--bare":
			if err := noInline(); err != nil {
				return nil, err
			}
			r.opts.Bare = true
		case "--clearenv":
			if err := noInline(); err != nil {
				return nil, err
			}
			r.clearenv = true
		default:
			return nil, usagef("unknown option %s (see claude-sandbox %s --help)", name, map[bool]string{true: "plan", false: "run"}[forPlan])
		}
	}
	if havePerms {
		return nil, usagef("--perms must come right before the --tmpfs it applies to")
	}
	if r.statusBlocked && r.statusFD < 0 {
		return nil, usagef("--json-status-blocked adds lines to --json-status-fd: give that too")
	}
	r.opts.Command = append([]string(nil), args[i:]...)
	if len(r.opts.Command) == 0 {
		return nil, usagef("no command given: put it after --, e.g. claude-sandbox run -- /bin/sh")
	}
	return r, nil
}
