// Package plan holds the one value handed from whoever describes a sandbox
// (the command line, the Claude shadow, an embedding Go program) to the
// engine that builds it.
//
// A [Plan] is plain data: the command, its environment, the caller's ids, the
// namespaces and the filesystem operations in order. [Build] makes one from
// [Options] with pure code (the only outside inputs are an injectable stat
// function, the look at a --dev-bind directory's path, Options.DevDir, and
// the host facts behind the socket masks, [Host]), validating everything
// that can be checked before a process is started, so bad input fails fast
// with a one-line error. The engine
// (package nsexec) applies a Plan and adds nothing to it: what
// `claude-sandbox plan --json` prints is what runs.
//
// What it does not do: no syscalls beyond the injected stat, DevDir and
// Host, no policy about which host paths matter (that is the product
// layer's job).
package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/internal/exact"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Net selects the sandbox's network namespace.
type Net string

const (
	// NetHost shares the host's network namespace.
	NetHost Net = "host"
	// NetNone gives the sandbox an empty network namespace with only lo.
	NetNone Net = "none"
	// NetJail gives the sandbox a private network namespace whose only
	// way out is the egress jail's userspace stack.
	NetJail Net = "jail"
)

// DefaultPath is the search path used to find the command when the plan's
// environment has no PATH (run gives it this one unless --clearenv).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Plan is everything the engine needs to start one sandboxed command.
type Plan struct {
	// Argv is the command and its arguments; Argv[0] is looked up in the
	// PATH of Env (or DefaultPath) when it has no slash.
	Argv []string `json:"argv"`
	// Env is the complete environment of the command, NAME=VALUE.
	Env []string `json:"env"`
	// Dir is the working directory inside. When DirStrict is false and Dir
	// cannot be entered, the command starts in "/" instead.
	Dir       string `json:"dir"`
	DirStrict bool   `json:"dirStrict,omitempty"`
	// UID and GID are the caller's ids; inside the sandbox they stay the
	// same numbers (root stays 0, a user stays that user).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Hostname, when set, is given to the sandbox's own UTS namespace.
	Hostname string `json:"hostname,omitempty"`
	// Net is the network mode.
	Net Net `json:"net"`
	// Egress is the egress jail's configuration (Net == NetJail only).
	Egress *Egress `json:"egress,omitempty"`
	// Mounts is the filesystem view, applied in order.
	Mounts []mounts.Op `json:"mounts"`
	// HostRoot marks a plan for a caller that is root on the host (uid 0
	// mapped to the host's uid 0): Mounts then hides the host's private
	// files (mounts.HidePrivate) and ends with mounts.KernelCovers, and the engine refuses new cgroup namespaces
	// inside. The engine refuses to run a plan without it for such a
	// caller.
	HostRoot bool `json:"hostRoot,omitempty"`
	// PidsLimit bounds the number of tasks alive at once in the sandbox
	// and every namespace nested in it; 0 means no bound.
	PidsLimit int `json:"pidsLimit"`
	// TmpfsSize is the size limit, in bytes, of each writable tmpfs the
	// sandbox gets (the Size of every Tmpfs, Dev and Overlay op).
	TmpfsSize int64 `json:"tmpfsSize,omitempty"`
}

// planJSON puts the command, environment and working directory first, as
// exact.String: Linux hands a command any bytes but NUL there, and
// encoding/json would turn bytes that are not UTF-8 into U+FFFD on the way
// to the engine's stages (the mount operations do the same for their
// paths). Valid UTF-8 reads as usual; anything else is {"base64": ...}.
type planJSON struct {
	Argv []exact.String `json:"argv"`
	Env  []exact.String `json:"env"`
	Dir  exact.String   `json:"dir"`
	planFields
}

// planJSONIn is what UnmarshalJSON decodes: planJSON with the mount
// operations as mounts.OpJSON, so this one decoder decodes them too, its
// refusal of unknown fields included, where each Op's UnmarshalJSON would
// need a decoder of its own (fresh memory, in a stage where each page is a
// page fault: issue 33). Only for decoding: encoding keeps planJSON's
// field order.
type planJSONIn struct {
	Argv   []exact.String  `json:"argv"`
	Env    []exact.String  `json:"env"`
	Dir    exact.String    `json:"dir"`
	Mounts []mounts.OpJSON `json:"mounts"`
	planFields
}

// planFields is Plan without its methods, so the rest of its fields
// encode as they are (planJSON's own three win over these).
type planFields Plan

