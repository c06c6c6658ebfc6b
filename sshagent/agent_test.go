package sshagent

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

type keyPair struct {
	signer ssh.Signer
	pub    ssh.PublicKey
	priv   ed25519.PrivateKey
}

func newKey(t *testing.T) keyPair {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	_ = pub
	return keyPair{signer: s, pub: s.PublicKey(), priv: priv}
}

// lab is a backing agent holding two user keys, and two servers' host
// keys: forge.test (allowed, in a hashed known_hosts line) and other.test.
type lab struct {
	user, spare, forge, other keyPair
	backing                   agent.Agent
	knownHosts                string
	reports                   []string
}

func newLab(t *testing.T) *lab {
	l := &lab{user: newKey(t), spare: newKey(t), forge: newKey(t), other: newKey(t)}
	l.backing = agent.NewKeyring()
	for _, k := range []keyPair{l.user, l.spare} {
		if err := l.backing.Add(agent.AddedKey{PrivateKey: k.priv}); err != nil {
			t.Fatal(err)
		}
	}
	l.knownHosts = filepath.Join(t.TempDir(), "known_hosts")
	lines := knownhosts.Line([]string{knownhosts.HashHostname("forge.test")}, l.forge.pub) + "\n" +
		knownhosts.Line([]string{"other.test"}, l.other.pub) + "\n" +
		"@cert-authority forge.test " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(l.spare.pub))) + "\n"
	if err := os.WriteFile(l.knownHosts, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *lab) policy(t *testing.T, cfg Config) *Policy {
	t.Helper()
	if cfg.Hosts == nil {
		cfg.Hosts = []string{"forge.test"}
	}
	cfg.KnownHosts = []string{l.knownHosts}
	cfg.Report = func(s string) { l.reports = append(l.reports, s) }
	p, err := NewPolicy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// connect serves p's agent on one end of a socketpair and returns a client
// on the other, as ssh inside the sandbox would talk to it.
func connect(t *testing.T, p *Policy, backing agent.Agent) agent.ExtendedAgent {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "agent")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv, cli := conn(fds[0]), conn(fds[1])
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = agent.ServeAgent(p.Agent(backing.(agent.ExtendedAgent)), srv)
	}()
	t.Cleanup(func() {
		cli.Close()
		srv.Close()
		<-done
	})
	return agent.NewClient(cli)
}

// bind sends the session-bind extension a client would after the key
// exchange with a server holding hostKey: its signature over sid.
func bind(t *testing.T, a agent.ExtendedAgent, hostKey keyPair, signer ssh.Signer, sid []byte, forwarding bool) error {
	t.Helper()
	sig, err := signer.Sign(rand.Reader, sid)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Extension(SessionBind, ssh.Marshal(sessionBindMsg{
		HostKey: hostKey.pub.Marshal(), SessionID: sid, Signature: ssh.Marshal(sig), Forwarding: forwarding,
	}))
	return err
}

func authData(sid []byte, key ssh.PublicKey, method string, rest []byte) []byte {
	return ssh.Marshal(userAuthRequest{
		SessionID: sid, Type: msgUserAuthRequest, User: "git", Service: "ssh-connection",
		Method: method, HasSig: true, Algo: key.Type(), PubKey: key.Marshal(), Rest: rest,
	})
}

func sid(b byte) []byte {
	s := make([]byte, 32)
	for i := range s {
		s[i] = b
	}
	return s
}

func TestSignsBoundToAllowedHost(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatalf("session-bind to forge.test: %v", err)
	}
	data := authData(sid(1), l.user.pub, methodPublicKey, nil)
	sig, err := a.Sign(l.user.pub, data)
	if err != nil {
		t.Fatalf("sign for forge.test: %v", err)
	}
	if err := l.user.pub.Verify(data, sig); err != nil {
		t.Fatalf("the signature does not verify: %v", err)
	}
	if got := p.Summary(); got != "ssh-agent: signed 1 time for forge.test" {
		t.Errorf("summary %q", got)
	}
	if len(l.reports) != 0 {
		t.Errorf("reports %q", l.reports)
	}
}

func TestSignsHostboundMethod(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	rest := ssh.Marshal(struct{ K []byte }{l.forge.pub.Marshal()})
	if _, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodHostbound, rest)); err != nil {
		t.Fatalf("publickey-hostbound for forge.test: %v", err)
	}
	rest = ssh.Marshal(struct{ K []byte }{l.other.pub.Marshal()})
	if _, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodHostbound, rest)); err == nil {
		t.Fatal("signed a hostbound request naming other.test's host key")
	}
}

func refused(t *testing.T, l *lab, p *Policy, err error, where string) {
	t.Helper()
	if err == nil {
		t.Fatal("signed")
	}
	if len(l.reports) == 0 {
		t.Fatal("the refusal was not reported")
	}
	if _, r := p.Counts(); r[where] == 0 {
		t.Errorf("refusals %v, want one for %q", r, where)
	}
	if s, _ := p.Counts(); len(s) != 0 {
		t.Errorf("signed %v", s)
	}
}

func TestRefusesUnbound(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	_, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "unbound")
}

