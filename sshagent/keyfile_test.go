package sshagent

import (
	"bytes"
	"crypto/rand"
	"encoding/pem"
	"golang.org/x/sys/unix"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// The forges' published fingerprints, as their pages show them (the
// sources are named next to the keys, presets.go). Each preset key must
// hash to one of its forge's, and each fingerprint must have its key.
var publishedFingerprints = map[string][]string{
	"@github": {
		"SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU", // Ed25519
		"SHA256:p2QAMXNIC1TJYWeIOttrVc98/R1BUFWu3/LiyKgUfQM", // ECDSA
		"SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s", // RSA
	},
	"@gitlab": {
		"SHA256:eUXGGm1YGsMAS7vkcx6JOJdOGHPem5gQp4taiCfCLB8", // ED25519
		"SHA256:HbW3g8zUjNSksFbqTiUWPWg2Bq1x8xdGUrliXFzSnUw", // ECDSA
		"SHA256:ROQFvPThGrW4RuWLoL9tq9I9zJ42fK4XywyRtbOz/EQ", // RSA
	},
}

func TestPresetFingerprints(t *testing.T) {
	if got := strings.Join(Presets(), " "); got != "@github @gitlab" {
		t.Fatalf("presets %q", got)
	}
	for name, want := range publishedFingerprints {
		var got []string
		for _, line := range presets[name].keys {
			k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
			if err != nil {
				t.Fatalf("%s: %q: %v", name, line, err)
			}
			got = append(got, ssh.FingerprintSHA256(k))
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: the keys' fingerprints are\n%q\nthe forge publishes\n%q", name, got, want)
		}
	}
	// The known_hosts text holds each key once, under its host.
	kh := PresetKnownHosts()
	if n := strings.Count(kh, "\n"); n != 6 || strings.Count(kh, "github.com ssh-") != 2 || strings.Count(kh, "gitlab.com ecdsa-") != 1 {
		t.Errorf("known_hosts text:\n%s", kh)
	}
}

// A preset needs no known_hosts: the forge's keys are its host's, the
// sandbox's known_hosts holds them, and its endpoint is HOST:22.
func TestPresetPolicy(t *testing.T) {
	p, err := NewPolicy(Config{Hosts: []string{"@github", "@GitLab"}, KnownHosts: []string{filepath.Join(t.TempDir(), "none")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Endpoints(), " "); got != "github.com:22 gitlab.com:22" {
		t.Errorf("endpoints %q", got)
	}
	if p.KnownHosts() != PresetKnownHosts() {
		t.Errorf("known_hosts\n%s", p.KnownHosts())
	}
	k, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(presets["@gitlab"].keys[0]))
	if h := p.hostOf(k); h == nil || h.String() != "gitlab.com" {
		t.Errorf("gitlab.com's key is %v's", h)
	}
	if name, port, err := ParseHost("@github"); err != nil || name != "github.com" || port != 22 {
		t.Errorf("@github: %s %d %v", name, port, err)
	}
	if _, _, err := ParseHost("@codeberg"); err == nil || !strings.Contains(err.Error(), "@github, @gitlab") {
		t.Errorf("an unknown preset: %v", err)
	}
}

// writeKey writes k's private key in OpenSSH's format to a file of mode
// mode (encrypted with passphrase when given).
func writeKey(t *testing.T, k keyPair, mode os.FileMode, passphrase string) string {
	t.Helper()
	var b *pem.Block
	var err error
	if passphrase != "" {
		b, err = ssh.MarshalPrivateKeyWithPassphrase(k.priv, "", []byte(passphrase))
	} else {
		b, err = ssh.MarshalPrivateKey(k.priv, "")
	}
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(f, pem.EncodeToMemory(b), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, mode); err != nil {
		t.Fatal(err)
	}
	return f
}

// A key file's key is the agent's, with no caller's agent at all: listed,
// signing for the allowed host only.
func TestKeyFileAgent(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{KeyFiles: []string{writeKey(t, l.user, 0o600, "")}})
	s, err := Listen(p, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := agent.NewClient(c)
	keys, err := a.List()
	if err != nil || len(keys) != 1 || !bytes.Equal(keys[0].Marshal(), l.user.pub.Marshal()) || keys[0].Comment != "id_ed25519" {
		t.Fatalf("listed %v %v, want the key file's key", keys, err)
	}
	if err := bind(t, a, l.other, l.other.signer, sid(2), false); err != nil {
		t.Fatal(err)
	}
	_, err = a.Sign(l.user.pub, authData(sid(2), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "host key "+ssh.FingerprintSHA256(l.other.pub))

	c2, err := net.Dial("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	a = agent.NewClient(c2)
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	data := authData(sid(1), l.user.pub, methodPublicKey, nil)
	sig, err := a.Sign(l.user.pub, data)
	if err != nil {
		t.Fatalf("sign for forge.test: %v", err)
	}
	if err := l.user.pub.Verify(data, sig); err != nil {
		t.Fatal(err)
	}
	if err := a.Add(agent.AddedKey{PrivateKey: l.spare.priv}); err == nil {
		t.Error("a key was added from inside")
	}
}

// As ssh: a key file its group or others may read is refused, and so is
// an encrypted one (naming ssh-add), a huge one, and one that is no key.
func TestKeyFileRefused(t *testing.T) {
	k := newKey(t)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		_, err := LoadKeyFile(writeKey(t, k, mode, ""))
		if err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %o: %v", mode, err)
		}
	}
	if _, err := LoadKeyFile(writeKey(t, k, 0o400, "")); err != nil {
		t.Errorf("mode 400: %v", err)
	}
	if _, err := LoadKeyFile(writeKey(t, k, 0o600, "secret")); err == nil || !strings.Contains(err.Error(), "ssh-add") {
		t.Errorf("an encrypted key: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big")
	b := make([]byte, maxKeyFile+1)
	_, _ = rand.Read(b)
	if err := os.WriteFile(big, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a huge file: %v", err)
	}
	if _, err := LoadKeyFile(filepath.Dir(big)); err == nil {
		t.Error("a directory was read as a key")
	}
	if _, err := NewPolicy(Config{Hosts: []string{"@github"}, KeyFiles: []string{big[:len(big)-1] + "x"}}); err == nil {
		t.Error("a missing key file was accepted")
	}
}

// Every signature and refusal is an event (the audit log's ssh-sign and
// ssh-refuse), with the host and the key's fingerprint.
func TestEvents(t *testing.T) {
	l := newLab(t)
	p := l.policy(t, Config{})
	var evs []Event
	p.SetEvents(func(e Event) { evs = append(evs, e) })
	a := connect(t, p, l.backing)
	_, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil))
	refused(t, l, p, err, "unbound")
	if err := bind(t, a, l.forge, l.forge.signer, sid(1), false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sign(l.user.pub, authData(sid(1), l.user.pub, methodPublicKey, nil)); err != nil {
		t.Fatal(err)
	}
	fp := ssh.FingerprintSHA256(l.user.pub)
	if len(evs) != 2 || evs[0].Signed || evs[0].Host != "unbound" || evs[0].Key != fp || !strings.Contains(evs[0].Reason, "not bound") ||
		!evs[1].Signed || evs[1].Host != "forge.test" || evs[1].Key != fp || evs[1].Reason != "" {
		t.Errorf("events %+v", evs)
	}
}

// A key file path that names a FIFO (or a file swapped for one) is
// refused at once: the launcher must not wait, before the sandbox starts,
// for a writer that never comes.
func TestKeyFileFIFORefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
}
