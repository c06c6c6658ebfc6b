package sshagent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/flowowner"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
	"golang.org/x/crypto/ssh/agent"
)

// Paths inside the sandbox.
const (
	// InsideDir holds the agent's socket and ssh's files inside (below
	// /run, which is a private tmpfs in the sandbox).
	InsideDir = "/run/claude-sandbox"
	// InsideSocket is SSH_AUTH_SOCK inside.
	InsideSocket = InsideDir + "/ssh-agent.sock"
	// InsideKnownHosts holds exactly the allowed hosts' keys.
	InsideKnownHosts = InsideDir + "/ssh_known_hosts"
	// InsideConfig is an ssh_config that uses InsideKnownHosts and the
	// agent, and never asks about a host key (GIT_SSH_COMMAND names it).
	InsideConfig = InsideDir + "/ssh_config"
)

// SSHConfig is InsideConfig's contents.
const SSHConfig = `# claude-sandbox --ssh-agent: the hosts' keys are known, nothing else is.
Host *
	UserKnownHostsFile ` + InsideKnownHosts + `
	GlobalKnownHostsFile /dev/null
	StrictHostKeyChecking yes
	UpdateHostKeys no
	IdentityAgent ` + InsideSocket + `
	IdentitiesOnly no
	BatchMode yes
`

// GitSSHCommand is GIT_SSH_COMMAND inside.
const GitSSHCommand = "ssh -F " + InsideConfig

// Server serves the policy's agent on a socket in a private directory of
// the host, for the sandbox to reach through a bind mount.
type Server struct {
	Policy *Policy
	// Socket is the host path of the listening socket.
	Socket string

	dir     string
	ln      *net.UnixListener
	backing string
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
	over    int // connections closed at MaxConns
	closed  bool
	// sandboxNS, when set, names the user namespace the peers must be
	// in (SetSandboxNS).
	sandboxNS func() string
}

// SetSandboxNS makes the agent serve only peers in the user namespace f
// names (readlink /proc/PID/ns/user of the sandbox's init; "" while it
// is not known, when every peer is refused) or in one nested in it (see
// inUserNS). The socket's directory is in the host's $TMPDIR: a sandbox
// that sees it (--bind /tmp) reaches the sockets of launchers started
// after it, and each sandbox has a user namespace of its own.
func (s *Server) SetSandboxNS(f func() string) {
	s.mu.Lock()
	s.sandboxNS = f
	s.mu.Unlock()
}

// peerAllowed reports whether c's peer may use the agent.
func (s *Server) peerAllowed(c net.Conn) bool {
	s.mu.Lock()
	f := s.sandboxNS
	s.mu.Unlock()
	if f == nil {
		return true
	}
	want := f()
	pid := peerPID(c)
	if want == "" || pid <= 0 {
		return false
	}
	return inUserNS(pid, want)
}

// inUserNS reports whether pid's user namespace is want (as readlink
// names it) or one nested in it: a tool of the sandbox that makes a user
// namespace of its own (unshare, bwrap, a nested sandbox) is still the
// sandbox, and no other sandbox's process can enter a namespace nested
// in it (setns into a user namespace needs capabilities there, which
// only processes of the sandbox and the caller's own on the host hold). The parents are asked of the
// kernel (NS_GET_PARENT) up to the launcher's own namespace, past which
// it refuses (EPERM); namespaces nest at most 32 deep.
func inUserNS(pid int, want string) bool {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	for range 33 {
		got, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err == nil && got == want {
			unix.Close(fd)
			return true
		}
		parent, err := unix.IoctlRetInt(fd, unix.NS_GET_PARENT)
		unix.Close(fd)
		if err != nil {
			return false
		}
		fd = parent
	}
	unix.Close(fd)
	return false
}

// MaxConns bounds the sandbox's connections to the agent open at once
// (ssh and git use one per ssh connection; each holds a connection to
// the caller's agent).
const MaxConns = 64

// Listen creates a private (0700) directory and listens on a socket in
// it; each connection is served by p's agent over a connection of its own
// to the backing agent's socket (the caller's SSH_AUTH_SOCK), or over the
// key files' keys when p has some (backing is not used then).
func Listen(p *Policy, backing string) (*Server, error) {
	if p.keyring != nil {
		backing = ""
	} else if backing == "" {
		return nil, errors.New("ssh-agent: SSH_AUTH_SOCK is not set: start an agent (ssh-agent) and add the key (ssh-add)")
	}
	if backing != "" {
		c, err := net.Dial("unix", backing)
		if err != nil {
			return nil, fmt.Errorf("ssh-agent: the caller's agent (SSH_AUTH_SOCK): %v", err)
		}
		c.Close()
	}
	dir, err := os.MkdirTemp("", "claude-sandbox-ssh-")
	if err != nil {
		return nil, fmt.Errorf("ssh-agent: %v", err)
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("ssh-agent: %v", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("ssh-agent: %v", err)
	}
	s := &Server{Policy: p, Socket: sock, dir: dir, ln: ln, backing: backing, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if len(s.conns) >= MaxConns {
			// Each connection holds one to the caller's own agent (or
			// a goroutine, for the key files): a session must not
			// hold that agent's descriptors, or the launcher's,
			// without end.
			s.over++
			over := s.over
			s.mu.Unlock()
			c.Close()
			if over == 1 {
				s.Policy.report(fmt.Sprintf("ssh-agent: more than %d connections at once: the next ones are closed", MaxConns))
			}
			continue
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			if !s.peerAllowed(c) {
				s.Policy.show("ssh-agent: refused a connection from outside this sandbox (another user namespace: another sandbox that sees the host's temporary directory)")
				return
			}
			var client *Client
			if s.Policy.confirmOn {
				client = peerClient(c)
			}
			if kr := s.Policy.keyring; kr != nil {
				_ = agent.ServeAgent(s.Policy.agentFor(kr, client), c)
				return
			}
			b, err := net.Dial("unix", s.backing)
			if err != nil {
				s.Policy.report(fmt.Sprintf("ssh-agent: the caller's agent: %v", err))
				return
			}
			defer b.Close()
			_ = agent.ServeAgent(s.Policy.agentFor(agent.NewClient(b), client), c)
		}()
	}
}

// Close stops listening, ends the connections and removes the directory.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	os.RemoveAll(s.dir)
}

