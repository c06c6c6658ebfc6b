package sshagent

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// sessionBindMsg is the session-bind@openssh.com extension's contents
// (after the extension's name): the server's host key, the session
// identifier, the host key's signature over that identifier, and whether
// the binding is for a forwarded agent connection.
type sessionBindMsg struct {
	HostKey    []byte
	SessionID  []byte
	Signature  []byte
	Forwarding bool
}

// userAuthRequest is the data a client asks the agent to sign for
// publickey authentication (RFC 4252, section 7): the session identifier,
// then the SSH_MSG_USERAUTH_REQUEST message. OpenSSH's
// publickey-hostbound-v00@openssh.com method adds the server's host key
// after the user's key.
type userAuthRequest struct {
	SessionID []byte
	Type      byte
	User      string
	Service   string
	Method    string
	HasSig    bool
	Algo      string
	PubKey    []byte
	Rest      []byte `ssh:"rest"`
}

const (
	msgUserAuthRequest = 50
	methodPublicKey    = "publickey"
	methodHostbound    = "publickey-hostbound-v00@openssh.com"
)

// maxBinds bounds the bindings one connection may record (a chain of
// forwarded hops each adds one), as OpenSSH's agent does.
const maxBinds = 16

// conn is the agent one sandbox connection talks to: its bindings, over
// the backing agent.
type conn struct {
	p       *Policy
	backing agent.ExtendedAgent

	binds      int
	forwarding bool          // some binding was for a forwarded connection
	authBound  bool          // a binding for authentication was made
	sid        []byte        // the last binding's session identifier
	hostKey    ssh.PublicKey // and host key
	host       *host         // the allowed host that key is, or nil
	client     *Client       // the peer, when known
}

// Agent returns the agent one connection of the sandbox talks to, over
// backing (a connection to the caller's agent of its own).
func (p *Policy) Agent(backing agent.ExtendedAgent) agent.ExtendedAgent {
	return p.agentFor(backing, nil)
}

func (p *Policy) agentFor(backing agent.ExtendedAgent, client *Client) agent.ExtendedAgent {
	return &conn{p: p, backing: backing, client: client}
}

var errReadOnly = errors.New("the sandbox's ssh-agent takes no keys from inside: add them to the caller's agent, or name a key file (ssh-key-file)")

func (c *conn) List() ([]*agent.Key, error) {
	keys, err := c.backing.List()
	if err != nil {
		return nil, err
	}
	var out []*agent.Key
	for _, k := range keys {
		if c.p.keyAllowed(k) {
			out = append(out, k)
		}
	}
	return out, nil
}

func (c *conn) Sign(key ssh.PublicKey, data []byte) (*ssh.Signature, error) {
	return c.SignWithFlags(key, data, 0)
}

