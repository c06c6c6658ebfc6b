// Package sshagent serves an SSH agent to a sandbox that signs only for
// allowed hosts.
//
// The agent is backed by the caller's own (SSH_AUTH_SOCK on the host, which
// is never passed inside): the private keys stay there; or by key files
// the launcher reads and holds itself (Config.KeyFiles). To the sandbox it
// lists only the allowed keys, and it signs only a user authentication
// request of a connection that OpenSSH (8.9 and later) has bound to a
// server's host key with the session-bind@openssh.com extension, when that
// host key is one of an allowed host's (from the caller's known_hosts or
// pinned in the configuration). The binding carries the host key, the
// session identifier and the host key's signature over it; the agent
// verifies that signature and then requires the request to be a user
// authentication for that very session. Every other signature (a
// connection with no binding, another host's key, a forwarded session, a
// blob that is not that session's authentication) is refused and
// reported.
//
// What the binding proves: the session identifier the signature covers
// belongs to a key exchange whose server holds the allowed host's private
// host key. What it does not: that the allowed host is honest, or what the
// authenticated session then does there (push anything the key may push).
package sshagent

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SessionBind is the OpenSSH agent extension that binds an agent
// connection to a server's host key (PROTOCOL.agent).
const SessionBind = "session-bind@openssh.com"

// Config is what the agent allows.
type Config struct {
	// Hosts are the allowed hosts, HOST or HOST:PORT (port 22 unless
	// given), or presets (@github, @gitlab) that bring the forge's
	// published host keys.
	Hosts []string
	// KnownHosts are the known_hosts files the hosts' keys are read from
	// (hashed entries too); a missing file is skipped.
	KnownHosts []string
	// HostKeys are pinned keys, "HOST KEYTYPE BASE64" each (HOST as in
	// Hosts).
	HostKeys []string
	// Keys are the allowed keys of the backing agent, each an
	// authorized_keys line ("KEYTYPE BASE64 [comment]") or a fingerprint
	// ("SHA256:..."); empty allows all of them.
	Keys []string
	// KeyFiles are unencrypted private key files the launcher reads and
	// signs with itself, in place of the caller's agent (LoadKeyFile).
	KeyFiles []string
	// Report receives one line per refused signature; nil drops them.
	Report func(string)
	// Confirm: every signature the policy allows is confirmed first by
	// the hook Policy.SetConfirm sets (the ask mode, --ssh-confirm);
	// without a hook it is refused.
	Confirm bool
}

// Signature is a signature the policy allows, as the confirm hook sees
// it.
type Signature struct {
	// Host and Port are the allowed host the connection is bound to.
	Host string
	Port int
	// Key is the user key's SHA256 fingerprint.
	Key string
	// Client is the ssh client that asked, when known.
	Client *Client
}

// Client is the process at the other end of an agent connection, from
// the socket's peer credentials (SO_PEERCRED, taken at its connect).
type Client struct {
	// PID is its pid in the sandbox's pid namespace (the second field of
	// /proc/PID/status's NSpid), as ps inside shows it.
	PID int
	// Argv is its command line, bounded and escaped as a flow's process's
	// (flowowner.ParseCmdline; a process can rewrite its own):
	// information, not proof.
	Argv []string
}

// Event is one signature made or refused, for the audit log.
type Event struct {
	Signed bool
	// Host is the allowed host signed for, or where a refusal was:
	// "HOST", "host key SHA256:..." or "unbound".
	Host string
	// Key is the user key's SHA256 fingerprint ("" for a refused
	// session-bind).
	Key string
	// Reason is why it was refused.
	Reason string
}

// host is one allowed host and its keys.
type host struct {
	name string
	port int
	keys []ssh.PublicKey
}

func (h *host) String() string {
	if h.port == 22 {
		return h.name
	}
	return net.JoinHostPort(h.name, strconv.Itoa(h.port))
}

// knownName is the host's name as known_hosts writes it.
func (h *host) knownName() string {
	if h.port == 22 {
		return h.name
	}
	return "[" + h.name + "]:" + strconv.Itoa(h.port)
}

