package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/internal/install"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// install and uninstall are a thin layer over internal/install: the
// options, the invoking user, the prerequisites check and the generated
// documents come from here; the layout, the steps, the journal and the
// safe writes are the library's.

const installHelp = `Usage: claude-sandbox install [--prefix DIR] [--real PATH] [--config FILE] [--apparmor]
                              [--shared-config DIR] [--allow-unwrapped] [--skip-checks] [--dry-run]
       claude-sandbox uninstall [--prefix DIR] [--dry-run]

install (root only) puts the binary at /usr/libexec/claude-sandbox/claude-sandbox,
the shadow at /usr/local/bin/claude, moves the real Claude Code binary from
~/.local/bin/claude (or --real PATH) to /usr/libexec/claude-sandbox/claude
(an npm-installed Claude Code stays in node_modules: the shadow takes the
place of npm's /usr/local/bin/claude link, and the relocated place links
to the package's binary), copies --config FILE to /etc/claude-sandbox.conf,
and merges the integrity guard into /etc/claude-code/managed-settings.json.
It first checks that
user namespaces and /dev/net/tun work, that --config parses and --real
exists, and refuses with the fix, having written nothing, when they do
not (--skip-checks: for image builds). The changes are one transaction: a
failure part way puts back everything it touched. A second run, with any
options, changes nothing; --real naming the relocated binary is in place
already and is kept.

uninstall puts the real binary back (npm's link, the native installer's
link, or the plain file, as it was), removes the shadow, and restores the
managed settings and configuration as they were before install. Where
nothing is installed it says so and exits 1.

--apparmor writes /etc/apparmor.d/claude-sandbox and loads it: on hosts
where AppArmor restricts unprivileged user namespaces (Ubuntu 23.10 and
later), it lets this binary create them without lifting the restriction
for everything else.

--shared-config DIR links ~/.claude and ~/.claude.json to DIR (a host mount,
say), so Claude's login and memories survive container rebuilds: an
existing home copy is adopted, or backed up when DIR has its own; missing
ones are seeded.

--allow-unwrapped writes the escape hatch /etc/claude-code/allow-unwrapped
(root-owned, 0644), which lets the integrity guard pass Claude Code run
outside the sandbox. install writes it by itself on Claude Code on the web
(CLAUDE_CODE_REMOTE=true in install's own environment), which runs in a
sandbox of its own: the gate never reads that variable, which a settings
file's env block could set. uninstall removes a hatch install wrote.

--dry-run prints the changes install or uninstall would make (each file,
directory, link, move and owner change, by step) and changes nothing.

--prefix DIR installs under DIR instead of / (for tests and image builds)
and writes nothing outside DIR: the user's home is DIR/$HOME, the shared
directory DIR/PATH, and a --real file outside DIR is copied, not moved.
`

// installOpts are install's arguments.

// installFlags are install's options, as newInstallFlags defines them.
type installFlags struct {
	prefix, realPath, config, shared  *string
	skip, apparmor, unwrapped, dryRun *bool
}

// newInstallFlags is install's flag set: its options, their value names
// (back-quoted in the usage) and help, for the parser, the completions and
// the man page alike.
func newInstallFlags() (*flag.FlagSet, installFlags) {
	flags := newFlags("install")
	return flags, installFlags{
		prefix:    flags.String("prefix", "/", "install under the root `DIR` instead of /, writing nothing outside it"),
		realPath:  flags.String("real", "", "the real Claude Code binary to relocate (`PATH`; default ~/.local/bin/claude)"),
		config:    flags.String("config", "", "a claude-sandbox.conf `FILE` to install as "+shadow.ConfigPath),
		skip:      flags.Bool("skip-checks", false, "do not check user namespaces and /dev/net/tun (image builds)"),
		apparmor:  flags.Bool("apparmor", false, "write (and load) an AppArmor profile that lets this binary create user namespaces"),
		shared:    flags.String("shared-config", "", "link ~/.claude and ~/.claude.json to this shared, host-mounted `DIR`"),
		unwrapped: flags.Bool("allow-unwrapped", false, "write the root-owned escape hatch "+guard.AllowUnwrapped+" (automatic on Claude Code on the web)"),
		dryRun:    flags.Bool("dry-run", false, "print the changes install would make, and change nothing"),
	}
}

func installMain(args []string, stdout, stderr io.Writer) int {
	flags, fv := newInstallFlags()
	if code, done := parseFlags(flags, args, installHelp, stdout, stderr); done {
		return code
	}
	if flags.NArg() > 0 {
		return usageLine(stderr, "install", fmt.Sprintf("unexpected argument %q", flags.Arg(0)))
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "claude-sandbox install: needs root (sudo claude-sandbox install)")
		return 1
	}
	root, err := filepath.Abs(*fv.prefix)
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox install: --prefix:", err)
		return 2
	}
	home, uid, gid := invokingUser()
	o := installOptions(uid, gid, stdout, stderr)
	o.Real, o.Config, o.Shared, o.AppArmor, o.DryRun = *fv.realPath, *fv.config, *fv.shared, *fv.apparmor, *fv.dryRun
	o.Hatch = *fv.unwrapped || os.Getenv("CLAUDE_CODE_REMOTE") == "true"
	if !*fv.skip {
		o.Check = checkPrerequisites
	}
	l := install.Layout{Root: root, Home: home}
	j, err := install.Install(l, o)
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox install:", err)
		return 1
	}
	if o.DryRun {
		printDryRun("install", l, j, stdout)
	}
	return 0
}

