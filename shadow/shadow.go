package shadow

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// RealBinary is where install puts the real Claude Code binary: off PATH,
// so a plain `claude` always finds the shadow first.
const RealBinary = "/usr/libexec/claude-sandbox/claude"

// MarkerEnv marks a process as running inside the sandbox.
const MarkerEnv = "IS_SANDBOX"

// passEnv is the environment allowlist (E1): locale and terminal, Python
// tooling, and the workspace-root override. Anything else stays outside
// unless pass-env names it.
var passEnv = []string{
	"TERM", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_TIME", "LC_COLLATE", "LC_NUMERIC", "LC_MONETARY",
	"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "UV_CACHE_DIR", "UV_PYTHON_CACHE_DIR", "PRE_COMMIT_HOME",
	EnvWorkspaceRoot,
}

// neverPass can never cross, whatever pass-env says: credentials and the
// doors to the host's agents and display.
var neverPass = []string{"GH_TOKEN", "GITHUB_TOKEN", "GITLAB_TOKEN", "ANTHROPIC_API_KEY", "SSH_AUTH_SOCK", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS"}

// systemPath comes first in the sandbox's PATH; ~/.local/bin is appended,
// never prepended (F12), so nothing a session drops there can shadow a
// system tool.
const systemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Inputs are the facts a launch is built from.
type Inputs struct {
	Args     []string // the arguments given to `claude`
	Environ  []string // the caller's environment
	Home     string
	User     string
	UID, GID int
	Cwd      string
	Config   Config
	// Real is the real binary on the host (RealBinary in production).
	Real string
	// GitName and GitEmail are the host's current git identity.
	GitName, GitEmail string
	// Stat looks at host paths (os.Stat in production); Lstat too.
	Stat  func(string) (fs.FileInfo, error)
	Lstat func(string) (fs.FileInfo, error)
	// Readable reports whether the caller can read a host file.
	Readable func(string) bool
	// ReadDir lists the names in a host directory, ReadFile reads a host
	// file (small ones: a git config, a .git file). Nil reads nothing.
	ReadDir  func(string) ([]string, error)
	ReadFile func(string) ([]byte, error)
	// Resolve follows a host path's symlinks (filepath.EvalSymlinks in
	// production; nil leaves paths as they are).
	Resolve func(string) (string, error)
	// Glob expands the allow-device patterns; nil: filepath.Glob.
	Glob func(string) ([]string, error)
	// InContainer says the shadow runs in a container (InContainer tells),
	// where a home directory's files may not outlive it.
	InContainer bool
}

// Launch is what the shadow does.
type Launch struct {
	// Direct is set when the shadow runs inside the sandbox already (the
	// recursion guard): exec Argv directly, no second sandbox.
	Direct bool
	// Argv is the real binary's command line (inside the sandbox for a
	// sandboxed launch, on the host for a direct one).
	Argv []string
	// Options describe the sandbox (unless Direct).
	Options plan.Options
	// GitConfig is the curated gitconfig content.
	GitConfig string
	// CreateFiles and CreateDirs must exist on the host before the launch
	// (bind-back targets: S4).
	CreateFiles, CreateDirs []string
	// State is Claude Code's own state in the home directory (~/.claude
	// and ~/.claude.json): created when missing, before the launch, so
	// what a first session writes there (the login) is kept. Each is
	// created as the user, never through a symlink, and left alone when
	// anything (a symlink too) is there already.
	State []StateEntry
	// Workspace is the host directory bound read-write ("" when none).
	Workspace string
	Warnings  []string
	// Watch are host files whose command-bearing content the shadow
	// compares before and after the session (see Fingerprint).
	Watch []Watched
	// PersistWarning (S5) is set when ~/.claude would not survive a
	// container rebuild: only in a container, and only when ~/.claude is
	// on the container's own root filesystem. The shadow prints it once
	// (PersistNotedFile) and never waits.
	PersistWarning string
}

// StateEntry is one piece of Claude Code's state the shadow creates.
type StateEntry struct {
	// Name is the entry's name in the home directory.
	Name string
	// Dir makes a directory (mode 0700); otherwise a file (mode 0600)
	// holding Data, which is also written into an existing empty file.
	Dir  bool
	Data string
}

// PerSessionDirs (below the home directory) hold what Claude Code's Bash
// tool sources before every command, for one session: its shell
// snapshots and its SessionStart hooks' environment files. Each is a
// tmpfs of the session's own inside.
var PerSessionDirs = []string{".claude/shell-snapshots", ".claude/session-env"}

// ClaudeJSONSeed is what a new ~/.claude.json holds: an empty file is not
// JSON, and Claude Code reports it corrupted and moves it aside.
const ClaudeJSONSeed = "{}\n"

// PersistNotedFile (below the home directory) records that the
// persistence warning was shown, so it is shown once. It is lost with the
// container, as the state it warns about is.
const PersistNotedFile = ".local/state/claude-sandbox/persist-warned"

// InContainer reports whether the process runs in a container, from the
// marks container engines leave: /.dockerenv (Docker), /run/.containerenv
// (Podman), /run/systemd/container (systemd-nspawn and others that follow
// systemd's container interface), and the variables that interface, Kubernetes,
// Codespaces and VS Code's dev containers set. isFile reports whether a
// path is a regular file; env is the process's environment.
func InContainer(env []string, isFile func(string) bool) bool {
	for _, f := range []string{"/.dockerenv", "/run/.containerenv", "/run/systemd/container"} {
		if isFile(f) {
			return true
		}
	}
	for _, k := range []string{"container", "KUBERNETES_SERVICE_HOST", "CODESPACES", "REMOTE_CONTAINERS"} {
		if v, ok := lookup(env, k); ok && v != "" && v != "false" {
			return true
		}
	}
	return false
}

// persistWarning says, in a container, when ~/.claude lives on the
// container's own root filesystem, which a rebuild discards. A symlinked
// ~/.claude (to a volume, presumably), or one on another filesystem than
// "/" (a volume mounted there, or on the home directory or above), is
// kept. A ~/.claude that does not exist yet is judged by the home
// directory it will be made in. Outside a container there is nothing to
// warn about: a plain directory is the normal case on a laptop.
func persistWarning(home string, inContainer bool, lstat, stat func(string) (fs.FileInfo, error)) string {
	if !inContainer {
		return ""
	}
	dir := home + "/.claude"
	fi, err := lstat(dir)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return ""
	}
	if err != nil {
		if fi, err = stat(home); err != nil {
			return ""
		}
	}
	root, err := stat("/")
	if err != nil {
		return ""
	}
	if deviceOf(fi) != deviceOf(root) {
		return ""
	}
	return "this is a container and " + dir + " is on its own filesystem: Claude's state (login, memories, history) is lost when the container is rebuilt; mount a volume on " + dir + " (or on your home directory) to keep it. Shown once"
}