// MarshalJSON writes the plan with its strings byte for byte.
func (p Plan) MarshalJSON() ([]byte, error) {
	return json.Marshal(planJSON{Argv: exact.Strings(p.Argv), Env: exact.Strings(p.Env), Dir: exact.String(p.Dir), planFields: planFields(p)})
}

// UnmarshalJSON reads what MarshalJSON writes, and refuses a field it
// does not know: a plan reaches the sandbox's init this way, and a stage
// binary of another version must not drop a wall it has no field for.
func (p *Plan) UnmarshalJSON(b []byte) error {
	var j planJSONIn
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil {
		return err
	}
	*p = Plan(j.planFields)
	p.Argv, p.Env, p.Dir = exact.Plain(j.Argv), exact.Plain(j.Env), string(j.Dir)
	if j.Mounts != nil {
		p.Mounts = make([]mounts.Op, len(j.Mounts))
		for i, o := range j.Mounts {
			p.Mounts[i] = o.Op()
		}
	}
	return nil
}

// DefaultPidsLimit is the process limit a plan gets when its Options name
// none.
const DefaultPidsLimit = 4096

// The range of a process limit. It is made a PID namespace's pid_max
// (limit+1), which the kernel keeps between 301 (it reserves the pids
// below 300 for wrap-around) and 4194304.
const (
	MinPidsLimit = 300
	MaxPidsLimit = 4194304 - 1
)

// Egress describes the egress jail. The host's facts (connected subnets,
// resolvers) are read at launch; Routes shows the kernel route plan they
// gave when the plan was built, for `plan --json` and tests.
type Egress struct {
	// Allow are the --allow-ip (single address) and --allow-cidr entries.
	Allow []netip.Prefix `json:"allow,omitempty"`
	// Internet are the --internet-cidr ranges: host routes within them
	// are not internal.
	Internet []netip.Prefix `json:"internet,omitempty"`
	// AllowDomains and DenyDomains are the --allow-domain and
	// --deny-domain entries, as given (presets unexpanded).
	AllowDomains []string `json:"allow-domains,omitempty"`
	DenyDomains  []string `json:"deny-domains,omitempty"`
	// Routes is the route plan, one operation a line.
	Routes []string `json:"routes,omitempty"`
	// HostPorts are the host loopback ports the sandbox reaches
	// (--allow-host-port), through HostAddress (the jail's gateway,
	// named host.internal in the sandbox's /etc/hosts).
	HostPorts   []netpolicy.HostPort `json:"hostPorts,omitempty"`
	HostAddress *netip.Addr          `json:"hostAddress,omitempty"`
	// Publish are the published ports (--publish): the launcher listens
	// on the host and relays into the sandbox's port.
	Publish []netpolicy.Publish `json:"publish,omitempty"`
	// Approved are the entries of the allowlist that came from the
	// workspace's approvals store ("domain pypi.org"; claude-sandbox
	// approvals), also listed above where they apply.
	Approved []string `json:"approved,omitempty"`
}

