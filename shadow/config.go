package shadow

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/sshagent"
)

// ConfigPath is the only place the shadow reads its configuration from:
// root-owned, outside any workspace, read-only inside the sandbox, so a
// session can never widen the next session's reach.
const ConfigPath = "/etc/claude-sandbox.conf"

// Config is /etc/claude-sandbox.conf, after the environment overrides.
type Config struct {
	// WorkspaceRoot, when set, is bound read-write instead of the current
	// directory.
	WorkspaceRoot string `json:"workspaceRoot,omitempty"`
	// NoForge turns off the GitHub and GitLab credential binds and helpers.
	NoForge bool `json:"noForge,omitempty"`
	// EgressJail is on unless explicitly turned off.
	EgressJail bool `json:"egressJail"`
	// AllowWrite are extra host paths bound read-write when they exist.
	AllowWrite []string `json:"allowWrite,omitempty"`
	// AllowIP are punches through the egress jail (addresses or CIDRs).
	AllowIP []netip.Prefix `json:"allowIP,omitempty"`
	// InternetCIDR are ranges the user says are internet
	// (--internet-cidr): host routes within them are not internal.
	InternetCIDR []netip.Prefix `json:"internetCIDR,omitempty"`
	// AllowDomain and DenyDomain are the jail's domain allowlist
	// (--allow-domain, --deny-domain entries, presets included).
	AllowDomain []string `json:"allowDomain,omitempty"`
	DenyDomain  []string `json:"denyDomain,omitempty"`
	// AllowHostPort are ports of the host's loopback the sandbox reaches
	// at host.internal (the jail's gateway), as --allow-host-port.
	AllowHostPort []netpolicy.HostPort `json:"allowHostPort,omitempty"`
	// Publish are ports of the session published on the host, as
	// --publish ([HOSTADDR:]HOSTPORT:PORT[/udp]).
	Publish []netpolicy.Publish `json:"publish,omitempty"`
	// AllowDevice are host device nodes bound into the sandbox's /dev
	// (--dev-bind-try), each a path or a glob expanded at launch.
	AllowDevice []string `json:"allowDevice,omitempty"`
	// AllowSocket are host Unix sockets the sandbox may connect to
	// (every other host socket is hidden).
	AllowSocket []string `json:"allowSocket,omitempty"`
	// HomeEntry are entries of ~/.cache, ~/.local/share (and a few
	// package caches) shown inside besides the default list (HomeEntries).
	HomeEntry []HomeEntry `json:"homeEntry,omitempty"`
	// PassEnv are extra variable names allowed into the sandbox.
	PassEnv []string `json:"passEnv,omitempty"`
	// WritableGitHooks leaves the workspace's .git/hooks and .git/config
	// writable, for users who install hooks from inside a session.
	WritableGitHooks bool `json:"writableGitHooks,omitempty"`
	// GitLabHost is the host the glab credential helper and the ssh-to-
	// https rewrite are for.
	GitLabHost string `json:"gitlabHost"`
	// PidsLimit is plan.Options.PidsLimit: 0 the default, negative none.
	PidsLimit int `json:"pidsLimit,omitempty"`
	// TmpfsSize is plan.Options.TmpfsSize: 0 the default share of RAM.
	TmpfsSize int64 `json:"tmpfsSize,omitempty"`
	// Debug is run's --debug: the launcher's and the jail's diagnostics,
	// to stderr or (DebugFile set) appended to DebugFile.
	Debug     bool   `json:"debug,omitempty"`
	DebugFile string `json:"debugFile,omitempty"`
	// AuditLog is run's --audit-log: every flow decision and reach change
	// of the session, one JSON line each, written by the launcher.
	AuditLog string `json:"auditLog,omitempty"`
	// Ask is run's --ask: a flow the jail refuses is held while the user
	// approves or denies it; AskTimeout its --ask-timeout (0: default).
	Ask        bool          `json:"ask,omitempty"`
	AskTimeout time.Duration `json:"askTimeout,omitempty"`
	// SSHConfirm is run's --ssh-confirm: each signature of the ssh-agent
	// is a request of the ask mode first.
	SSHConfirm bool `json:"sshConfirm,omitempty"`
	// OSC52 is run's --osc52 allow: Claude Code may write the host
	// terminal's clipboard when that terminal is its input. Off by
	// default: a clipboard the sandbox filled is pasted into the host's
	// shell by a user who thinks it holds what they copied.
	OSC52 bool `json:"osc52,omitempty"`
	// SSHAgent are the hosts run's --ssh-agent serves an agent for (HOST
	// or HOST:PORT); SSHKey the backing agent's keys it lists
	// (authorized_keys lines or SHA256: fingerprints; none: all);
	// SSHHostKey pinned host keys, "HOST KEYTYPE BASE64"; SSHKeyFile
	// unencrypted private key files the launcher reads and signs with in
	// place of the caller's agent.
	SSHAgent   []string `json:"sshAgent,omitempty"`
	SSHKey     []string `json:"sshKey,omitempty"`
	SSHHostKey []string `json:"sshHostKey,omitempty"`
	SSHKeyFile []string `json:"sshKeyFile,omitempty"`
}