// installOptions are the options install and uninstall share.
func installOptions(uid, gid int, stdout, stderr io.Writer) install.Options {
	docs := map[install.Doc][]byte{install.DocMan: []byte(manPage(readBuildVersion().Version))}
	for _, d := range []install.Doc{install.DocBash, install.DocZsh, install.DocFish} {
		s, _ := completionScript(string(d))
		docs[d] = []byte(s)
	}
	return install.Options{Self: "/proc/self/exe", UID: uid, GID: gid, DocFiles: docs,
		VerifyCommand: []byte(verifyCommandFile), Stdout: stdout, Stderr: stderr}
}

// printDryRun lists a dry run's changes, by step.
func printDryRun(verb string, l install.Layout, j *install.Journal, stdout io.Writer) {
	if len(j.Changes) == 0 {
		fmt.Fprintf(stdout, "%s --dry-run: nothing to change under %s\n", verb, l.Root)
		return
	}
	fmt.Fprintf(stdout, "%s --dry-run: would make these changes under %s (nothing was changed):\n", verb, l.Root)
	for _, c := range j.Changes {
		fmt.Fprintf(stdout, "  %-12s %s\n", c.Step, c)
	}
}

// newUninstallFlags is uninstall's flag set (see newInstallFlags).
func newUninstallFlags() (*flag.FlagSet, *string, *bool) {
	flags := newFlags("uninstall")
	return flags, flags.String("prefix", "/", "uninstall from under the root `DIR` instead of /"),
		flags.Bool("dry-run", false, "print the changes uninstall would make, and change nothing")
}

func uninstallMain(args []string, stdout, stderr io.Writer) int {
	flags, prefix, dryRun := newUninstallFlags()
	if code, done := parseFlags(flags, args, installHelp, stdout, stderr); done {
		return code
	}
	if flags.NArg() > 0 {
		return usageLine(stderr, "uninstall", fmt.Sprintf("unexpected argument %q", flags.Arg(0)))
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "claude-sandbox uninstall: needs root (sudo claude-sandbox uninstall)")
		return 1
	}
	root, err := filepath.Abs(*prefix)
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox uninstall: --prefix:", err)
		return 2
	}
	o := installOptions(-1, -1, stdout, stderr)
	o.DryRun = *dryRun
	l := install.Layout{Root: root}
	j, err := install.Uninstall(l, o)
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox uninstall:", err)
		return 1
	}
	if o.DryRun {
		printDryRun("uninstall", l, j, stdout)
	}
	return 0
}

// invokingUser is the user who ran sudo (or root): home, uid, gid.
func invokingUser() (home string, uid, gid int) {
	home, uid, gid = os.Getenv("HOME"), os.Getuid(), os.Getgid()
	if u := os.Getenv("SUDO_USER"); u != "" {
		if out, err := exec.Command("getent", "passwd", u).Output(); err == nil {
			if f := strings.Split(strings.TrimSpace(string(out)), ":"); len(f) >= 6 {
				uid, _ = strconv.Atoi(f[2])
				gid, _ = strconv.Atoi(f[3])
				home = f[5]
			}
		}
	}
	return home, uid, gid
}

// checkPrerequisites refuses an install that could not work (I2): user
// namespaces for an unprivileged user, and, with the jail on, a usable
// /dev/net/tun.
func checkPrerequisites(config string) error {
	// The real thing, as an unprivileged user: this binary builds a
	// sandbox (no network) around /bin/true.
	cmd := exec.Command("/proc/self/exe", "run", "--net=none", "--bare", "--", "/bin/true")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			// Could not even start it (typically this copy of the binary
			// is not executable by other users): nothing was proved, so
			// the check fails rather than pass unseen.
			return fmt.Errorf("cannot run the check, a sandbox around /bin/true as uid 65534: %v; run install from a copy of claude-sandbox that other users can execute (mode 0755, in a directory they can enter), or pass --skip-checks", err)
		}
		return fmt.Errorf("a sandbox does not start for an unprivileged user: %s", strings.TrimSpace(string(out)))
	}
	jail := true
	if config != "" {
		if f, err := os.Open(config); err == nil {
			c, perr := shadow.ParseConfig(config, f)
			f.Close()
			if perr == nil {
				jail = c.EgressJail
			}
		}
	}
	if jail {
		if p := tunProblem("/dev/net/tun"); p != "" {
			return fmt.Errorf("%s; or set egress-jail = 0 in the configuration", p)
		}
	}
	return nil
}
