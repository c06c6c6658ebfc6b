package main

import (
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// The command line is described once, here: the commands, and each one's
// options. The parser of `run` accepts exactly runOptions, install,
// uninstall and version parse with the flag sets their constructors make,
// and `run --help`, the main help, the shell completions and the man page
// are all generated from the same tables (completion.go), so none can
// list an option that does not exist or miss one that does.

// option is one command-line option.
type option struct {
	name string   // "--bind"
	args []string // the value names ("SRC", "DST"); none for a switch
	// help is the text shown after the option in --help: lines already
	// wrapped to the help's width.
	help string
	// short is the one-line description of completions (empty: the help
	// up to its first pause).
	short string
	// values are the only values the option takes (--net), for completion.
	values []string
	// section groups run's options in its help.
	section string
	// planOnly marks an option of `plan` that `run` refuses; runOnly one
	// of `run` that `plan` refuses.
	planOnly, runOnly bool
}

// argKind says what an option's value is, for completion: a path, a
// directory, or free text.
func (o option) argKind(i int) string {
	if len(o.values) > 0 {
		return "values"
	}
	switch o.args[i] {
	case "PATH", "SRC", "DST", "FILE":
		return "file"
	case "DIR":
		return "dir"
	}
	return "text"
}

// The sections of run's help, in order.
const (
	secFS     = "Filesystem (applied in order, after the base view):"
	secEnv    = "Environment and process:"
	secNet    = "Network:"
	secStatus = "Status for other programs:"
)

// runOptions are the options of `run` and `plan`.
var runOptions = []option{
	{name: "--tmpfs", args: []string{"PATH"}, section: secFS, help: "empty writable tmpfs at PATH (mode 0755)"},
	{name: "--tmpfs-size", args: []string{"SIZE"}, section: secFS, help: `size limit of each writable tmpfs inside (/tmp, the
home, /dev/shm, /run, every --tmpfs, each --overlay's
layer), e.g. 512M or 2G; default: a quarter of the
RAM shared among them; at least 1M`},
	{name: "--perms", args: []string{"MODE"}, section: secFS, help: "octal mode for the --tmpfs right after it (e.g. 1777)"},
	{name: "--bind", args: []string{"SRC", "DST"}, section: secFS, help: "host path SRC at DST, writable"},
	{name: "--ro-bind", args: []string{"SRC", "DST"}, section: secFS, help: "host path SRC at DST, read-only"},
	{name: "--bind-try", args: []string{"SRC", "DST"}, section: secFS, help: "like --bind, skipped when SRC is missing"},
	{name: "--ro-bind-try", args: []string{"SRC", "DST"}, section: secFS, help: "like --ro-bind, skipped when SRC is missing"},
	{name: "--dev-bind", args: []string{"SRC", "DST"}, section: secFS, short: "host device node SRC at DST, usable", help: `host device node SRC (or a directory below /dev,
e.g. /dev/dri) at DST, usable: read-only, nosuid,
devices on (every other bind is nodev)`},
	{name: "--dev-bind-try", args: []string{"SRC", "DST"}, section: secFS, help: "like --dev-bind, skipped when SRC is missing"},
	{name: "--mask", args: []string{"PATH"}, section: secFS, help: "hide PATH: /dev/null over a file, empty read-only dir"},
	{name: "--bare", section: secFS, help: "no default tmpfs on /tmp and $HOME"},
	{name: "--allow-socket", args: []string{"PATH"}, section: secFS, help: `let the command connect to the host Unix socket PATH
(repeatable); every other host socket is hidden: /run
is a private tmpfs and the sockets listed in
/proc/net/unix are masked wherever they show`},

	{name: "--setenv", args: []string{"NAME", "VALUE"}, section: secEnv, help: `set NAME inside (NAME: letters, digits and _, not
starting with a digit)`},
	{name: "--keep-env", args: []string{"NAME"}, section: secEnv, help: "pass NAME through from this environment, if set"},
	{name: "--clearenv", section: secEnv, short: "start from an empty environment, not PATH, HOME and TERM", help: `start from an empty environment: without it, the
command gets PATH=/usr/local/sbin:/usr/local/bin:
/usr/sbin:/usr/bin:/sbin:/bin, and HOME and TERM
from here when set (--setenv, --keep-env override)`},
	{name: "--chdir", args: []string{"DIR"}, section: secEnv, help: `start in DIR (default: the current directory; when
it is not visible inside, / with a warning)`},
	{name: "--hostname", args: []string{"NAME"}, section: secEnv, help: "hostname inside (the host's is never changed)"},
	{name: "--osc52", args: []string{"MODE"}, values: []string{"deny", "allow"}, section: secEnv,
		short: "whether the command may write the terminal's clipboard (deny)", help: `whether the command may write the host terminal's
clipboard (OSC 52) when that terminal is its input:
deny (default) or allow. Never when the terminal is
only its output; clipboard reads never pass`},
	{name: "--pids-limit", args: []string{"N"}, section: secEnv, help: `at most N processes and threads alive at once inside,
nested sandboxes included (default 4096; 300 to
4194303; 0 for no limit, with a warning)`},

	{name: "--net", args: []string{"MODE"}, values: []string{"jail", "host", "none"}, section: secNet,
		short: "the network mode, jail by default, host or none", help: `the network, one of:
jail (default): a private network whose only way
out is the egress jail: the internet and DNS are
reachable; private ranges (10/8, 172.16/12,
192.168/16, 100.64/10), link-local and metadata
(169.254/16), loopback, multicast, the host's own
subnets and their IPv6 counterparts are blocked, at
once, for TCP, UDP and ping;
host: share the host's network, no egress jail;
none: an empty network namespace with only lo`},
	{name: "--allow-ip", args: []string{"ADDR"}, section: secNet, help: "let the jail reach ADDR (IPv4 or IPv6), any port"},
	{name: "--allow-cidr", args: []string{"PREFIX"}, section: secNet, help: "let the jail reach a whole range, e.g. 10.20.0.0/16"},
	{name: "--internet-cidr", args: []string{"PREFIX"}, section: secNet, help: `treat PREFIX as internet: a host route more specific
than the default (even through the default gateway)
makes its destination internal; this lifts the routes
within PREFIX (not private ranges or the host's subnets)`},
	{name: "--allow-domain", args: []string{"NAME[:PORT]"}, section: secNet, help: `let the jail reach NAME (any port, or PORT only);
repeatable. With any --allow-domain the internet is
default-deny: only these names, --allow-ip/--allow-cidr
and DNS are reachable. NAME is a host (api.github.com,
that name only) or *.example.com (its subdomains, not
example.com itself), or a preset: @claude-code,
@github, @npm, @pypi, @go. Names not on the list do not
resolve (NXDOMAIN, never asked upstream); TLS must
carry the name as its SNI, HTTP as its Host; UDP 443
(QUIC) is refused so clients use TCP`},
	{name: "--deny-domain", args: []string{"NAME[:PORT]"}, section: secNet, help: `refuse NAME even where an --allow-domain entry
matches it (deny wins); same forms`},
	{name: "--allow-host-port", args: []string{"PORT[/udp]"}, section: secNet, short: "let the jail reach the host's 127.0.0.1:PORT via host.internal", help: `let the sandbox reach the host's 127.0.0.1:PORT
(repeatable; TCP unless /udp) at the jail's gateway
address, named host.internal in its /etc/hosts;
every other host loopback port stays blocked`},
	{name: "--publish", args: []string{"[HOSTADDR:]HOSTPORT:PORT[/udp]"}, section: secNet, short: "relay the host's HOSTPORT to the sandbox's PORT", help: `listen on the host at HOSTADDR:HOSTPORT (default
127.0.0.1; 0.0.0.0 only when written) and relay
each connection (TCP unless /udp) to the sandbox's
PORT; the server inside must listen on 0.0.0.0 or
the sandbox's address (repeatable; --net=jail only)`},
	{name: "--ssh-agent", args: []string{"HOST[,HOST...]"}, section: secNet, short: "an SSH agent inside that signs only for HOST (git push over SSH)", help: `serve an SSH agent inside (SSH_AUTH_SOCK) backed by
the caller's own agent, which never shows inside:
it lists the caller's keys and signs only a user
authentication of an ssh connection bound (OpenSSH
8.9+ session-bind) to a host key of HOST, as the
caller's ~/.ssh/known_hosts holds it; every other
signature is refused and reported. HOST or HOST:PORT
(22 by default); repeatable. GIT_SSH_COMMAND uses a
known_hosts of exactly those keys; with an
--allow-domain list, HOST:PORT is added to it.
@github and @gitlab stand for github.com and
gitlab.com with their published host keys`},
	{name: "--ssh-key", args: []string{"KEY"}, section: secNet, short: "the caller's agent key --ssh-agent lists and signs with", help: `with --ssh-agent, list and sign with only KEY of the
caller's agent (a public key line, KEYTYPE BASE64, or
a SHA256: fingerprint; repeatable; default: all)`},
	{name: "--ssh-key-file", args: []string{"FILE"}, section: secNet, short: "a private key file --ssh-agent signs with, held by the launcher", help: `with --ssh-agent, sign with the unencrypted private
key in FILE instead of the caller's agent: the
launcher reads it (mode 600, as ssh wants; an
encrypted key is refused: ssh-add it instead) and
holds it; it must not show inside the sandbox (keep
it under ~/.ssh, which the empty home hides); the
same host policy applies (repeatable)`},
	{name: "--ssh-host-key", args: []string{"LINE"}, section: secNet, short: "a pinned host key of an --ssh-agent host", help: `with --ssh-agent, trust a host key given as LINE,
'HOST KEYTYPE BASE64' (HOST an --ssh-agent host),
besides what ~/.ssh/known_hosts holds (repeatable)`},
	{name: "--ssh-confirm", section: secNet, short: "with --ask, ask before each signature --ssh-agent makes", help: `with --ssh-agent and --ask, every signature the
agent's host policy allows is first a request of the
ask mode (claude-sandbox requests: ssh-sign, the host
and key): approve REQ --once signs it, --session
signs that host and key's later ones without asking,
deny REQ refuses it; ssh waits meanwhile (up to
--ask-timeout)`},
	{name: "--log-blocked", args: []string{"FILE"}, section: secNet, help: `append every blocked flow to FILE as a JSON line
(otherwise a summary is printed when the command ends)`},
	{name: "--audit-log", args: []string{"FILE"}, section: secNet, help: `append every flow decision (allowed and refused) and
every reach change to FILE as JSON lines, written
outside the sandbox; at 16 MiB FILE becomes FILE.1`},
	{name: "--ask", section: secNet, short: "hold a refused flow until you approve or deny it (claude-sandbox requests)", help: `hold a flow the jail would refuse (a name off the
--allow-domain list, an internal address, a host
port) while you decide: claude-sandbox requests lists
it, claude-sandbox approve REQ lets it go (--once,
--session), claude-sandbox deny REQ refuses it; one
line on the terminal names each request`},
	{name: "--ask-timeout", args: []string{"DURATION"}, section: secNet, help: `with --ask, refuse a request no one answered after
DURATION (default 30s, at most 10m)`},
	{name: "--udp-flows", args: []string{"N"}, section: secNet, help: `at most N UDP flows at once (default 512); at the cap
the least recently used is evicted, and recorded`},
	{name: "--udp-idle-timeout", args: []string{"DURATION"}, section: secNet, help: `an idle UDP flow keeps its host port this long
(default 5m, as RFC 4787 recommends; under 2m
breaks its floor)`},
	{name: "--debug", section: secStatus, help: `log what the launcher and the egress jail do (blocks,
policy changes, the relay's errors) at debug level,
to stderr, each line behind "claude-sandbox: debug: "`},
	{name: "--debug-file", args: []string{"FILE"}, section: secStatus, short: "like --debug, to FILE", help: `like --debug, appended to FILE instead (created
0600; never through a symlink)`},
	{name: "--json-status-fd", args: []string{"FD"}, section: secStatus, runOnly: true, help: `write JSON lines to descriptor FD (already open):
{"event":"started"} once COMMAND runs (its pid, init's
pid, the namespaces' inode numbers, the jail's
addresses), then {"event":"exited","exit-code":N}, or
{"event":"failed",...} when the sandbox was not built`},
	{name: "--json-status-blocked", section: secStatus, runOnly: true, help: `also one {"event":"blocked"} line per flow the jail
refuses (time, proto, dst, rule), as it happens`},

	{name: "--json", planOnly: true, help: "(plan only) print the plan as JSON"},
}

// findRunOption looks name up in runOptions.
func findRunOption(name string) (option, bool) {
	for _, o := range runOptions {
		if o.name == name {
			return o, true
		}
	}
	return option{}, false
}

// spelled is the option as the help shows it: "--bind SRC DST".
func (o option) spelled() string {
	return strings.Join(append([]string{o.name}, o.args...), " ")
}

// renderOptions lays options out as a help does: the option in a
// column of width, its help beside it (a help line that does not fit
// beside a long option starts on the next).
func renderOptions(b *strings.Builder, opts []option, width int) {
	pad := strings.Repeat(" ", 2+width)
	for _, o := range opts {
		s := o.spelled()
		lines := strings.Split(o.help, "\n")
		if len(s) >= width {
			fmt.Fprintf(b, "  %s\n", s)
			for _, l := range lines {
				fmt.Fprintf(b, "%s%s\n", pad, l)
			}
			continue
		}
		fmt.Fprintf(b, "  %-*s%s\n", width, s, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(b, "%s%s\n", pad, l)
		}
	}
}

// runHelp is run's and plan's --help text, built on first use: built at
// package initialisation, it cost every process of this binary (each
// stage, the shadow) its formatting (issue 33).
var runHelp = sync.OnceValue(func() string {
	var b strings.Builder
	b.WriteString(`Usage: claude-sandbox run [OPTIONS] [--] COMMAND [ARG...]
       claude-sandbox plan --json [OPTIONS] [--] COMMAND [ARG...]

Run COMMAND in fresh user, mount, PID, IPC, UTS and cgroup namespaces, with
the host's root read-only, an empty /tmp and home directory, a private /dev,
its own /proc, no capabilities, no_new_privs and a small environment (PATH,
and HOME and TERM from here).
'plan --json' prints what would be applied, and runs nothing.
`)
	for _, sec := range []string{secFS, secEnv, secNet, secStatus} {
		var in []option
		for _, o := range runOptions {
			if o.section == sec {
				in = append(in, o)
			}
		}
		fmt.Fprintf(&b, "\n%s\n", sec)
		renderOptions(&b, in, 22)
	}
	b.WriteString(`
The exit status is COMMAND's, 128+N if signal N killed it, 125 if the
sandbox could not be built, 126/127 if COMMAND cannot run or is not found.

Examples:
  claude-sandbox run -- sh -c 'id; ls -A ~; touch /usr/x'
  claude-sandbox run --bind "$PWD" "$PWD" --net=none -- make test
  claude-sandbox run --allow-ip 10.1.2.3 -- curl http://10.1.2.3/
  claude-sandbox plan --json --mask /etc/shadow -- true
`)
	return b.String()
})

// flagOptions turns a flag set into options: a flag's value name is the
// back-quoted word of its usage (flag.UnquoteUsage), and a boolean flag
// takes none.
func flagOptions(f *flag.FlagSet) []option {
	var out []option
	f.VisitAll(func(fl *flag.Flag) {
		name, usage := flag.UnquoteUsage(fl)
		o := option{name: "--" + fl.Name, help: usage}
		if name != "" {
			o.args = []string{name}
		}
		out = append(out, o)
	})
	return out
}

// command is one subcommand.
type command struct {
	name string
	// usage is the synopsis after "claude-sandbox ", summary what it does.
	usage, summary string
	// options lists its options (nil: none).
	options func() []option
	// args says what its words are, for completion: "command" (a command
	// line after the options), "dir", "commands" (a subcommand name),
	// "shells" (completion), or "".
	args string
}

// commands is every subcommand, in the order the help lists them.
var commands = []command{
	{name: "run", usage: "run [OPTIONS] [--] COMMAND [ARG...]", summary: "run COMMAND sandboxed", args: "command",
		options: func() []option { return runOnly(false) }},
	{name: "plan", usage: "plan --json [OPTIONS] [--] COMMAND", summary: "print the plan, run nothing", args: "command",
		options: func() []option { return runOnly(true) }},
	{name: "install", usage: "install [--prefix DIR] [--real PATH] [--config FILE]", summary: "install the shadow and the guard (root)",
		options: func() []option { f, _ := newInstallFlags(); return flagOptions(f) }},
	{name: "uninstall", usage: "uninstall [--prefix DIR]", summary: "undo install",
		options: func() []option { f, _, _ := newUninstallFlags(); return flagOptions(f) }},
	{name: "promote", usage: "promote TARGET", summary: "make workspace TARGET install the sandbox itself", args: "dir"},
	{name: "doctor", usage: "doctor", summary: "check every prerequisite, print the fixes"},
	{name: "gate", usage: "gate", summary: "the UserPromptSubmit hook: exit 2 outside the sandbox"},
	{name: "verify", usage: "verify [--json]", summary: "prove, from inside a session, that the sandbox holds",
		options: func() []option { return verifyOptions }},
	{name: "ps", usage: "ps [--json]", summary: "list your running sandboxes",
		options: func() []option { f, _ := newPsFlags(); return flagOptions(f) }},
	{name: "allow", usage: "allow ID --ip ADDR|CIDR | --domain NAME[:PORT] | --host-port PORT[/PROTO]", summary: "widen a running sandbox's reach",
		options: func() []option { f, _, _, _ := newAllowFlags("allow"); return flagOptions(f) }},
	{name: "revoke", usage: "revoke ID --ip ADDR|CIDR | --domain NAME[:PORT] | --host-port PORT[/PROTO]", summary: "take back reach from a running sandbox",
		options: func() []option { f, _, _, _ := newAllowFlags("revoke"); return flagOptions(f) }},
	{name: "requests", usage: "requests [ID] [--json]", summary: "list what sandboxes run with --ask ask to reach",
		options: func() []option { f, _ := newRequestsFlags(); return flagOptions(f) }},
	{name: "approve", usage: "approve REQ [--once|--session|--always]", summary: "let a held connection go",
		options: func() []option { f, _, _, _ := newApproveFlags("approve"); return flagOptions(f) }},
	{name: "deny", usage: "deny REQ", summary: "refuse a held connection"},
	{name: "watch", usage: "watch [ID]", summary: "show requests as they come, answer each with one key"},
	{name: "approvals", usage: "approvals [--json] [--workspace DIR] | remove N|ENTRY", summary: "list or remove reach approved always for a workspace",
		options: func() []option { f, _, _ := newApprovalsFlags(); return flagOptions(f) }},
	{name: "version", usage: "version [--json]", summary: "print the version (also --version, -V)",
		options: func() []option { f, _ := newVersionFlags(); return flagOptions(f) }},
	{name: "completion", usage: "completion bash|zsh|fish", summary: "print the shell completion script", args: "shells"},
	{name: "man", usage: "man", summary: "print the manual page (roff)"},
	{name: "help", usage: "help [COMMAND]", summary: "this text, or COMMAND's help", args: "commands"},
}

// verifyOptions are verify's (verifyMain and realMain parse them).
var verifyOptions = []option{
	{name: "--json", help: "the same report as one JSON object"},
	{name: "--hook", help: "the SessionStart hook of the integrity guard (always exits 0)"},
}

// runOnly is runOptions for run, or for plan (--json included).
func runOnly(forPlan bool) []option {
	var out []option
	for _, o := range runOptions {
		if !o.planOnly || forPlan {
			out = append(out, o)
		}
	}
	return out
}

// opts is c's options (none when it has no table).
func (c command) opts() []option {
	if c.options == nil {
		return nil
	}
	return c.options()
}

// optionNames lists c's option names, sorted.
func (c command) optionNames() []string {
	var out []string
	for _, o := range c.opts() {
		out = append(out, o.name)
	}
	sort.Strings(out)
	return out
}

// mainHelp is the main --help text, built on first use (as runHelp).
var mainHelp = sync.OnceValue(func() string {
	var b strings.Builder
	b.WriteString("claude-sandbox: run commands (and the Claude Code CLI) in a rootless sandbox.\n\nUsage:\n")
	for _, c := range commands {
		u := "claude-sandbox " + c.usage
		if len(u) > 51 {
			fmt.Fprintf(&b, "  %s\n  %-53s%s\n", u, "", c.summary)
			continue
		}
		fmt.Fprintf(&b, "  %-53s%s\n", u, c.summary)
		if c.name == "verify" {
			fmt.Fprintf(&b, "  %-53s%s\n", "claude-sandbox verify --hook", "the SessionStart hook: a warning when unwrapped")
		}
	}
	b.WriteString(`
Every command takes -h or --help. 'claude-sandbox run --help' lists the
sandbox's options.
`)
	return b.String()
})