// Options is what a caller asks for; Build turns it into a Plan.
type Options struct {
	Command []string
	Net     Net
	// Allow punches through the egress jail (Net == NetJail only).
	Allow []netip.Prefix
	// Internet are ranges the user says are internet (--internet-cidr):
	// a host route within one is not internal (Net == NetJail only).
	Internet []netip.Prefix
	// AllowDomains and DenyDomains are the jail's domain allowlist
	// (Net == NetJail only; the jail parses and enforces them).
	AllowDomains, DenyDomains []string
	// HostPorts are host loopback ports reached through the jail's
	// gateway (Net == NetJail only).
	HostPorts []netpolicy.HostPort
	// Publish are ports of the sandbox published on the host (Net ==
	// NetJail only).
	Publish []netpolicy.Publish
	// Late are operations applied after the caller's own (the jail's
	// resolv.conf), so no user operation can cover them.
	Late []mounts.Op
	// Ops are the caller's filesystem operations, in order; Build puts
	// them after the base view (read-only root, /dev, /proc and, unless
	// Bare, tmpfs on /tmp and the home directory).
	Ops []mounts.Op
	// Served are binds of sockets the launcher itself serves to this
	// sandbox (the --ssh-agent socket, in a private directory of the
	// host), applied after the host sockets' masks, which would hide
	// them otherwise. Only binds of sockets are taken.
	Served []mounts.Op
	// Bare drops the default tmpfs over /tmp and Home.
	Bare bool
	// SetEnv entries are set inside, in order (a later one wins).
	SetEnv [][2]string
	// KeepEnv names variables copied from Environ when they are set there.
	KeepEnv []string
	// Environ is the caller's environment (for KeepEnv).
	Environ []string
	// Chdir is the working directory asked for (strict); empty means Cwd,
	// falling back to "/" inside if it cannot be entered.
	Chdir    string
	Cwd      string
	Home     string
	Hostname string
	UID, GID int
	// HostRoot says the caller is root on the host (nsexec.CallerIsHostRoot
	// tells): the view gets mounts.KernelCovers.
	HostRoot bool
	// RootCaller says the caller's uid is 0 in its own user namespace,
	// host root or not (root in a rootless Podman container): the view
	// hides the files of that world only root may read, as for HostRoot.
	RootCaller bool
	// PidsLimit bounds the tasks in the sandbox: 0 means DefaultPidsLimit,
	// a negative value no bound.
	PidsLimit int
	// TmpfsSize is the size limit in bytes of each writable tmpfs (/tmp,
	// the home, /dev/shm, /run, the caller's --tmpfs, each overlay's
	// layer): 0 means DefaultTmpfsSize for the plan.
	TmpfsSize int64
	// Stat looks at host paths; nil means os.Stat.
	Stat func(string) (fs.FileInfo, error)
	// DevDir checks that a directory --dev-bind source (one below /dev,
	// by Stat) is reached by its real path, without a symlink on the way;
	// nil means mounts.CheckDevDir, the check the mount makes again.
	DevDir func(string) error
	// AllowSockets are host Unix sockets bound back into the view
	// (--allow-socket); every other host socket is hidden (see Host).
	AllowSockets []string
	// Host is read to keep the host's sockets out of the view; nil means
	// the real host (OSHost).
	Host Host
	// Warn receives conditions that are reported but not refused (an
	// --allow-socket path that does not exist); nil drops them.
	Warn func(string)
}