// DefaultConfig is what an absent or empty file means.
func DefaultConfig() Config { return Config{EgressJail: true, GitLabHost: "gitlab.com"} }

// ConfigError names the file, line and key of a line that cannot be used:
// a typo must stop the launch, never silently widen or narrow the sandbox.
type ConfigError struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s: %s", e.File, e.Key, e.Msg)
	}
	if e.Key == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Key, e.Msg)
}

// ParseConfig reads the file format: `key = value` or a bare `key`, one a
// line; `#` starts a comment; blank lines are ignored. Repeatable keys
// (allow-write, allow-ip, allow-domain, deny-domain, allow-host-port,
// publish, allow-device, allow-socket, home-entry, pass-env) add one entry a line.
func ParseConfig(name string, r io.Reader) (Config, error) {
	c := DefaultConfig()
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, value, hasValue := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if key == "" {
			return c, &ConfigError{File: name, Line: n, Msg: "a line must start with a key"}
		}
		if err := c.set(key, value, hasValue); err != nil {
			return c, &ConfigError{File: name, Line: n, Key: key, Msg: err.Error()}
		}
	}
	if err := sc.Err(); err != nil {
		return c, &ConfigError{File: name, Line: n, Msg: err.Error()}
	}
	return c, nil
}

// configValue is what a line gives its key: the value after "=", and
// whether there was a "=" at all (a bare key is a switch turned on).
type configValue struct {
	key, s string
	has    bool
}

// need refuses a bare key or an empty value, for keys that take one.
func (v configValue) need() error {
	if !v.has || v.s == "" {
		return fmt.Errorf("needs a value (%s = ...)", v.key)
	}
	return nil
}

// configKey is one key of the file and what its value does to c.
type configKey struct {
	name string
	set  func(c *Config, v configValue) error
}