// Policy is a configuration made ready: the hosts' keys found, the allowed
// keys parsed. It counts signatures and refusals for the exit summary.
type Policy struct {
	hosts   []*host
	keys    map[string]bool // allowed key fingerprints; nil: all
	report  func(string)
	keyring agent.ExtendedAgent // the key files' keys; nil: the caller's agent

	confirmOn bool

	mu      sync.Mutex
	confirm func(Signature) error
	signed  map[string]int
	refused map[string]int
	shown   int // refusals reported (Report) so far
	events  func(Event)
}

// A session makes refusals at will (a binding to a host key of its own
// making is refused, a new one on each connection): the lines on the
// caller's terminal and the places the exit summary counts are bounded.
const (
	// maxShown refusals are reported one line each; the later ones only
	// counted (one line says so).
	maxShown = 16
	// maxPlaces places are counted apart; a refusal at any other is
	// counted under otherPlaces.
	maxPlaces   = 16
	otherPlaces = "other host keys"
)

// ParseHost reads HOST or HOST:PORT (an IPv6 address in brackets when a
// port follows), or a preset (@github: github.com, port 22).
func ParseHost(s string) (name string, port int, err error) {
	if strings.HasPrefix(s, "@") {
		p, ok := presets[strings.ToLower(s)]
		if !ok {
			return "", 0, fmt.Errorf("%q: no such preset (%s)", s, strings.Join(Presets(), ", "))
		}
		return p.host, p.port, nil
	}
	name, port = s, 22
	if h, p, e := net.SplitHostPort(s); e == nil {
		n, e := strconv.Atoi(p)
		if e != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("%q: bad port", s)
		}
		name, port = h, n
	}
	if name == "" || strings.ContainsAny(name, " \t,/@[]*?!") {
		return "", 0, fmt.Errorf("%q is not a host name or address", s)
	}
	return strings.ToLower(name), port, nil
}

// KeyFingerprint reads an allowed key as written in ssh-key / --ssh-key:
// an authorized_keys line (KEYTYPE BASE64 [COMMENT]) or a SHA256:
// fingerprint, and returns the key's SHA256 fingerprint.
func KeyFingerprint(s string) (string, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "SHA256:") {
		return s, nil
	}
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return "", fmt.Errorf("%q is not a public key line (KEYTYPE BASE64) or a SHA256: fingerprint", s)
	}
	return ssh.FingerprintSHA256(k), nil
}

// ParseHostKey reads a pinned host key as written in ssh-host-key: HOST
// KEYTYPE BASE64 (HOST as ParseHost reads it).
func ParseHostKey(line string) (name string, port int, key ssh.PublicKey, err error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return "", 0, nil, fmt.Errorf("%q: use HOST KEYTYPE BASE64", line)
	}
	if name, port, err = ParseHost(f[0]); err != nil {
		return "", 0, nil, err
	}
	if key, _, _, _, err = ssh.ParseAuthorizedKey([]byte(f[1] + " " + f[2])); err != nil {
		return "", 0, nil, fmt.Errorf("%q: not a host key: %v", line, err)
	}
	return name, port, key, nil
}

// NewPolicy finds each host's keys and parses the allowed keys. A host
// with no key is an error: the agent could never sign for it.
func NewPolicy(cfg Config) (*Policy, error) {
	p := &Policy{report: cfg.Report, signed: map[string]int{}, refused: map[string]int{}, confirmOn: cfg.Confirm}
	if p.report == nil {
		p.report = func(string) {}
	}
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("ssh-agent: no host")
	}
	byName := map[string]*host{}
	for _, s := range cfg.Hosts {
		name, port, err := ParseHost(s)
		if err != nil {
			return nil, fmt.Errorf("ssh-agent: %v", err)
		}
		h := byName[(&host{name: name, port: port}).String()]
		if h == nil {
			h = &host{name: name, port: port}
			byName[h.String()] = h
			p.hosts = append(p.hosts, h)
		}
		// A preset brings the forge's published keys.
		for _, line := range presets[strings.ToLower(s)].keys {
			k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
			if err != nil {
				return nil, fmt.Errorf("ssh-agent: preset %s: %v", s, err)
			}
			h.addKey(k)
		}
	}
	for _, line := range cfg.HostKeys {
		name, port, k, err := ParseHostKey(line)
		if err != nil {
			return nil, fmt.Errorf("ssh-host-key: %v", err)
		}
		h := byName[(&host{name: name, port: port}).String()]
		if h == nil {
			return nil, fmt.Errorf("ssh-host-key %q: %s is not an --ssh-agent host", line, strings.Fields(line)[0])
		}
		h.addKey(k)
	}
	for _, h := range p.hosts {
		if err := h.readKnownHosts(cfg.KnownHosts); err != nil {
			return nil, err
		}
		if len(h.keys) == 0 {
			return nil, fmt.Errorf("ssh-agent: no host key for %s in %s or the configuration (ssh-host-key = %s KEYTYPE BASE64)", h, strings.Join(cfg.KnownHosts, ", "), h)
		}
	}
	if len(cfg.KeyFiles) > 0 {
		kr, err := keyring(cfg.KeyFiles)
		if err != nil {
			return nil, err
		}
		p.keyring = kr
	}
	if len(cfg.Keys) > 0 {
		p.keys = map[string]bool{}
		for _, s := range cfg.Keys {
			fp, err := KeyFingerprint(s)
			if err != nil {
				return nil, fmt.Errorf("ssh-key: %v", err)
			}
			p.keys[fp] = true
		}
	}
	return p, nil
}