func (c *conn) SignWithFlags(key ssh.PublicKey, data []byte, flags agent.SignatureFlags) (*ssh.Signature, error) {
	where := "unbound"
	if c.host != nil {
		where = c.host.String()
	} else if c.hostKey != nil {
		where = "host key " + ssh.FingerprintSHA256(c.hostKey)
	}
	if !c.p.keyAllowed(key) {
		return nil, c.p.refuse(where, key, fmt.Sprintf("key %s is not an allowed key (ssh-key)", ssh.FingerprintSHA256(key)))
	}
	switch {
	case c.binds == 0:
		return nil, c.p.refuse(where, key, "the connection is not bound to a host key (session-bind@openssh.com; OpenSSH 8.9 or later sends it), so the signature could be for any host")
	case c.forwarding:
		return nil, c.p.refuse(where, key, "a forwarded agent connection (ssh -A) asked: the sandbox's agent signs only for its own ssh client")
	case c.host == nil:
		return nil, c.p.refuse(where, key, "the connection is bound to a host key that is no allowed host's (--ssh-agent)")
	}
	var req userAuthRequest
	if err := ssh.Unmarshal(data, &req); err != nil || req.Type != msgUserAuthRequest || !req.HasSig {
		return nil, c.p.refuse(where, key, "the data is not a user authentication request")
	}
	if !bytes.Equal(req.SessionID, c.sid) {
		return nil, c.p.refuse(where, key, "the request is for another session than the bound one")
	}
	if !bytes.Equal(req.PubKey, key.Marshal()) {
		return nil, c.p.refuse(where, key, "the request names another key than the one asked to sign")
	}
	switch req.Method {
	case methodPublicKey:
		if len(req.Rest) != 0 {
			return nil, c.p.refuse(where, key, "the data is not a user authentication request")
		}
	case methodHostbound:
		var hb struct {
			HostKey []byte
		}
		if err := ssh.Unmarshal(req.Rest, &hb); err != nil || !bytes.Equal(hb.HostKey, c.hostKey.Marshal()) {
			return nil, c.p.refuse(where, key, "the request names another host key than the bound one")
		}
	default:
		return nil, c.p.refuse(where, key, fmt.Sprintf("authentication method %q", req.Method))
	}
	if c.p.confirmOn {
		// --ssh-confirm: the ask mode asks a person first, and this
		// waits for the answer (or the ask timeout).
		s := Signature{Host: c.host.name, Port: c.host.port, Key: ssh.FingerprintSHA256(key), Client: c.client}
		if err := c.p.confirmSign(s); err != nil {
			return nil, c.p.refuse(where, key, err.Error())
		}
	}
	sig, err := c.backing.SignWithFlags(key, data, flags)
	if err != nil {
		return nil, err
	}
	c.p.countSigned(c.host, key)
	return sig, nil
}

func (c *conn) Extension(typ string, contents []byte) ([]byte, error) {
	if typ != SessionBind {
		return nil, agent.ErrExtensionUnsupported
	}
	var m sessionBindMsg
	if err := ssh.Unmarshal(contents, &m); err != nil {
		return nil, fmt.Errorf("session-bind: %v", err)
	}
	hk, err := ssh.ParsePublicKey(m.HostKey)
	if err != nil {
		return nil, fmt.Errorf("session-bind: host key: %v", err)
	}
	var sig ssh.Signature
	if err := ssh.Unmarshal(m.Signature, &sig); err != nil {
		return nil, fmt.Errorf("session-bind: signature: %v", err)
	}
	if err := hk.Verify(m.SessionID, &sig); err != nil {
		why := fmt.Sprintf("the host key %s did not sign the session identifier", ssh.FingerprintSHA256(hk))
		c.p.show("ssh-agent: refused a session-bind: " + why)
		c.p.event(Event{Host: "host key " + ssh.FingerprintSHA256(hk), Reason: "session-bind: " + why})
		return nil, fmt.Errorf("session-bind: bad signature: %v", err)
	}
	if c.authBound {
		// A connection bound for authentication is not bound again (a
		// client asks for one host's authentication per connection).
		return nil, errors.New("session-bind: the connection is already bound for an authentication")
	}
	if c.binds >= maxBinds {
		return nil, errors.New("session-bind: too many bindings")
	}
	c.binds++
	c.sid, c.hostKey, c.host = m.SessionID, hk, c.p.hostOf(hk)
	if m.Forwarding {
		c.forwarding = true
	} else {
		c.authBound = true
	}
	// The caller's agent may hold destination constraints of its own
	// (ssh-add -h): tell it too. One that does not know the extension
	// changes nothing here.
	_, _ = c.backing.Extension(typ, contents)
	return nil, nil
}

func (c *conn) Add(agent.AddedKey) error       { return errReadOnly }
func (c *conn) Remove(ssh.PublicKey) error     { return errReadOnly }
func (c *conn) RemoveAll() error               { return errReadOnly }
func (c *conn) Lock([]byte) error              { return errReadOnly }
func (c *conn) Unlock([]byte) error            { return errReadOnly }
func (c *conn) Signers() ([]ssh.Signer, error) { return nil, errReadOnly }