// ClaudeArgs applies S3: --no-chrome first, every --chrome removed. A lone
// --version or --help is left alone: it starts no session (so no browser
// manifest can be written), and the real binary answers it on a fast path
// (14 ms) that any extra argument turns into a full start (over 200 ms).
func ClaudeArgs(args []string) []string {
	if len(args) == 1 {
		switch args[0] {
		case "--version", "-v", "--help", "-h":
			return []string{args[0]}
		}
	}
	out := []string{"--no-chrome"}
	for _, a := range args {
		if a == "--chrome" || a == "--no-chrome" {
			continue
		}
		out = append(out, a)
	}
	return out
}

func lookup(env []string, name string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if k, val, found := strings.Cut(kv, "="); found && k == name {
			v, ok = val, true
		}
	}
	return v, ok
}

// Build decides the launch.
func Build(in Inputs) (*Launch, error) {
	args := ClaudeArgs(in.Args)
	if v, _ := lookup(in.Environ, MarkerEnv); v == "1" {
		return &Launch{Direct: true, Argv: append([]string{in.Real}, args...)}, nil
	}
	if in.Home == "" || !path.IsAbs(in.Home) || in.Home == "/" {
		return nil, fmt.Errorf("HOME is %q: the shadow needs your home directory to mask it", in.Home)
	}
	home := path.Clean(in.Home)
	exists := func(p string) bool { _, err := in.Stat(p); return err == nil }
	isDir := func(p string) bool { fi, err := in.Stat(p); return err == nil && fi.IsDir() }
	if !isDir(home) {
		return nil, fmt.Errorf("your home directory %s does not exist: the shadow masks it with an empty one and binds back a short list", home)
	}
	l := &Launch{}
	l.PersistWarning = persistWarning(home, in.InContainer, in.Lstat, in.Stat)
	cfg := in.Config

	// Workspace (F6): the override, else the current directory; never the
	// home directory itself or anything above it.
	ws := cfg.WorkspaceRoot
	if ws == "" {
		ws = in.Cwd
	}
	if ws != "" {
		ws = path.Clean(ws)
		if mounts.Within(home, ws) {
			return nil, fmt.Errorf("refusing to make %s writable: it holds your home directory; run claude from a project directory, or set workspace-root in %s", ws, ConfigPath)
		}
		if t := sharedTmp(ws); t != "" {
			return nil, fmt.Errorf("refusing to make %s writable: %s is shared with every program on this machine (their sockets and temporary files); run claude from a project directory (a directory of your own below %s is fine), or set workspace-root in %s", ws, t, t, ConfigPath)
		}
		if isDir(ws) {
			l.Workspace = ws
		} else {
			l.Warnings = append(l.Warnings, fmt.Sprintf("workspace %s does not exist: nothing is writable but the bind-backs", ws))
		}
	}

	h := func(rel string) string { return home + "/" + rel }
	var ops []mounts.Op
	// F2: /run/user and /run/secrets become empty, when the host has them.
	for _, d := range []string{"/run/user", "/run/secrets"} {
		if isDir(d) {
			ops = append(ops, mounts.Op{Kind: mounts.Tmpfs, Dst: d, Mode: 0o755})
		}
	}
	// F8: belt and braces. /dev/null over credential files in the (empty)
	// home, and over the host's password and sudo files when readable.
	for _, f := range []string{".netrc", ".Xauthority", ".ICEauthority"} {
		ops = append(ops, mounts.Op{Kind: mounts.ROBind, Src: "/dev/null", Dst: h(f)})
	}
	// Readable only by root: the masks matter for a root caller, whose
	// sandbox reads as host root. The backups shadow(5) tools leave
	// (shadow-, gshadow-) hold the same hashes; the host's SSH keys and
	// TLS private keys would let a session impersonate the machine.
	for _, f := range hostSecrets(in) {
		if in.Readable(f) {
			ops = append(ops, mounts.Op{Kind: mounts.Mask, Dst: f})
		}
	}
	// F3: the bind-back list, each only when present. ~/.claude and
	// ~/.claude.json are read-write (Claude Code's own state; their
	// command-bearing keys are watched, see Watch). ~/.local/share and
	// ~/.cache are split entry by entry: data read-write, what the host
	// executes per-session, Claude Code's own writes masked (F4), and a new
	// top-level entry lasts the session only (issue 14).
	l.State = []StateEntry{{Name: ".claude", Dir: true}, {Name: ".claude.json", Data: ClaudeJSONSeed}}
	for _, b := range []string{".claude", ".claude.json"} {
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Src: h(b), Dst: h(b), Optional: true})
	}
	// ~/.claude/local is Claude Code's old local install, which a shell
	// alias on the host runs: per-session. It is below ~/.claude, which
	// sessions write: confine (below) refuses it when it is a link.
	if _, err := in.Stat(h(".claude/local")); err == nil {
		ops = append(ops, mounts.Op{Kind: mounts.Overlay, Src: h(".claude/local"), Dst: h(".claude/local"), Optional: true})
	}
	// Claude Code sources its session's shell snapshot
	// (~/.claude/shell-snapshots/snapshot-*.sh) and its SessionStart
	// hooks' environment file (~/.claude/session-env/ID/, the file
	// CLAUDE_ENV_FILE names) before every command of its Bash tool: a
	// session that rewrote a concurrent session's would run its code
	// there, with that session's workspace, reach and agent. Each session
	// gets directories of its own. A link left in their place is not
	// mounted on (see PerSessionDirs).
	for _, d := range PerSessionDirs {
		if fi, err := in.Lstat(h(d)); err == nil && !fi.IsDir() {
			l.Warnings = append(l.Warnings, fmt.Sprintf("%s is not a directory (a link a session left?): it is shared with every other session of Claude Code until you remove it", h(d)))
			continue
		}
		ops = append(ops, mounts.Op{Kind: mounts.Tmpfs, Dst: h(d), Mode: 0o700})
	}
	// Issue 27: ~/.cache and ~/.local/share are empty but for the listed
	// entries (homelist.go).
	ops = append(ops, homeEntryOps(in, home, cfg.HomeEntry)...)
	if !cfg.NoForge {
		l.CreateDirs = append(l.CreateDirs, h(".config/gh"), h(".config/glab-cli"))
		fops, create := forgeOps(h)
		ops = append(ops, fops...)
		l.CreateFiles = append(l.CreateFiles, create...)
	}
	// uv and uvx are programs the host runs: read-only (F12 binds only
	// these two names of ~/.local/bin).
	for _, b := range []string{".local/bin/uv", ".local/bin/uvx"} {
		ops = append(ops, mounts.Op{Kind: mounts.ROBind, Src: h(b), Dst: h(b), Optional: true})
	}
	// F5: the real binary, read-only, where Claude Code expects itself.
	if !exists(in.Real) {
		return nil, fmt.Errorf("the real Claude Code binary is missing at %s: re-run the installer (claude-sandbox install)", in.Real)
	}
	ops = append(ops, mounts.Op{Kind: mounts.ROBind, Src: in.Real, Dst: h(".local/bin/claude")})
	// F6, F7: the workspace and allow-write paths, read-write.
	if l.Workspace != "" {
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Src: l.Workspace, Dst: l.Workspace})
	}
	for _, p := range cfg.AllowWrite {
		if mounts.Within(home, p) {
			return nil, fmt.Errorf("%s: allow-write = %s would make your whole home directory writable", ConfigPath, p)
		}
		if t := sharedTmp(p); t != "" {
			return nil, fmt.Errorf("%s: allow-write = %s would make %s writable, which every program on this machine shares; name a directory of your own below it", ConfigPath, p, t)
		}
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Src: p, Dst: p, Optional: true})
	}
	// Issue 27: nothing below a tree sessions write becomes a mount
	// source through a link (the workspace itself is the user's choice).
	var cwarns []string
	ops, cwarns = confine(in, ops, func(op mounts.Op) bool { return op.Src == l.Workspace && op.Dst == l.Workspace })
	l.Warnings = append(l.Warnings, cwarns...)
	devs, err := deviceOps(in, cfg.AllowDevice)
	if err != nil {
		return nil, err
	}
	ops = append(ops, devs...)
	// The workspace's git hooks and config stay read-only (issue 14)
	// unless writable-git-hooks is set.
	if l.Workspace != "" && !cfg.WritableGitHooks {
		writable := append([]string{l.Workspace}, cfg.AllowWrite...)
		gops, dirs, err := gitOps(in, writable)
		if err != nil {
			return nil, err
		}
		ops = append(ops, gops...)
		l.CreateDirs = append(l.CreateDirs, dirs...)
	}
	l.Watch = watchList(in, home, l.Workspace, cfg)

	// Bind sources are resolved on the host: the engine resolves a source
	// after it has left the host's root, where an absolute symlink (a
	// ~/.claude linked to a shared directory, a ~/.cache on a volume)
	// would point at nothing.
	if in.Resolve != nil {
		resolve := resolverByParent(in)
		for i, op := range ops {
			if op.Kind.HasSource() && !op.Exact {
				if r, err := resolve(op.Src); err == nil && path.IsAbs(r) {
					ops[i].Src = path.Clean(r)
				}
			}
		}
	}

	// The marker the integrity guard's gate looks for: a mount point only
	// the sandbox's own mount namespace has (in the /tmp tmpfs).
	ops = append(ops, mounts.Op{Kind: mounts.File, Dst: guard.Marker, Data: "claude-sandbox\n", Mode: 0o444})

	// S6: the curated gitconfig, generated, read-only at the path
	// GIT_CONFIG_GLOBAL names (inside the home tmpfs, so it needs no
	// writable /etc and nothing is written on the host).
	l.GitConfig = GitConfig(in.GitName, in.GitEmail, cfg)
	gitconfig := h(".gitconfig")
	ops = append(ops, mounts.Op{Kind: mounts.File, Dst: gitconfig, Data: l.GitConfig, Mode: 0o444})

	// E1, E2, E3: the environment.
	var setenv [][2]string
	pathVal := systemPath + ":" + h(".local/bin")
	if venv, ok := lookup(in.Environ, "VIRTUAL_ENV"); ok && path.IsAbs(venv) && isDir(venv+"/bin") {
		pathVal += ":" + path.Clean(venv) + "/bin"
	}
	keep := append(slices.Clone(passEnv), cfg.PassEnv...)
	for _, k := range keep {
		if slices.Contains(neverPass, k) {
			return nil, fmt.Errorf("%s: pass-env = %s: that variable never crosses into the sandbox", ConfigPath, k)
		}
	}
	setenv = append(setenv,
		[2]string{"PATH", pathVal},
		[2]string{"HOME", home},
		[2]string{"USER", in.User},
		[2]string{MarkerEnv, "1"},
		[2]string{"GIT_CONFIG_GLOBAL", gitconfig},
		[2]string{"GIT_CONFIG_SYSTEM", "/dev/null"},
	)

	net := plan.NetJail
	if !cfg.EgressJail {
		net = plan.NetHost
	}
	l.Argv = append([]string{h(".local/bin/claude")}, args...)
	l.Options = plan.Options{
		Command:   l.Argv,
		Net:       net,
		Allow:     cfg.AllowIP,
		Internet:  cfg.InternetCIDR,
		HostPorts: cfg.AllowHostPort,
		Publish:   cfg.Publish,
		// The domain allowlist, when configured (the jail enforces it).
		AllowDomains: cfg.AllowDomain,
		DenyDomains:  cfg.DenyDomain,
		// Every host socket but these is hidden by plan.Build.
		AllowSockets: cfg.AllowSocket,
		Ops:          ops,
		SetEnv:       setenv,
		KeepEnv:      keep,
		Environ:      in.Environ,
		Cwd:          in.Cwd,
		Home:         home,
		UID:          in.UID,
		GID:          in.GID,
		Stat:         in.Stat,
		// The process limit: the configured one, else plan's default.
		PidsLimit: cfg.PidsLimit,
		TmpfsSize: cfg.TmpfsSize,
	}
	if !cfg.EgressJail {
		l.Options.Allow, l.Options.HostPorts, l.Options.Publish = nil, nil, nil
		l.Options.Internet = nil
		l.Options.AllowDomains, l.Options.DenyDomains = nil, nil
	}
	return l, nil
}