func TestRefusesOtherHost(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	if err := bind(t, a, l.other, l.other.signer, sid(2), false); err != nil {
		t.Fatalf("a valid binding is recorded even for another host: %v", err)
	}
	_, err := a.Sign(l.user.pub, authData(sid(2), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "host key "+ssh.FingerprintSHA256(l.other.pub))
	if !strings.Contains(p.Summary(), "refused 1") {
		t.Errorf("summary %q", p.Summary())
	}
}

func TestRefusesForwarded(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	// ssh -A forge.test: the forwarded connection is bound with
	// is_forwarding, then the next hop's ssh binds its own session.
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), true); err != nil {
		t.Fatal(err)
	}
	if err := bind(t, a, l.forge, l.forge.signer, sid(3), false); err != nil {
		t.Fatal(err)
	}
	_, err := a.Sign(l.user.pub, authData(sid(3), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "forge.test")
}

func TestRefusesForgedBinding(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	// The sandbox claims forge.test's host key without its private key.
	if err := bind(t, a, l.forge, l.other.signer, sid(2), false); err == nil {
		t.Fatal("a binding not signed by the host key was accepted")
	}
	_, err := a.Sign(l.user.pub, authData(sid(2), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "unbound")
}

func TestRefusesOtherSession(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	_, err := a.Sign(l.user.pub, authData(sid(2), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "forge.test")
	// Nor any data that is not a user authentication (sshsig, a raw blob).
	if _, err := a.Sign(l.user.pub, []byte("SSHSIG anything")); err == nil {
		t.Fatal("signed arbitrary data")
	}
}

func TestRefusesRebind(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	a := connect(t, p, l.backing)
	if err := bind(t, a, l.other, l.other.signer, sid(2), false); err != nil {
		t.Fatal(err)
	}
	// Bound for other.test's authentication: binding forge.test's
	// session on top is refused, so other.test's session stays unsigned.
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err == nil {
		t.Fatal("a second binding for authentication was accepted")
	}
	_, err := a.Sign(l.user.pub, authData(sid(2), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "host key "+ssh.FingerprintSHA256(l.other.pub))
}

func TestListFiltered(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{Keys: []string{string(ssh.MarshalAuthorizedKey(l.user.pub))}})
	a := connect(t, p, l.backing)
	keys, err := a.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || string(keys[0].Marshal()) != string(l.user.pub.Marshal()) {
		t.Fatalf("listed %v, want only the allowed key", keys)
	}
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	_, err = a.Sign(l.spare.pub, authData(sid(1), l.spare.pub, methodPublicKey, nil))
	refused(t, l, p, err, "forge.test")
	// The fingerprint form, and the default: every key.
	p = l.policy(t, Config{Keys: []string{ssh.FingerprintSHA256(l.spare.pub)}})
	if keys, _ := connect(t, p, l.backing).List(); len(keys) != 1 || string(keys[0].Marshal()) != string(l.spare.pub.Marshal()) {
		t.Fatalf("listed %v, want the spare key", keys)
	}
	if keys, _ := connect(t, l.policy(t, Config{}), l.backing).List(); len(keys) != 2 {
		t.Fatalf("listed %d keys, want all 2", len(keys))
	}
}

func TestReadOnly(t *testing.T) {
	l := newLab(t)
	a := connect(t, l.policy(t, Config{}), l.backing)
	if err := a.RemoveAll(); err == nil {
		t.Error("RemoveAll went through")
	}
	if err := a.Add(agent.AddedKey{PrivateKey: newKey(t).priv}); err == nil {
		t.Error("Add went through")
	}
	if keys, _ := l.backing.List(); len(keys) != 2 {
		t.Errorf("the backing agent holds %d keys", len(keys))
	}
}

func TestHostKeys(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	// The hashed line's key, not the @cert-authority line's, not other.test's.
	want := "forge.test " + string(ssh.MarshalAuthorizedKey(l.forge.pub))
	if got := p.KnownHosts(); got != want {
		t.Errorf("known_hosts %q, want %q", got, want)
	}
	if _, err := NewPolicy(Config{Hosts: []string{"nowhere.test"}, KnownHosts: []string{l.knownHosts}}); err == nil {
		t.Error("a host with no key was accepted")
	}
	pin := "nowhere.test:2222 " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(l.other.pub)))
	p, err := NewPolicy(Config{Hosts: []string{"nowhere.test:2222"}, HostKeys: []string{pin}})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.KnownHosts(); !strings.HasPrefix(got, "[nowhere.test]:2222 ssh-ed25519 ") {
		t.Errorf("known_hosts %q", got)
	}
	if _, err := NewPolicy(Config{Hosts: []string{"a.test"}, HostKeys: []string{pin}}); err == nil {
		t.Error("a pinned key for a host not allowed was accepted")
	}
}

func TestServer(t *testing.T) {
	l := newLab(t)
	backing := testutil.ServeAgent(t, l.backing)
	s, err := Listen(l.policy(t, Config{}), backing)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(s.Socket))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the socket's directory: %v %v", fi.Mode(), err)
	}
	c, err := net.Dial("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	a := agent.NewClient(c)
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	s.Close()
	if _, err := os.Stat(filepath.Dir(s.Socket)); !os.IsNotExist(err) {
		t.Errorf("the directory is left: %v", err)
	}
}