// configKeys is every key the file takes, in the order the unknown-key
// message lists them: set dispatches on it and the message is made from
// it, so a key added here is both parsed and listed.
var configKeys = []configKey{
	{"workspace-root", func(c *Config, v configValue) error {
		return setPath(&c.WorkspaceRoot, v)
	}},
	{"no-forge", func(c *Config, v configValue) error { return setBool(&c.NoForge, v) }},
	{"writable-git-hooks", func(c *Config, v configValue) error { return setBool(&c.WritableGitHooks, v) }},
	{"egress-jail", func(c *Config, v configValue) error { return setBool(&c.EgressJail, v) }},
	{"allow-write", func(c *Config, v configValue) error { return addParsed(&c.AllowWrite, v, absPath) }},
	{"allow-ip", func(c *Config, v configValue) error { return addParsed(&c.AllowIP, v, netpolicy.ParseAllow) }},
	{"internet-cidr", func(c *Config, v configValue) error {
		return addParsed(&c.InternetCIDR, v, netpolicy.ParseInternetCIDR)
	}},
	{"allow-domain", func(c *Config, v configValue) error { return addDomain(&c.AllowDomain, v) }},
	{"deny-domain", func(c *Config, v configValue) error { return addDomain(&c.DenyDomain, v) }},
	{"allow-host-port", func(c *Config, v configValue) error {
		return addParsed(&c.AllowHostPort, v, netpolicy.ParseHostPort)
	}},
	{"publish", func(c *Config, v configValue) error { return addParsed(&c.Publish, v, netpolicy.ParsePublish) }},
	{"allow-device", func(c *Config, v configValue) error { return addParsed(&c.AllowDevice, v, devicePattern) }},
	{"allow-socket", func(c *Config, v configValue) error { return addParsed(&c.AllowSocket, v, absPath) }},
	{"home-entry", func(c *Config, v configValue) error { return addParsed(&c.HomeEntry, v, ParseHomeEntry) }},
	{"pass-env", func(c *Config, v configValue) error {
		if err := v.need(); err != nil {
			return err
		}
		if !validEnvName(v.s) {
			return fmt.Errorf("%q is not a variable name", v.s)
		}
		c.PassEnv = append(c.PassEnv, v.s)
		return nil
	}},
	{"gitlab-host", func(c *Config, v configValue) error {
		if err := v.need(); err != nil {
			return err
		}
		if !validHost(v.s) {
			return fmt.Errorf("%q is not a host name (like gitlab.example.com)", v.s)
		}
		c.GitLabHost = v.s
		return nil
	}},
	{"pids-limit", func(c *Config, v configValue) error {
		if err := v.need(); err != nil {
			return err
		}
		n, err := strconv.Atoi(v.s)
		switch {
		case err != nil || n < 0:
			return fmt.Errorf("%q is not a number of processes (0 for no limit)", v.s)
		case n == 0:
			c.PidsLimit = -1
		case n < plan.MinPidsLimit || n > plan.MaxPidsLimit:
			return fmt.Errorf("%d is out of range: use %d to %d, or 0 for no limit", n, plan.MinPidsLimit, plan.MaxPidsLimit)
		default:
			c.PidsLimit = n
		}
		return nil
	}},
	{"osc52", func(c *Config, v configValue) error {
		if err := v.need(); err != nil {
			return err
		}
		switch v.s {
		case "allow", "deny":
			c.OSC52 = v.s == "allow"
			return nil
		}
		return fmt.Errorf("%q: use allow or deny", v.s)
	}},
	{"tmpfs-size", func(c *Config, v configValue) error {
		if err := v.need(); err != nil {
			return err
		}
		n, err := plan.ParseSize(v.s)
		if err != nil {
			return err
		}
		if n < plan.MinTmpfsSize {
			return fmt.Errorf("%q is too small: use at least 1M", v.s)
		}
		c.TmpfsSize = n
		return nil
	}},
	{"ssh-agent", func(c *Config, v configValue) error {
		if err := v.need(); err != nil {
			return err
		}
		for _, h := range strings.Split(v.s, ",") {
			h = strings.TrimSpace(h)
			if _, _, err := sshagent.ParseHost(h); err != nil {
				return err
			}
			c.SSHAgent = append(c.SSHAgent, h)
		}
		return nil
	}},
	{"ssh-key", func(c *Config, v configValue) error { return addParsed(&c.SSHKey, v, sshKey) }},
	{"ssh-confirm", func(c *Config, v configValue) error { return setBool(&c.SSHConfirm, v) }},
	{"ssh-host-key", func(c *Config, v configValue) error { return addParsed(&c.SSHHostKey, v, sshHostKey) }},
	{"ssh-key-file", func(c *Config, v configValue) error { return addParsed(&c.SSHKeyFile, v, absPath) }},
	{"debug", func(c *Config, v configValue) error { return setBool(&c.Debug, v) }},
	{"debug-file", func(c *Config, v configValue) error {
		var p string
		if err := setPath(&p, v); err != nil {
			return err
		}
		c.Debug, c.DebugFile = true, p
		return nil
	}},
	{"audit-log", func(c *Config, v configValue) error { return setPath(&c.AuditLog, v) }},
	{"ask", func(c *Config, v configValue) error { return setBool(&c.Ask, v) }},
	{"ask-timeout", func(c *Config, v configValue) error {
		d, err := ParseAskTimeout(v.s)
		if err != nil {
			return err
		}
		c.AskTimeout = d
		return nil
	}},
}

func (c *Config) set(key, value string, hasValue bool) error {
	for _, k := range configKeys {
		if k.name == key {
			return k.set(c, configValue{key: key, s: value, has: hasValue})
		}
	}
	return unknownKey()
}

// unknownKey is the refusal of a key not in configKeys, naming them all.
func unknownKey() error {
	names := make([]string, len(configKeys))
	for i, k := range configKeys {
		names[i] = k.name
	}
	return fmt.Errorf("unknown key (known: %s)", strings.Join(names, ", "))
}

// setBool sets *dst from a switch.
func setBool(dst *bool, v configValue) error {
	b, err := parseBool(v.s, v.has)
	if err != nil {
		return err
	}
	*dst = b
	return nil
}

// setPath sets *dst from a value that must be an absolute path.
func setPath(dst *string, v configValue) error {
	if err := v.need(); err != nil {
		return err
	}
	p, err := absPath(v.s)
	if err != nil {
		return err
	}
	*dst = p
	return nil
}

// addParsed appends to *dst the entry parse makes of a value that must
// be given.
func addParsed[T any](dst *[]T, v configValue, parse func(string) (T, error)) error {
	if err := v.need(); err != nil {
		return err
	}
	e, err := parse(v.s)
	if err != nil {
		return err
	}
	*dst = append(*dst, e)
	return nil
}

// sshKey checks an ssh-key value (kept as written; sshagent.NewPolicy
// reads it).
func sshKey(s string) (string, error) {
	_, err := sshagent.KeyFingerprint(s)
	return s, err
}

// sshHostKey checks an ssh-host-key value (kept as written;
// sshagent.NewPolicy reads it).
func sshHostKey(s string) (string, error) {
	_, _, _, err := sshagent.ParseHostKey(s)
	return s, err
}