func (h *host) addKey(k ssh.PublicKey) {
	for _, have := range h.keys {
		if bytes.Equal(have.Marshal(), k.Marshal()) {
			return
		}
	}
	h.keys = append(h.keys, k)
}

// readKnownHosts adds the keys files list for the host (plain and hashed
// entries; @revoked keys never, @cert-authority lines are skipped).
func (h *host) readKnownHosts(files []string) error {
	var have []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			have = append(have, f)
		}
	}
	if len(have) == 0 {
		return nil
	}
	cb, err := knownhosts.New(have...)
	if err != nil {
		return fmt.Errorf("ssh-agent: %v", err)
	}
	// A key no line holds: the error lists every key the host has.
	probe, err := newProbeKey()
	if err != nil {
		return err
	}
	remote := &net.TCPAddr{IP: net.IPv4zero, Port: h.port}
	err = cb(net.JoinHostPort(h.name, strconv.Itoa(h.port)), remote, probe)
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) {
		return nil
	}
	for _, w := range ke.Want {
		if isCertAuthority(w.Filename, w.Line) {
			continue
		}
		h.addKey(w.Key)
	}
	return nil
}

// isCertAuthority reports whether line n of file is a @cert-authority
// entry (a CA key is no host key of its own).
func isCertAuthority(file string, n int) bool {
	f, err := os.Open(file)
	if err != nil {
		return true
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for i := 1; sc.Scan(); i++ {
		if i == n {
			return strings.HasPrefix(strings.TrimSpace(sc.Text()), "@cert-authority")
		}
	}
	return true
}

// KnownHosts is a known_hosts file holding exactly the allowed hosts' keys.
func (p *Policy) KnownHosts() string {
	var b strings.Builder
	for _, h := range p.hosts {
		for _, k := range h.keys {
			fmt.Fprintf(&b, "%s %s", h.knownName(), ssh.MarshalAuthorizedKey(k))
		}
	}
	return b.String()
}

// Hosts are the allowed hosts, HOST or HOST:PORT, in the order given.
func (p *Policy) Hosts() []string {
	var out []string
	for _, h := range p.hosts {
		out = append(out, h.String())
	}
	return out
}

// Endpoints are the allowed hosts named by name (not address) with
// their ports, NAME:PORT, as a domain allowlist takes them.
func (p *Policy) Endpoints() []string {
	var out []string
	for _, h := range p.hosts {
		if net.ParseIP(h.name) != nil {
			continue
		}
		out = append(out, net.JoinHostPort(h.name, strconv.Itoa(h.port)))
	}
	return out
}

// hostOf returns the allowed host whose key k is, or nil.
func (p *Policy) hostOf(k ssh.PublicKey) *host {
	b := k.Marshal()
	for _, h := range p.hosts {
		for _, hk := range h.keys {
			if bytes.Equal(hk.Marshal(), b) {
				return h
			}
		}
	}
	return nil
}

func (p *Policy) keyAllowed(k ssh.PublicKey) bool {
	return p.keys == nil || p.keys[ssh.FingerprintSHA256(k)]
}

// SetEvents makes f receive every signature made or refused from now on
// (the audit log, opened after the agent starts); nil stops it.
func (p *Policy) SetEvents(f func(Event)) {
	p.mu.Lock()
	p.events = f
	p.mu.Unlock()
}

// SetConfirm sets the hook that confirms each signature when the policy
// was made with Config.Confirm (the ask mode's broker, which exists only
// once the jail does): nil lets the signature be made, an error refuses
// it, its text the refusal's reason. It may block until someone answers.
func (p *Policy) SetConfirm(f func(Signature) error) {
	p.mu.Lock()
	p.confirm = f
	p.mu.Unlock()
}

// errNoConfirm refuses a signature to confirm when nothing can.
var errNoConfirm = errors.New("no one can confirm it (ssh-confirm without the ask mode)")

func (p *Policy) confirmSign(s Signature) error {
	p.mu.Lock()
	f := p.confirm
	p.mu.Unlock()
	if f == nil {
		return errNoConfirm
	}
	return f(s)
}

func (p *Policy) event(e Event) {
	p.mu.Lock()
	f := p.events
	p.mu.Unlock()
	if f != nil {
		f(e)
	}
}

func (p *Policy) countSigned(h *host, key ssh.PublicKey) {
	p.mu.Lock()
	p.signed[h.String()]++
	p.mu.Unlock()
	p.event(Event{Signed: true, Host: h.String(), Key: ssh.FingerprintSHA256(key)})
}

func (p *Policy) refuse(where string, key ssh.PublicKey, why string) error {
	p.mu.Lock()
	counted := where
	if _, ok := p.refused[where]; !ok && len(p.refused) >= maxPlaces {
		counted = otherPlaces
	}
	p.refused[counted]++
	p.mu.Unlock()
	p.show(fmt.Sprintf("ssh-agent: refused a signature (%s): %s", where, why))
	p.event(Event{Host: where, Key: ssh.FingerprintSHA256(key), Reason: why})
	return fmt.Errorf("refused by the sandbox's ssh-agent: %s", why)
}

// show reports a refusal's line: the first maxShown, then one saying the
// rest are only counted.
func (p *Policy) show(line string) {
	p.mu.Lock()
	shown := p.shown
	if shown <= maxShown {
		p.shown++
	}
	p.mu.Unlock()
	switch {
	case shown < maxShown:
		p.report(line)
	case shown == maxShown:
		p.report(line + "; further refusals are counted, not shown (the exit summary, the audit log)")
	}
}

// Counts returns how many signatures were made per allowed host, and how
// many were refused per place ("HOST", "host key SHA256:...", "unbound").
func (p *Policy) Counts() (signed, refused map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	signed, refused = map[string]int{}, map[string]int{}
	for k, v := range p.signed {
		signed[k] = v
	}
	for k, v := range p.refused {
		refused[k] = v
	}
	return signed, refused
}

// Summary is the exit summary's line: "ssh-agent: signed 2 times for
// forge.test; refused 1 (1 unbound)", or "" when nothing was asked.
func (p *Policy) Summary() string {
	signed, refused := p.Counts()
	if len(signed) == 0 && len(refused) == 0 {
		return ""
	}
	var parts []string
	for _, h := range p.hosts {
		if n := signed[h.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("signed %s for %s", times(n), h))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "signed nothing")
	}
	s := "ssh-agent: " + strings.Join(parts, ", ")
	if len(refused) > 0 {
		total := 0
		var where []string
		for k, v := range refused {
			total += v
			where = append(where, fmt.Sprintf("%d %s", v, k))
		}
		sort.Strings(where)
		s += fmt.Sprintf("; refused %d (%s)", total, strings.Join(where, ", "))
	}
	return s
}

func times(n int) string {
	if n == 1 {
		return "1 time"
	}
	return strconv.Itoa(n) + " times"
}

// KnownHostsFiles are the caller's known_hosts files OpenSSH reads by
// default: ~/.ssh/known_hosts and ~/.ssh/known_hosts2.
func KnownHostsFiles(home string) []string {
	if home == "" {
		return nil
	}
	return []string{filepath.Join(home, ".ssh", "known_hosts"), filepath.Join(home, ".ssh", "known_hosts2")}
}

// newProbeKey is a fresh key no known_hosts line holds.
func newProbeKey() (ssh.PublicKey, error) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewPublicKey(pub)
}

// Name is the event's name in the audit log: "ssh-sign" or "ssh-refuse".
func (e Event) Name() string {
	if e.Signed {
		return "ssh-sign"
	}
	return "ssh-refuse"
}