// deviceOf returns the device a file is on (0 when unknown, as for fakes).
func deviceOf(fi fs.FileInfo) uint64 {
	if d, ok := fi.Sys().(interface{ Device() uint64 }); ok {
		return d.Device()
	}
	if st, ok := fi.Sys().(*syscallStat); ok {
		return uint64(st.Dev)
	}
	return 0
}

// resolverByParent is in.Resolve for many paths that share parents (the
// bind-backs of ~/.local/share and ~/.cache): each parent directory is
// resolved once, then only the last component is looked at, and followed
// with in.Resolve where it is a symlink. The result is what in.Resolve
// gives; the launch makes one lstat a bind-back instead of one a
// component.
func resolverByParent(in Inputs) func(string) (string, error) {
	if in.Lstat == nil {
		return in.Resolve
	}
	parents := map[string]string{}
	return func(p string) (string, error) {
		p = path.Clean(p)
		dir, base := path.Split(p)
		if base == "" || base == "." || base == ".." || !path.IsAbs(p) {
			return in.Resolve(p)
		}
		rd, ok := parents[dir]
		if !ok {
			r, err := in.Resolve(path.Clean(dir))
			if err != nil {
				return "", err
			}
			rd, parents[dir] = r, r
		}
		q := path.Join(rd, base)
		fi, err := in.Lstat(q)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return in.Resolve(q)
		}
		return q, nil
	}
}

// hostSecrets are the host files and directories masked when the caller
// can read them: password hashes (and their backups), sudo rules, the SSH
// host keys found in /etc/ssh, TLS private keys, VPN and Wi-Fi keys, the
// host's Kerberos keytab. For a root caller these are belt and braces:
// the plan's private-file walk (mounts.HidePrivate) hides every host file
// the host's other users cannot read, named here or not.
func hostSecrets(in Inputs) []string {
	out := []string{"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers",
		"/etc/security/opasswd", "/etc/ssl/private", "/etc/pki/tls/private",
		"/etc/wireguard", "/etc/krb5.keytab", "/etc/NetworkManager/system-connections"}
	if in.ReadDir != nil {
		names, _ := in.ReadDir("/etc/ssh")
		for _, n := range names {
			if strings.HasPrefix(n, "ssh_host_") && !strings.HasSuffix(n, ".pub") {
				out = append(out, "/etc/ssh/"+n)
			}
		}
	}
	return out
}
