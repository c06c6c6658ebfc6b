package shadow

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

func TestParseConfig(t *testing.T) {
	def := DefaultConfig()
	with := func(f func(c *Config)) Config { c := DefaultConfig(); f(&c); return c }
	cases := []struct {
		name    string
		in      string
		want    Config
		wantErr string
	}{
		{"empty", "", def, ""},
		{"comments and blanks", "# a comment\n\n   # indented\n", def, ""},
		{"workspace-root", "workspace-root = /workspaces/x/\n", with(func(c *Config) { c.WorkspaceRoot = "/workspaces/x" }), ""},
		{"bare no-forge", "no-forge\n", with(func(c *Config) { c.NoForge = true }), ""},
		{"no-forge = 0", "no-forge = 0\n", def, ""},
		{"egress-jail = 0", "egress-jail = 0 # off\n", with(func(c *Config) { c.EgressJail = false }), ""},
		{"bare egress-jail", "egress-jail\n", def, ""},
		{"repeatable allow-write", "allow-write = /a\nallow-write=/b\n", with(func(c *Config) { c.AllowWrite = []string{"/a", "/b"} }), ""},
		{"allow-ip address and cidr", "allow-ip = 10.1.2.3\nallow-ip = 10.20.0.0/16\nallow-ip = fd00::5\n", with(func(c *Config) {
			c.AllowIP = []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00::5/128")}
		}), ""},
		{"allow-socket", "allow-socket = /run/docker.sock\nallow-socket = /srv/x/\n", with(func(c *Config) { c.AllowSocket = []string{"/run/docker.sock", "/srv/x"} }), ""},
		{"relative allow-socket", "allow-socket = run/x.sock\n", Config{}, "f:1: allow-socket:"},
		{"pass-env", "pass-env = EPICS_CA_ADDR_LIST\n", with(func(c *Config) { c.PassEnv = []string{"EPICS_CA_ADDR_LIST"} }), ""},
		{"gitlab-host", "gitlab-host = gitlab.example.org\n", with(func(c *Config) { c.GitLabHost = "gitlab.example.org" }), ""},
		{"pids-limit", "pids-limit = 1000\n", with(func(c *Config) { c.PidsLimit = 1000 }), ""},
		{"pids-limit 0 is none", "pids-limit = 0\n", with(func(c *Config) { c.PidsLimit = -1 }), ""},
		{"tmpfs-size", "tmpfs-size = 256M\n", with(func(c *Config) { c.TmpfsSize = 256 << 20 }), ""},
		{"pids-limit too low", "pids-limit = 10\n", Config{}, "f:1: pids-limit: 10 is out of range"},
		{"osc52 allow", "osc52 = allow\n", with(func(c *Config) { c.OSC52 = true }), ""},
		{"osc52 deny", "osc52 = deny\n", def, ""},
		{"osc52 other", "osc52 = yes\n", Config{}, "f:1: osc52: \"yes\": use allow or deny"},
		{"unknown key", "alow-ip = 10.1.2.3\n", Config{}, "f:1: alow-ip: unknown key"},
		{"bad switch", "\negress-jail = maybe\n", Config{}, `f:2: egress-jail: "maybe" is not a switch value`},
		{"relative allow-write", "allow-write = tmp\n", Config{}, `f:1: allow-write: "tmp" is not an absolute path`},
		{"bad allow-ip", "allow-ip = 10.1.2\n", Config{}, "f:1: allow-ip:"},
		{"allow-domain and deny-domain", "allow-domain = @claude-code\nallow-domain = *.githubusercontent.com:443\ndeny-domain = gist.github.com\n", with(func(c *Config) {
			c.AllowDomain = []string{"@claude-code", "*.githubusercontent.com:443"}
			c.DenyDomain = []string{"gist.github.com"}
		}), ""},
		{"allow-domain given an address", "allow-domain = 10.1.2.3\n", Config{}, "f:1: allow-domain: domain \"10.1.2.3\" is an IP address: use --allow-ip"},
		{"unknown preset", "allow-domain = @nope\n", Config{}, "f:1: allow-domain:"},
		{"allow-ip with host bits", "allow-ip = 10.1.2.3/8\n", Config{}, "f:1: allow-ip:"},
		{"allow-ip loopback", "allow-ip = 127.0.0.1\n", Config{}, "f:1: allow-ip: 127.0.0.1 is loopback"},
		{"allow-ip unspecified", "allow-ip = ::\n", Config{}, "f:1: allow-ip: :: is the unspecified address"},
		{"allow-ip range holding 0.0.0.0", "allow-ip = 0.0.0.0/8\n", Config{}, "f:1: allow-ip: 0.0.0.0/8 holds the unspecified address 0.0.0.0"},
		{"allow-ip nat64 loopback", "allow-ip = 64:ff9b::7f00:1\n", Config{}, "f:1: allow-ip: 64:ff9b::7f00:1 is 127.0.0.1 in its NAT64 form"},
		{"allow-ip nat64 unspecified", "allow-ip = 64:ff9b::\n", Config{}, "f:1: allow-ip: 64:ff9b:: is 0.0.0.0 in its NAT64 form"},
		{"allow-host-port", "allow-host-port = 11434\nallow-host-port = 5353/udp\n", with(func(c *Config) {
			c.AllowHostPort = []netpolicy.HostPort{{Proto: netpolicy.ProtoTCP, Port: 11434}, {Proto: netpolicy.ProtoUDP, Port: 5353}}
		}), ""},
		{"bad allow-host-port", "allow-host-port = 0\n", Config{}, "f:1: allow-host-port:"},
		{"publish", "publish = 3000:3000\n", with(func(c *Config) {
			c.Publish = []netpolicy.Publish{{HostAddr: netip.MustParseAddr("127.0.0.1"), HostPort: 3000, Port: 3000, Proto: netpolicy.ProtoTCP}}
		}), ""},
		{"bad publish", "publish = 3000\n", Config{}, "f:1: publish:"},
		{"allow-device", "allow-device = /dev/dri/*\n", with(func(c *Config) { c.AllowDevice = []string{"/dev/dri/*"} }), ""},
		{"relative allow-device", "allow-device = dri\n", Config{}, "f:1: allow-device:"},
		{"missing value", "allow-write =\n", Config{}, "f:1: allow-write: needs a value"},
		{"bare valued key", "workspace-root\n", Config{}, "f:1: workspace-root: needs a value"},
		{"bad env name", "pass-env = A-B\n", Config{}, `f:1: pass-env: "A-B" is not a variable name`},
		{"bad gitlab host", "gitlab-host = https://x\n", Config{}, "f:1: gitlab-host:"},
		{"no key", "= 1\n", Config{}, "f:1: a line must start with a key"},
		{"bare debug", "debug\n", with(func(c *Config) { c.Debug = true }), ""},
		{"debug-file", "debug-file = /var/log/cs.log\n", with(func(c *Config) { c.Debug, c.DebugFile = true, "/var/log/cs.log" }), ""},
		{"relative debug-file", "debug-file = cs.log\n", Config{}, "f:1: debug-file:"},
		{"audit-log", "audit-log = /var/log/cs-audit.jsonl\n", with(func(c *Config) { c.AuditLog = "/var/log/cs-audit.jsonl" }), ""},
		{"relative audit-log", "audit-log = a.jsonl\n", Config{}, "f:1: audit-log:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig("f", strings.NewReader(c.in))
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestApplyEnv(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	file := DefaultConfig()
	file.AllowWrite = []string{"/from-file"}
	file.EgressJail = false
	cases := []struct {
		name    string
		env     map[string]string
		check   func(c Config) bool
		wantErr string
	}{
		{"nothing set keeps the file", nil, func(c Config) bool { return !c.EgressJail && c.AllowWrite[0] == "/from-file" }, ""},
		{"jail on by anything but 0", map[string]string{EnvEgressJail: "yes please"}, func(c Config) bool { return c.EgressJail }, ""},
		{"jail off by 0", map[string]string{EnvEgressJail: "0"}, func(c Config) bool { return !c.EgressJail }, ""},
		{"allow-write list replaces", map[string]string{EnvAllowWrite: "/a, /b"}, func(c Config) bool { return reflect.DeepEqual(c.AllowWrite, []string{"/a", "/b"}) }, ""},
		{"allow-ip list", map[string]string{EnvAllowIP: "10.1.2.3 192.168.7.0/24"}, func(c Config) bool { return len(c.AllowIP) == 2 }, ""},
		{"workspace root", map[string]string{EnvWorkspaceRoot: "/w"}, func(c Config) bool { return c.WorkspaceRoot == "/w" }, ""},
		{"no-forge", map[string]string{EnvNoForge: "1"}, func(c Config) bool { return c.NoForge }, ""},
		{"debug on", map[string]string{EnvDebug: "1"}, func(c Config) bool { return c.Debug && c.DebugFile == "" }, ""},
		{"debug to a file", map[string]string{EnvDebug: "/tmp/cs.log"}, func(c Config) bool { return c.Debug && c.DebugFile == "/tmp/cs.log" }, ""},
		{"bad debug", map[string]string{EnvDebug: "loud"}, nil, "environment: CLAUDE_SANDBOX_DEBUG:"},
		{"bad allow-ip", map[string]string{EnvAllowIP: "nope"}, nil, "environment: CLAUDE_SANDBOX_ALLOW_IP:"},
		{"allow-domain list replaces", map[string]string{EnvAllowDomain: "@github, api.anthropic.com"}, func(c Config) bool {
			return reflect.DeepEqual(c.AllowDomain, []string{"@github", "api.anthropic.com"})
		}, ""},
		{"empty allow-domain turns it off", map[string]string{EnvAllowDomain: ""}, func(c Config) bool { return c.AllowDomain == nil }, ""},
		{"bad allow-domain", map[string]string{EnvAllowDomain: "a..b"}, nil, "environment: CLAUDE_SANDBOX_ALLOW_DOMAIN:"},
		{"relative workspace", map[string]string{EnvWorkspaceRoot: "w"}, nil, "environment: CLAUDE_SANDBOX_WORKSPACE_ROOT:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := file
			cfg.AllowWrite = append([]string(nil), file.AllowWrite...)
			err := cfg.ApplyEnv(env(c.env))
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || !c.check(cfg) {
				t.Errorf("config %+v, err %v", cfg, err)
			}
		})
	}
}

func TestGitConfig(t *testing.T) {
	got := GitConfig("Ada \"The\" Lovelace\n[core]", "ada@example.org", Config{GitLabHost: "gitlab.example.org"})
	for _, want := range []string{
		"name = \"Ada \\\"The\\\" Lovelace [core]\"", "email = \"ada@example.org\"",
		"defaultBranch = main", "directory = *",
		"helper = !gh auth git-credential", "[credential \"https://gitlab.example.org\"]", "helper = !glab auth git-credential",
		"insteadOf = git@github.com:", "insteadOf = git@gitlab.example.org:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("gitconfig lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "[core]") != 1 || strings.Contains(got, "\n[core]") {
		t.Errorf("a newline in the name started a section:\n%s", got)
	}
	noForge := GitConfig("A", "a@b", Config{NoForge: true})
	if strings.Contains(noForge, "credential") || strings.Contains(noForge, "insteadOf") {
		t.Errorf("no-forge gitconfig has forge helpers:\n%s", noForge)
	}
	// A forge the ssh-agent signs for keeps its SSH URLs; the other
	// is still rewritten.
	agent := GitConfig("", "", Config{GitLabHost: "gitlab.example.org", SSHAgent: []string{"GitHub.com"}})
	if strings.Contains(agent, "insteadOf = git@github.com:") || !strings.Contains(agent, "insteadOf = git@gitlab.example.org:") {
		t.Errorf("gitconfig with ssh-agent = github.com:\n%s", agent)
	}
	// The presets are their forges.
	agent = GitConfig("", "", Config{GitLabHost: "gitlab.com", SSHAgent: []string{"@gitlab"}})
	if strings.Contains(agent, "insteadOf = git@gitlab.com:") || !strings.Contains(agent, "insteadOf = git@github.com:") {
		t.Errorf("gitconfig with ssh-agent = @gitlab:\n%s", agent)
	}
	if strings.Contains(GitConfig("", "", Config{}), "[user]") {
		t.Error("an empty identity must not write a [user] section")
	}
}

// TestConfigKeysTable: every key of the one table (configKeys) is accepted
// by ParseConfig and named in the unknown-key message, and the message
// names no other key; a key added to the table without a sample line here
// fails, so each new key is parsed at least once.
func TestConfigKeysTable(t *testing.T) {
	sample := map[string]string{
		"workspace-root":     "workspace-root = /w",
		"no-forge":           "no-forge",
		"writable-git-hooks": "writable-git-hooks = 1",
		"egress-jail":        "egress-jail = 0",
		"allow-write":        "allow-write = /a",
		"allow-ip":           "allow-ip = 10.1.2.3",
		"internet-cidr":      "internet-cidr = 198.18.0.0/15",
		"allow-domain":       "allow-domain = example.com",
		"deny-domain":        "deny-domain = gist.github.com",
		"allow-host-port":    "allow-host-port = 11434",
		"publish":            "publish = 3000:3000",
		"allow-device":       "allow-device = /dev/dri/*",
		"allow-socket":       "allow-socket = /run/x.sock",
		"pass-env":           "pass-env = FOO",
		"home-entry":         "home-entry = .cache/foo session",
		"gitlab-host":        "gitlab-host = gitlab.example.org",
		"pids-limit":         "pids-limit = 1000",
		"osc52":              "osc52 = allow",
		"tmpfs-size":         "tmpfs-size = 512M",
		"ssh-agent":          "ssh-agent = @github, forge.test:2222",
		"ssh-key":            "ssh-key = SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s",
		"ssh-host-key":       "ssh-host-key = github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
		"ssh-key-file":       "ssh-key-file = /home/u/.ssh/id_ed25519",
		"debug":              "debug",
		"debug-file":         "debug-file = /var/log/cs.log",
		"audit-log":          "audit-log = /var/log/cs-audit.jsonl",
		"ask":                "ask",
		"ask-timeout":        "ask-timeout = 1m",
		"ssh-confirm":        "ssh-confirm = yes",
	}
	_, err := ParseConfig("f", strings.NewReader("no-such-key = 1\n"))
	if err == nil {
		t.Fatal("an unknown key was accepted")
	}
	msg := err.Error()
	const lead = "f:1: no-such-key: unknown key (known: "
	if !strings.HasPrefix(msg, lead) || !strings.HasSuffix(msg, ")") {
		t.Fatalf("unknown-key message %q, want it to start %q", msg, lead)
	}
	listed := strings.Split(strings.TrimSuffix(strings.TrimPrefix(msg, lead), ")"), ", ")
	inTable := map[string]bool{}
	for _, k := range configKeys {
		if inTable[k.name] {
			t.Errorf("key %s is twice in the table", k.name)
		}
		inTable[k.name] = true
		line, ok := sample[k.name]
		if !ok {
			t.Errorf("key %s has no sample line in this test: add one", k.name)
			continue
		}
		if _, err := ParseConfig("f", strings.NewReader(line+"\n")); err != nil {
			t.Errorf("key %s (%q) refused: %v", k.name, line, err)
		}
	}
	if len(listed) != len(configKeys) {
		t.Errorf("the message lists %d keys %q, the table has %d", len(listed), listed, len(configKeys))
	}
	for i, name := range listed {
		if !inTable[name] {
			t.Errorf("the message lists %q, which is not in the table", name)
		} else if i < len(configKeys) && configKeys[i].name != name {
			t.Errorf("the message lists %q at %d, the table %q", name, i, configKeys[i].name)
		}
	}
}

// The ask mode's keys: ask switches it on, ask-timeout takes 1s to 10m.
func TestConfigAskKeys(t *testing.T) {
	c, err := ParseConfig("f", strings.NewReader("ask\nask-timeout = 90s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Ask || c.AskTimeout != 90*time.Second {
		t.Errorf("ask %v, ask-timeout %v", c.Ask, c.AskTimeout)
	}
	for _, bad := range []string{"ask-timeout = 0s", "ask-timeout = 11m", "ask-timeout = soon", "ask = maybe"} {
		if _, err := ParseConfig("f", strings.NewReader(bad+"\n")); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