// Error is a validation failure: what the user asked for cannot be built.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errf(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// Build validates opts and returns the plan the engine would apply.
func Build(opts Options) (*Plan, error) {
	stat := opts.Stat
	if stat == nil {
		stat = os.Stat
	}
	devDir := opts.DevDir
	if devDir == nil {
		devDir = mounts.CheckDevDir
	}
	if len(opts.Command) == 0 || opts.Command[0] == "" {
		return nil, errf("no command given: put it after --, e.g. claude-sandbox run -- /bin/sh")
	}
	p := &Plan{
		Argv:     append([]string(nil), opts.Command...),
		UID:      opts.UID,
		GID:      opts.GID,
		Hostname: opts.Hostname,
		Net:      opts.Net,
		Env:      []string{},
	}
	switch p.Net {
	case "":
		p.Net = NetJail
	case NetHost, NetNone, NetJail:
	default:
		return nil, errf("unknown network mode %q: use --net=jail, --net=host or --net=none", string(opts.Net))
	}
	if p.Net == NetJail {
		p.Egress = &Egress{Allow: opts.Allow, Internet: opts.Internet, AllowDomains: opts.AllowDomains, DenyDomains: opts.DenyDomains}
	} else if len(opts.Internet) > 0 {
		return nil, errf("--internet-cidr applies to the egress jail (--net=jail), not --net=%s", p.Net)
	} else if len(opts.Allow) > 0 {
		return nil, errf("--allow-ip and --allow-cidr apply to the egress jail (--net=jail), not --net=%s", p.Net)
	} else if len(opts.AllowDomains)+len(opts.DenyDomains) > 0 {
		return nil, errf("--allow-domain and --deny-domain apply to the egress jail (--net=jail), not --net=%s", p.Net)
	}
	if err := hostPorts(p, opts.HostPorts); err != nil {
		return nil, err
	}
	if err := publish(p, opts.Publish); err != nil {
		return nil, err
	}
	if opts.Hostname != "" && !validHostname(opts.Hostname) {
		return nil, errf("invalid hostname %q: use letters, digits, '-' and '.', at most 64 characters", opts.Hostname)
	}

	env, err := buildEnv(opts)
	if err != nil {
		return nil, err
	}
	p.Env = env

	switch {
	case opts.Chdir != "":
		d, err := mounts.CleanAbs(opts.Chdir)
		if err != nil {
			return nil, errf("--chdir: %v", err)
		}
		p.Dir, p.DirStrict = d, true
	case opts.Cwd != "" && path.IsAbs(opts.Cwd):
		p.Dir = path.Clean(opts.Cwd)
	default:
		p.Dir = "/"
	}

	p.Mounts = []mounts.Op{{Kind: mounts.RootRO, Dst: "/"}, {Kind: mounts.Dev, Dst: "/dev"}, {Kind: mounts.Proc, Dst: "/proc"},
		{Kind: mounts.Cgroup, Dst: "/sys/fs/cgroup"}}
	if !opts.Bare {
		p.Mounts = append(p.Mounts, mounts.Op{Kind: mounts.Tmpfs, Dst: "/tmp", Mode: 0o1777})
		if h, err := mounts.CleanAbs(opts.Home); err == nil && h != "/" && !mounts.Within(h, "/tmp") {
			if fi, err := stat(h); err == nil && fi.IsDir() {
				p.Mounts = append(p.Mounts, mounts.Op{Kind: mounts.Tmpfs, Dst: h, Mode: 0o700})
			}
		}
	}
	h := opts.Host
	if h == nil {
		h = OSHost{}
	}
	p.Mounts = append(p.Mounts, runCover(h)...)
	if opts.HostRoot || opts.RootCaller {
		// A rule, not a list: root inside reads every root-owned file as
		// its owner, so what the host's other users cannot read is hidden
		// (mounts.HidePrivate), before the caller's own operations so
		// that what is bound on purpose is seen. A uid 0 that is not the
		// host's (a rootless container's root) gets it too: its world's
		// /etc/shadow and keys are as private there.
		for _, t := range mounts.PrivateTrees {
			p.Mounts = append(p.Mounts, mounts.Op{Kind: mounts.HidePrivate, Dst: t})
		}
		// Then the rest of the root's top (mounts.SkipAtRoot).
		p.Mounts = append(p.Mounts, mounts.Op{Kind: mounts.HidePrivate, Dst: "/"})
	}
	user, err := checkOps(opts.Ops, stat, devDir)
	if err != nil {
		return nil, err
	}
	p.Mounts = append(p.Mounts, user...)
	late, err := checkOps(opts.Late, stat, devDir)
	if err != nil {
		return nil, err
	}
	p.Mounts = append(p.Mounts, late...)
	if opts.HostRoot {
		p.HostRoot = true
		p.Mounts = append(p.Mounts, mounts.KernelCovers()...)
	}
	switch {
	case opts.PidsLimit == 0:
		p.PidsLimit = DefaultPidsLimit
	case opts.PidsLimit > 0:
		if opts.PidsLimit < MinPidsLimit || opts.PidsLimit > MaxPidsLimit {
			return nil, errf("--pids-limit %d: use a number from %d to %d, or 0 for no limit (the kernel keeps pids below 300 for itself)", opts.PidsLimit, MinPidsLimit, MaxPidsLimit)
		}
		p.PidsLimit = opts.PidsLimit
	}
	hide, sockDirs, warnings, err := hideSockets(p.Mounts, h, opts.AllowSockets)
	if err != nil {
		return nil, err
	}
	// Right after the read-only root, so that what is placed below such
	// a directory (a walk's masks, a bind) lies on the overlay.
	p.Mounts = slices.Insert(p.Mounts, 1, sockDirs...)
	if err := sizeTmpfs(p, opts.TmpfsSize); err != nil {
		return nil, err
	}
	if w := emptyCwd(p); w != "" {
		warnings = append(warnings, w)
	}
	p.Mounts = append(p.Mounts, hide...)
	for _, op := range opts.Served {
		fi, err := os.Lstat(op.Src)
		if op.Kind != mounts.Bind || err != nil || fi.Mode().Type() != fs.ModeSocket {
			return nil, errf("served socket %s: not a bind of a socket", op.Src)
		}
		dst, err := mounts.CleanAbs(op.Dst)
		if err != nil {
			return nil, errf("served socket %s: %v", op.Dst, err)
		}
		p.Mounts = append(p.Mounts, mounts.Op{Kind: mounts.Bind, Src: op.Src, Dst: dst})
	}
	if opts.Warn != nil {
		for _, w := range warnings {
			opts.Warn(w)
		}
	}
	return p, nil
}

