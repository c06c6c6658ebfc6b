package sniff

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"testing"
)

// echConfigList builds a serialized ECHConfigList (version 0xfe0d) with one
// X25519 / HKDF-SHA256 / AES-128-GCM config for publicName.
func echConfigList(t testing.TB, publicName string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var c []byte
	c = append(c, 1)              // config_id
	c = append(c, u16(0x0020)...) // kem_id: DHKEM(X25519, HKDF-SHA256)
	c = append(c, vec16(key.PublicKey().Bytes())...)
	c = append(c, vec16(u16(0x0001), u16(0x0001))...) // HKDF-SHA256, AES-128-GCM
	c = append(c, 64)                                 // maximum_name_length
	c = append(c, byte(len(publicName)))
	c = append(c, publicName...)
	c = append(c, u16(0)...) // no extensions
	cfg := append(u16(0xfe0d), vec16(c)...)
	return vec16(cfg)
}

// extensionTypes lists the extension types of a complete ClientHello
// record stream, in order, for checking what a test built.
func extensionTypes(t *testing.T, b []byte) []int {
	t.Helper()
	msg, res := reassemble(b)
	if res != Found {
		t.Fatalf("reassemble: %v", res)
	}
	r := reader{b: msg[handshakeHdrLen:]}
	r.bytes(2 + 32)
	r.bytes(r.u8())
	r.bytes(r.u16())
	r.bytes(r.u8())
	r.u16()
	var out []int
	for len(r.b) > 0 && !r.bad {
		out = append(out, r.u16())
		r.bytes(r.u16())
	}
	return out
}

// With Encrypted Client Hello the visible name is the outer, public name;
// the name the client really wants is encrypted and does not appear.
func TestClientHelloECHGoClient(t *testing.T) {
	cfg := &tls.Config{
		ServerName:                     "secret-inner.example.com",
		EncryptedClientHelloConfigList: echConfigList(t, "public.example.net"),
		MinVersion:                     tls.VersionTLS13,
	}
	b := goClientHello(t, cfg)
	name, res := ClientHello(b)
	if name != "public.example.net" || res != Found {
		t.Fatalf("ClientHello = %q, %v; want the public name", name, res)
	}
	hasECH := false
	for _, typ := range extensionTypes(t, b) {
		hasECH = hasECH || typ == 0xfe0d
	}
	if !hasECH {
		t.Fatal("the Go client sent no encrypted_client_hello extension: the test does not test ECH")
	}
	if bytes.Contains(b, []byte("secret-inner")) {
		t.Fatal("the inner name is visible in the outer hello")
	}
}
