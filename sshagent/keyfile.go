package sshagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/claude-sandbox/claude-sandbox/internal/beneath"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// maxKeyFile bounds a private key file (an RSA key of 16384 bits is 13
// KiB in OpenSSH's format).
const maxKeyFile = 64 << 10

// LoadKeyFile reads an unencrypted private key file (OpenSSH's format, or
// PEM) for the launcher's own agent (ssh-key-file, --ssh-key-file): the
// key is held in the launcher's memory only. As ssh does, a file that its
// group or others may read is refused; an encrypted one is refused too
// (the launcher asks no passphrase: ssh-add puts it in the caller's agent,
// which --ssh-agent then uses).
func LoadKeyFile(path string) (agent.AddedKey, error) {
	// The mode is looked at without opening the file (a FIFO named here
	// is refused, not waited on); beneath.ReadFile then opens it without
	// blocking, refuses anything but a regular file on that descriptor,
	// and reads it only within the bound.
	st, err := os.Stat(path)
	if err != nil {
		return agent.AddedKey{}, fmt.Errorf("ssh-key-file: %v", err)
	}
	if !st.Mode().IsRegular() {
		return agent.AddedKey{}, fmt.Errorf("ssh-key-file %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return agent.AddedKey{}, fmt.Errorf("ssh-key-file %s: mode %04o lets its group or others read it; as ssh, the key is refused (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	b, err := beneath.ReadFile(path, ".", maxKeyFile)
	var tl *beneath.TooLargeError
	if errors.As(err, &tl) {
		return agent.AddedKey{}, fmt.Errorf("ssh-key-file %s: larger than %d KiB: not a private key", path, maxKeyFile>>10)
	}
	if err != nil {
		return agent.AddedKey{}, fmt.Errorf("ssh-key-file %s: %v", path, err)
	}
	defer clear(b)
	k, err := ssh.ParseRawPrivateKey(b)
	var pm *ssh.PassphraseMissingError
	if errors.As(err, &pm) {
		return agent.AddedKey{}, fmt.Errorf("ssh-key-file %s: the key is encrypted (a passphrase), and the launcher asks none: add it to your agent (ssh-add %s) and use --ssh-agent without ssh-key-file", path, path)
	}
	if err != nil {
		return agent.AddedKey{}, fmt.Errorf("ssh-key-file %s: not a private key: %v", path, err)
	}
	return agent.AddedKey{PrivateKey: k, Comment: filepath.Base(path)}, nil
}

// keyring is an agent holding the key files' keys, in place of the
// caller's agent.
func keyring(files []string) (agent.ExtendedAgent, error) {
	kr := agent.NewKeyring()
	for _, f := range files {
		k, err := LoadKeyFile(f)
		if err != nil {
			return nil, err
		}
		if err := kr.Add(k); err != nil {
			return nil, fmt.Errorf("ssh-key-file %s: %v", f, err)
		}
	}
	return kr.(agent.ExtendedAgent), nil
}