// emptyCwd reports a working directory (not asked for with --chdir) that
// the view replaces with an empty tmpfs ($HOME or /tmp): the command would
// start there, in an empty directory, without a word. A directory below
// one does not exist inside; the engine says so when it starts in /.
func emptyCwd(p *Plan) string {
	if p.DirStrict || p.Dir == "/" {
		return ""
	}
	for i := len(p.Mounts) - 1; i >= 0; i-- {
		op := p.Mounts[i]
		// The private-file walk and socket masks hide entries below
		// their destination; they never replace the tree at it.
		if !mounts.Within(p.Dir, op.Dst) || op.Kind == mounts.HidePrivate || op.Kind == mounts.MaskSocket || op.Kind == mounts.SocketDir {
			continue
		}
		if op.Kind == mounts.Tmpfs && op.Dst == p.Dir {
			return fmt.Sprintf("the current directory %q is an empty tmpfs inside, not the host's directory: bind it to see its files", p.Dir)
		}
		return ""
	}
	return ""
}

// checkOps validates the caller's operations and drops -try binds whose
// source is missing.
func checkOps(ops []mounts.Op, stat func(string) (fs.FileInfo, error), devDir func(string) error) ([]mounts.Op, error) {
	var out []mounts.Op
	var masked []string
	for _, op := range ops {
		flag := "--" + string(op.Kind)
		if op.Optional {
			flag += "-try"
		}
		switch op.Kind {
		case mounts.Tmpfs, mounts.Bind, mounts.ROBind, mounts.Mask, mounts.File, mounts.Overlay, mounts.DevBind:
		default:
			return nil, errf("operation %q cannot be requested directly", op.Kind)
		}
		dst, err := mounts.CleanAbs(op.Dst)
		if err != nil {
			return nil, errf("%s: destination: %v", flag, err)
		}
		if dst == "/" {
			return nil, errf("%s: cannot replace the root directory", flag)
		}
		for _, m := range masked {
			if mounts.Within(dst, m) && dst != m {
				return nil, errf("%s: destination %s is inside the masked path %s, which is an empty read-only directory", flag, dst, m)
			}
		}
		op.Dst = dst
		if op.Kind.HasSource() {
			src, err := mounts.CleanAbs(op.Src)
			if err != nil {
				return nil, errf("%s: source: %v", flag, err)
			}
			op.Src = src
			if _, err := stat(src); err != nil {
				if op.Optional && errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return nil, errf("%s: source %s: %v", flag, src, unwrapPathErr(err))
			}
			if op.Kind == mounts.DevBind {
				if err := checkDevice(flag, src, stat, devDir); err != nil {
					return nil, err
				}
			}
		}
		if op.Kind == mounts.Tmpfs && op.Mode == 0 {
			op.Mode = 0o755
		}
		if op.Kind == mounts.Mask {
			masked = append(masked, dst)
		}
		out = append(out, op)
	}
	return out, nil
}

func buildEnv(opts Options) ([]string, error) {
	var names []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			names = append(names, k)
		}
		vals[k] = v
	}
	for _, k := range opts.KeepEnv {
		if !ValidEnvName(k) {
			return nil, errf("--keep-env: invalid variable name %q: use letters, digits and _, not starting with a digit", k)
		}
		for _, kv := range opts.Environ {
			if n, v, ok := strings.Cut(kv, "="); ok && n == k {
				set(k, v)
			}
		}
	}
	for _, kv := range opts.SetEnv {
		if !ValidEnvName(kv[0]) {
			return nil, errf("--setenv: invalid variable name %q: use letters, digits and _, not starting with a digit", kv[0])
		}
		if strings.ContainsRune(kv[1], 0) {
			return nil, errf("--setenv %s: value contains a NUL byte", kv[0])
		}
		set(kv[0], kv[1])
	}
	env := make([]string, 0, len(names))
	for _, k := range names {
		env = append(env, k+"="+vals[k])
	}
	return env, nil
}

// ValidEnvName reports whether s is a portable variable name (POSIX):
// letters, digits and underscores, not starting with a digit. Shells
// cannot set or read any other.
func ValidEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func validHostname(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, fs.ErrNotExist) {
			return errors.New("does not exist (use the -try form to skip a missing source)")
		}
		return pe.Err
	}
	return err
}

// LookPath finds argv0 the way the sandbox will: a name with a slash is
// used as it is, anything else is searched in the PATH of env (DefaultPath
// when env has none). isExec reports whether a candidate is an executable
// file; it is injected so this stays pure.
func LookPath(argv0 string, env []string, isExec func(string) bool) (string, bool) {
	if strings.Contains(argv0, "/") {
		return argv0, true
	}
	search := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			search = v
		}
	}
	for _, dir := range strings.Split(search, ":") {
		if dir == "" {
			dir = "."
		}
		c := path.Join(dir, argv0)
		if isExec(c) {
			return c, true
		}
	}
	return "", false
}