// addDomain appends a jail domain entry (a name or a preset) to *dst.
func addDomain(dst *[]string, v configValue) error {
	if err := v.need(); err != nil {
		return err
	}
	if _, err := netpolicy.ExpandDomains([]string{v.s}); err != nil {
		return err
	}
	*dst = append(*dst, v.s)
	return nil
}

// parseBool reads a switch: a bare key means on.
func parseBool(v string, hasValue bool) (bool, error) {
	if !hasValue {
		return true, nil
	}
	switch strings.ToLower(v) {
	case "1", "on", "yes", "true":
		return true, nil
	case "0", "off", "no", "false":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a switch value (use 1 or 0, on or off)", v)
}

func absPath(v string) (string, error) {
	if !path.IsAbs(v) {
		return "", fmt.Errorf("%q is not an absolute path", v)
	}
	return path.Clean(v), nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func validHost(s string) bool {
	if s == "" || len(s) > 253 || strings.HasPrefix(s, "-") || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// Environment overrides: a variable that is set wins over the file.
const (
	EnvWorkspaceRoot = "CLAUDE_SANDBOX_WORKSPACE_ROOT"
	EnvNoForge       = "CLAUDE_SANDBOX_NO_FORGE"
	EnvEgressJail    = "CLAUDE_SANDBOX_EGRESS_JAIL"
	EnvAllowWrite    = "CLAUDE_SANDBOX_ALLOW_WRITE"
	EnvAllowIP       = "CLAUDE_SANDBOX_ALLOW_IP"
	EnvAllowDomain   = "CLAUDE_SANDBOX_ALLOW_DOMAIN"
	// EnvDebug is the debug key: 1 (or on) logs to stderr, 0 (or off)
	// turns it off, an absolute path logs to that file.
	EnvDebug = "CLAUDE_SANDBOX_DEBUG"
)

// ApplyEnv applies the environment overrides. Lists (allow-write, allow-ip)
// are separated by commas or whitespace, and replace the file's list.
func (c *Config) ApplyEnv(getenv func(string) (string, bool)) error {
	bad := func(key, msg string) error {
		return &ConfigError{File: "environment", Key: key, Msg: msg}
	}
	if v, ok := getenv(EnvWorkspaceRoot); ok && v != "" {
		p, err := absPath(v)
		if err != nil {
			return bad(EnvWorkspaceRoot, err.Error())
		}
		c.WorkspaceRoot = p
	}
	if v, ok := getenv(EnvNoForge); ok {
		b, err := parseBool(v, v != "")
		if err != nil {
			return bad(EnvNoForge, err.Error())
		}
		c.NoForge = b
	}
	if v, ok := getenv(EnvEgressJail); ok {
		// N1: only an explicit 0 turns the jail off; anything else is on.
		c.EgressJail = strings.TrimSpace(v) != "0"
	}
	if v, ok := getenv(EnvAllowWrite); ok {
		c.AllowWrite = nil
		for _, f := range splitList(v) {
			p, err := absPath(f)
			if err != nil {
				return bad(EnvAllowWrite, err.Error())
			}
			c.AllowWrite = append(c.AllowWrite, p)
		}
	}
	if v, ok := getenv(EnvDebug); ok && v != "" {
		if path.IsAbs(v) {
			c.Debug, c.DebugFile = true, path.Clean(v)
		} else {
			b, err := parseBool(v, true)
			if err != nil {
				return bad(EnvDebug, err.Error()+", or an absolute path to log to")
			}
			c.Debug = b
			if !b {
				c.DebugFile = ""
			}
		}
	}
	if v, ok := getenv(EnvAllowIP); ok {
		c.AllowIP = nil
		for _, f := range splitList(v) {
			pfx, err := netpolicy.ParseAllow(f)
			if err != nil {
				return bad(EnvAllowIP, err.Error())
			}
			c.AllowIP = append(c.AllowIP, pfx)
		}
	}
	if v, ok := getenv(EnvAllowDomain); ok {
		c.AllowDomain = nil
		for _, f := range splitList(v) {
			if _, err := netpolicy.ExpandDomains([]string{f}); err != nil {
				return bad(EnvAllowDomain, err.Error())
			}
			c.AllowDomain = append(c.AllowDomain, f)
		}
	}
	return nil
}

func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}

// ParseAskTimeout reads an ask timeout (--ask-timeout, the ask-timeout
// key): a duration from 1s to 10m.
func ParseAskTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < time.Second || d > 10*time.Minute {
		return 0, fmt.Errorf("%q: want a duration from 1s to 10m, e.g. 30s", s)
	}
	return d, nil
}