// Files are the read-only files placed inside: the known_hosts with
// exactly the allowed hosts' keys, and the ssh_config that uses it.
func (s *Server) Files() []mounts.Op {
	return []mounts.Op{
		{Kind: mounts.File, Dst: InsideKnownHosts, Data: s.Policy.KnownHosts(), Mode: 0o444},
		{Kind: mounts.File, Dst: InsideConfig, Data: SSHConfig, Mode: 0o444},
	}
}

// Bind is the bind of the agent's socket at InsideSocket; it must come
// after the view's socket masks (plan.Options.Served).
func (s *Server) Bind() mounts.Op {
	return mounts.Op{Kind: mounts.Bind, Src: s.Socket, Dst: InsideSocket}
}

// Env is the environment that points ssh and git at the agent and the
// files inside.
func (s *Server) Env() [][2]string {
	return [][2]string{{"SSH_AUTH_SOCK", InsideSocket}, {"GIT_SSH_COMMAND", GitSSHCommand}}
}

// Show adds to opts what shows the agent inside: the socket's bind
// (after the view's socket masks), the known_hosts and ssh_config files,
// the environment (after the caller's own: the caller's SSH_AUTH_SOCK
// never reaches the command), and, under a jail's domain allowlist, each
// host's port (on a copy: the caller's list is left as it was).
func (s *Server) Show(opts *plan.Options) {
	opts.Late = append(opts.Late, s.Files()...)
	opts.Served = append(opts.Served, s.Bind())
	opts.SetEnv = append(opts.SetEnv, s.Env()...)
	if (opts.Net == "" || opts.Net == plan.NetJail) && len(opts.AllowDomains) > 0 {
		opts.AllowDomains = append(slices.Clone(opts.AllowDomains), s.Policy.Endpoints()...)
	}
}

// ConfirmBy is Confirm's hook for the ask mode's broker b: each signature
// the policy allows is an ssh-sign request of b, with the client when
// known, and waits for its answer. With no broker, every one is refused.
func ConfirmBy(b *ask.Broker) func(Signature) error {
	return func(s Signature) error {
		if b == nil {
			return errors.New("the ask mode is off")
		}
		q := ask.Sign{Host: s.Host, Port: uint16(s.Port), Key: s.Key}
		if c := s.Client; c != nil {
			q.Who = &ask.Process{PID: c.PID, Argv: c.Argv}
		}
		return b.ConfirmSign(q)
	}
}

// peerClient finds the process at the other end of c from its peer
// credentials: the pid SO_PEERCRED gives is in this process's pid
// namespace (the host's, for the launcher); NSpid maps it to the
// sandbox's. nil when it cannot be read (the process has gone).
func peerClient(c net.Conn) *Client {
	pid := peerPID(c)
	if pid <= 0 {
		return nil
	}
	return procClient(pid)
}

// peerPID is c's peer's pid (SO_PEERCRED) in this process's pid
// namespace; 0 when unknown.
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil || cred.Pid <= 0 {
		return 0
	}
	return int(cred.Pid)
}

// procClient reads pid's innermost pid from /proc/PID/status, and its
// command line as flowowner.Describe reads a flow's process's: a bounded
// read, each argument cut and escaped (the client writes its own argv).
func procClient(pid int) *Client {
	p := strconv.Itoa(pid)
	proc, err := unix.Open("/proc", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(proc)
	st, err := os.ReadFile("/proc/" + p + "/status")
	if err != nil {
		return nil
	}
	cl := &Client{PID: pid, Argv: flowowner.Describe(proc, pid).Argv}
	// NSpid lists the pid from this process's namespace down: the
	// sandbox's is one level below the launcher's (init is cloned with
	// CLONE_NEWPID from the holder, which has none of its own), so its pid
	// there is the second field. Not the innermost: a client that put
	// itself in a pid namespace of its own inside would be named by a pid
	// of that namespace (1, init's) instead of the one ps inside shows.
	for _, line := range strings.Split(string(st), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(rest); len(f) > 1 {
				if n, err := strconv.Atoi(f[1]); err == nil {
					cl.PID = n
				}
			}
		}
	}
	return cl
}
