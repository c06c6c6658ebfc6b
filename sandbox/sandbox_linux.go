package sandbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"io"
	"net/netip"
	"os"
	"os/user"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/control"
	"github.com/claude-sandbox/claude-sandbox/jail"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/sshagent"
)

// Init runs the sandbox stage this process was re-executed as, and never
// returns then; in any other process it returns at once. Call it as the
// first statement of main (see the package documentation).
func Init() { nsexec.Init() }

// Net is the sandbox's network.
type Net = plan.Net

const (
	// NetJail (the default) gives the command a private network whose
	// only way out is the egress jail: the internet is reachable; private
	// ranges, link-local and metadata addresses, loopback, multicast and
	// the host's own subnets are blocked, except what Spec.Allow lets
	// through. Blocked flows are reported as events.
	NetJail Net = plan.NetJail
	// NetNone gives the command an empty network namespace with only lo.
	NetNone Net = plan.NetNone
	// NetHost shares the host's network: no jail. On purpose only.
	NetHost Net = plan.NetHost
)

// Spec describes one sandboxed command.
type Spec struct {
	// Command is the program and its arguments. A name without a slash
	// is looked up inside the sandbox, in Env's PATH (or a default one).
	Command []string
	// Env is the command's whole environment, NAME=VALUE; nothing of
	// this process's environment is passed on unless listed here.
	Env []string
	// Dir is the working directory inside ("" is "/"); it must exist
	// there.
	Dir string
	// Mounts change the filesystem view, in order, after the base view:
	// the host's root read-only, a private /dev and /proc, an empty /tmp
	// (and Home), the host's sockets hidden. See [Bind], [ROBind], [DevBind],
	// [Tmpfs], [Mask] and [File].
	Mounts []Mount
	// Home gets an empty private tmpfs (as /tmp does). Unset, it is the
	// caller's home directory ($HOME, and the password database's entry
	// when that differs): the safe default keeps ~/.ssh and the rest of
	// the caller's files out. Bind what the command needs back in Mounts
	// (an explicit Bind over Home wins), or set Bare to keep the host's.
	Home string
	// Bare drops the default tmpfs over /tmp and Home.
	Bare bool
	// TmpfsSize is the size limit in bytes of each writable tmpfs inside:
	// 0 is the default, a quarter of the RAM shared among them.
	TmpfsSize int64
	// Hostname, when set, is the sandbox's own hostname.
	Hostname string
	// PidsLimit bounds the processes alive at once inside: 0 is the
	// default (4096), a negative value no bound.
	PidsLimit int

	// Net is the network ("" is NetJail).
	Net Net
	// Allow lets the jail reach these addresses or ranges, every port and
	// protocol (netip.PrefixFrom(addr, addr.BitLen()) for one address).
	Allow []netip.Prefix
	// HostPorts are ports of the host's loopback the command reaches
	// through the jail's gateway (Addresses().Gateway, named
	// host.internal in its /etc/hosts), as --allow-host-port does: a
	// connection to the gateway's port reaches 127.0.0.1 on the host.
	// Every other gateway port stays refused and reported. NetJail only.
	HostPorts []netpolicy.HostPort
	// Publish are ports of the command published on the host, as
	// --publish does: Start listens on each HostAddr:HostPort (failing
	// when one is in use) and relays every connection, or each client's
	// datagrams, to the command's Port at Addresses().Addr4 (the server
	// must listen there or on 0.0.0.0). The sockets close when the
	// sandbox ends. NetJail only.
	Publish []netpolicy.Publish
	// AllowDomains turns the jail's domain allowlist on: names
	// ("api.github.com"), wildcards ("*.githubusercontent.com", strict
	// subdomains), an optional ":PORT", or presets ("@github"), as the
	// CLI's --allow-domain. With any entry the internet is default-deny:
	// only these names, Allow's entries and DNS through the jail are
	// reachable. DenyDomains refuses names an allow entry matches (deny
	// wins); it needs AllowDomains.
	AllowDomains []string
	DenyDomains  []string

	// SSHAgent, when set, serves an SSH agent inside (SSH_AUTH_SOCK and
	// GIT_SSH_COMMAND set in the command's environment), backed by the
	// caller's agent, that signs only for its hosts (run's --ssh-agent).
	SSHAgent *SSHAgent

	// Stdin, Stdout and Stderr are the command's; nil is /dev/null. An
	// *os.File is passed as it is (a terminal gets a pty of its own in
	// the sandbox); anything else is copied through a pipe, and Wait
	// returns once the copies are done.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Clipboard lets the command write the host terminal's clipboard
	// (OSC 52) when Stdin is that terminal and its output goes there too.
	// Off (the default), those writes are dropped; when the terminal is
	// only its output, nothing that makes the terminal answer or touches
	// its clipboard reaches it either way (run's --osc52).
	Clipboard bool

	// OnEvent, when set, receives the sandbox's events in order, from one
	// goroutine of its own: blocked flows as they happen, then the exit,
	// always last. A slow OnEvent does not slow the sandbox (up to 4096
	// events wait; more blocked flows are counted, not queued). Wait
	// returns after the exit event was delivered, so OnEvent must not
	// call Wait.
	OnEvent func(Event)
	// Warn receives conditions that are reported but not refused (a
	// degraded /proc, a jail without DNS); nil drops them.
	Warn func(string)

	// AuditLog, when set, is a file the jail appends every flow decision
	// and reach change to, one JSON line each, as run's --audit-log
	// (created 0600; 16 MiB, then renamed AuditLog.1). NetJail only.
	AuditLog string
	// Ask turns the ask mode on (run's --ask; NetJail only): a flow the
	// jail would refuse (a name off AllowDomains, an internal address, a
	// host port) is held while a request for it is pending, reported as
	// an EventRequest whose Request.Approve or Request.Deny decides it
	// (claude-sandbox approve and deny can too, through the control
	// socket). A request no one answers is refused after AskTimeout
	// (0: 30 s).
	Ask        bool
	AskTimeout time.Duration
	// NoControl turns off the control socket every sandbox serves while
	// it runs (claude-sandbox ps, allow and revoke; [Sandbox.ID]).
	NoControl bool

	// StageExe is the binary re-executed as the sandbox's stages; empty
	// means this program. See the package documentation (cgo).
	StageExe string
}

// SSHAgent is the agent Spec.SSHAgent serves: it lists the backing
// agent's Keys (all when empty) and signs only a user authentication of
// an ssh connection bound by OpenSSH's session-bind@openssh.com to a host
// key of one of Hosts, found in KnownHosts or HostKeys. Every other
// signature is refused and reported through Spec.Warn;
// [Sandbox.SSHAgentSummary] counts them.
type SSHAgent struct {
	// Hosts are HOST or HOST:PORT (22 by default).
	Hosts []string
	// Keys are authorized_keys lines or SHA256: fingerprints.
	Keys []string
	// HostKeys are pinned host keys, "HOST KEYTYPE BASE64".
	HostKeys []string
	// KnownHosts are known_hosts files (nil: the caller's
	// ~/.ssh/known_hosts and known_hosts2).
	KnownHosts []string
	// KeyFiles are unencrypted private key files the launcher reads and
	// signs with in place of Backing (run's --ssh-key-file); a file the
	// sandbox would show is refused.
	KeyFiles []string
	// Backing is the caller's agent's socket ("": $SSH_AUTH_SOCK).
	Backing string
	// Confirm makes every signature the host policy allows a request of
	// the ask mode first (run's --ssh-confirm): an EventRequest whose
	// Request.Key is set; the signature waits for Approve (AskOnce:
	// this one; AskSession: that host and key's later ones too) or
	// Deny, or Spec.AskTimeout. It needs Spec.Ask and the jail.
	Confirm bool
}

// Mount is one change to the sandbox's filesystem view (package mounts
// documents each kind).
type Mount = mounts.Op

// Bind returns the mount operation that shows the host path src at dst,
// writable.
func Bind(src, dst string) Mount { return mounts.Op{Kind: mounts.Bind, Src: src, Dst: dst} }

// ROBind returns the mount operation that shows the host path src at dst,
// read-only.
func ROBind(src, dst string) Mount { return mounts.Op{Kind: mounts.ROBind, Src: src, Dst: dst} }

// DevBind returns the mount operation that shows the host device node
// src (or a directory below /dev of them, such as /dev/dri) at dst,
// usable: the one bind without nodev, read-only and nosuid (--dev-bind).
func DevBind(src, dst string) Mount { return mounts.Op{Kind: mounts.DevBind, Src: src, Dst: dst} }

// Tmpfs returns the mount operation that puts an empty writable tmpfs
// (mode 0755) at dst.
func Tmpfs(dst string) Mount { return mounts.Op{Kind: mounts.Tmpfs, Dst: dst} }

// Mask returns the mount operation that hides dst: /dev/null over a file,
// an empty read-only directory over a directory.
func Mask(dst string) Mount { return mounts.Op{Kind: mounts.Mask, Dst: dst} }

// File returns the mount operation that places a read-only file holding
// data at dst; nothing is written on the host.
func File(dst, data string) Mount {
	return mounts.Op{Kind: mounts.File, Dst: dst, Data: data, Mode: 0o444}
}

// Addresses are the egress jail's addresses, as the command sees them.
type Addresses struct {
	// Addr4 and Addr6 are the command's own (Addr6 is invalid when the
	// host has no IPv6 egress).
	Addr4, Addr6 netip.Prefix
	// Gateway is its default gateway, which answers ping and, when the
	// host's resolvers are loopback stubs, DNS.
	Gateway netip.Addr
}

// Sandbox is a started sandbox.
type Sandbox struct {
	pr    *nsexec.Process
	addrs Addresses
	ev    *eventQueue
	agent *sshagent.Server
	id    string
	jail  *jail.Jail

	done chan struct{}
	code int
	err  error
}

// Start builds the sandbox spec describes and starts its command. It
// returns once the command runs, or an error (the sandbox is then fully
// gone) when it could not be built or started. Cancelling ctx kills the
// sandbox; [Sandbox.Wait] then returns ctx's error.
func Start(ctx context.Context, spec Spec) (*Sandbox, error) {
	for _, a := range spec.Allow {
		if err := netpolicy.RefuseLoopback(a); err != nil {
			return nil, fmt.Errorf("sandbox: Allow: %w (Spec.HostPorts)", err)
		}
	}
	exe := spec.StageExe
	if exe == "" {
		exe = defaultStageExe
	}
	if exe == "" && !allThreadsSyscallWorks() {
		return nil, errors.New("sandbox: this program is built with cgo, which cannot drop privileges on every thread: build it with CGO_ENABLED=0, or set Spec.StageExe to a static binary whose main calls sandbox.Init()")
	}
	opts := plan.Options{
		Command:    spec.Command,
		Net:        spec.Net,
		Allow:      spec.Allow,
		HostPorts:  spec.HostPorts,
		Publish:    spec.Publish,
		Ops:        spec.Mounts,
		Bare:       spec.Bare,
		Chdir:      spec.Dir,
		Home:       spec.Home,
		TmpfsSize:  spec.TmpfsSize,
		Hostname:   spec.Hostname,
		PidsLimit:  spec.PidsLimit,
		UID:        os.Getuid(),
		GID:        os.Getgid(),
		HostRoot:   nsexec.CallerIsHostRoot(),
		RootCaller: os.Geteuid() == 0,
		Warn:       spec.Warn,
	}
	if opts.Home == "" && !spec.Bare {
		var extra []Mount
		opts.Home, extra = callerHomes()
		opts.Ops = append(extra, opts.Ops...)
	}
	// The jail parses and enforces them (PrepareNames below).
	opts.AllowDomains, opts.DenyDomains = spec.AllowDomains, spec.DenyDomains
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("sandbox: Env entry %q is not NAME=VALUE", kv)
		}
		opts.SetEnv = append(opts.SetEnv, [2]string{k, v})
	}
	warn := spec.Warn
	if warn == nil {
		warn = func(string) {}
	}
	s := &Sandbox{done: make(chan struct{}), ev: newEventQueue(spec.OnEvent), id: control.NewID()}
	if a := spec.SSHAgent; a != nil {
		files := a.KnownHosts
		if files == nil {
			home, _ := os.UserHomeDir()
			files = sshagent.KnownHostsFiles(home)
		}
		if a.Confirm && (!spec.Ask || (opts.Net != "" && opts.Net != plan.NetJail)) {
			return nil, errors.New("sandbox: SSHAgent.Confirm asks through the ask mode: it needs Spec.Ask (and the jail, Net NetJail)")
		}
		pol, err := sshagent.NewPolicy(sshagent.Config{Hosts: a.Hosts, Keys: a.Keys, HostKeys: a.HostKeys, KeyFiles: a.KeyFiles, KnownHosts: files, Report: warn, Confirm: a.Confirm})
		if err != nil {
			return nil, fmt.Errorf("sandbox: SSHAgent: %w", err)
		}
		backing := a.Backing
		if backing == "" {
			backing = os.Getenv("SSH_AUTH_SOCK")
		}
		if s.agent, err = sshagent.Listen(pol, backing); err != nil {
			return nil, fmt.Errorf("sandbox: SSHAgent: %w", err)
		}
		s.agent.Show(&opts)
	}
	nopts := nsexec.Options{TTY: nsexec.TTYAuto, Warn: warn, StageExe: exe}
	var setup *jail.Setup
	var jopts jail.Options
	// What Start opens (the agent, the published sockets, the audit log,
	// the control socket, the event queue's goroutine) is released here on
	// any failure; once the command runs, the waiter below releases it.
	var ctl *control.Server
	var st *stdio
	launched := false
	defer func() {
		if launched {
			return
		}
		for _, pb := range jopts.Publish {
			pb.Close() // a second Close does nothing
		}
		if ctl != nil {
			ctl.Close()
		}
		_ = jopts.Audit.Close()
		if st != nil {
			st.wait()
		}
		s.ev.close()
		if s.agent != nil {
			s.agent.Close()
		}
	}()
	if opts.Net == "" || opts.Net == plan.NetJail {
		facts, err := jail.DiscoverHost("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("sandbox: egress jail: read the host's network: %w", err)
		}
		if setup, err = jail.PrepareNames(facts, opts.Allow, opts.AllowDomains, opts.DenyDomains); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		for _, w := range setup.Warnings {
			warn(w)
		}
		opts.Late = append(opts.Late, setup.ResolvConf)
		if len(spec.HostPorts) > 0 {
			op, err := jail.HostHostsFile(setup.Gateway, spec.HostPorts)
			if err != nil {
				return nil, fmt.Errorf("sandbox: HostPorts: %w", err)
			}
			opts.Late = append(opts.Late, op)
		}
		s.addrs = Addresses{Addr4: setup.Addr4, Addr6: setup.Addr6, Gateway: setup.Gateway}
		jopts = jail.Options{OnBlock: s.ev.block, OnChange: s.ev.change, HostPorts: spec.HostPorts}
		if spec.Ask {
			jopts.Ask = &jail.AskOptions{Sandbox: s.id, Timeout: spec.AskTimeout, OnRequest: func(r ask.Request) { s.ev.request(s, r) }}
		}
	}
	p, err := plan.Build(opts)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if a := spec.SSHAgent; a != nil {
		for _, f := range a.KeyFiles {
			if at := p.ShownAt(f); len(at) > 0 {
				return nil, fmt.Errorf("sandbox: SSHAgent: key file %s would show inside the sandbox (at %s)", f, strings.Join(at, ", "))
			}
		}
	}
	if setup != nil {
		if len(p.Egress.Publish) > 0 {
			if jopts.Publish, err = jail.Listen(p.Egress.Publish); err != nil {
				return nil, fmt.Errorf("sandbox: %w", err)
			}
		}
		if spec.AuditLog != "" {
			a, err := jail.OpenAudit(spec.AuditLog, s.id, 0)
			if err != nil {
				return nil, fmt.Errorf("sandbox: AuditLog: %w", err)
			}
			jopts.Audit = a
			if s.agent != nil {
				s.agent.Policy.SetEvents(func(e sshagent.Event) {
					a.Write(jail.AuditRecord{Event: e.Name(), Host: e.Host, Key: e.Key, Reason: e.Reason})
				})
			}
		}
		s.jail = jail.New(setup, jopts)
		nopts.Jail = s.jail
		if s.agent != nil {
			// Only this sandbox's processes use its agent.
			s.agent.SetSandboxNS(s.jail.SandboxUserNS)
		}
		if s.agent != nil && spec.SSHAgent.Confirm {
			s.agent.Policy.SetConfirm(sshagent.ConfirmBy(s.jail.Asks()))
		}
	}
	if spec.Ask && setup == nil {
		warn("Ask holds what the egress jail refuses: without the jail (Net " + string(spec.Net) + ") nothing is held")
	}
	if spec.AuditLog != "" && setup == nil {
		warn("AuditLog records the egress jail's decisions: without the jail (Net " + string(spec.Net) + ") nothing is recorded")
	}
	if !spec.NoControl {
		l := &control.Launcher{ID: s.id, Command: spec.Command, Cwd: p.Dir, Net: string(spec.Net), Started: time.Now(), Jail: s.jail}
		if ctl, err = l.Serve(); err != nil {
			warn(fmt.Sprintf("no control socket (claude-sandbox ps, allow and revoke will not see this sandbox): %v", err))
		}
	}
	std, err := newStdio(spec.Stdin, spec.Stdout, spec.Stderr)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err) // newStdio has closed what it opened
	}
	st = std // waited for on a failure from here
	nopts.Stdin, nopts.Stdout, nopts.Stderr = st.files[0], st.files[1], st.files[2]
	nopts.Clipboard = spec.Clipboard
	pr, err := nsexec.Start(ctx, p, nopts)
	st.started()
	if err != nil {
		return nil, err
	}
	s.pr, launched = pr, true
	go func() {
		s.code, s.err = pr.Wait()
		if s.agent != nil {
			s.agent.Close()
		}
		if ctl != nil {
			ctl.Close()
		}
		_ = jopts.Audit.Close()
		st.wait()
		s.ev.exit(s.code, s.err)
		s.ev.close()
		close(s.done)
	}()
	return s, nil
}

// Wait waits until the command has ended and the whole sandbox is gone
// (every process, mount and link of it), and the exit event delivered. It
// returns the command's exit status, 128+N when signal N killed it, or
// 125 with an error when the sandbox had to be stopped (its egress stack
// failed); after ctx was cancelled, ctx's error. It may be called more
// than once.
func (s *Sandbox) Wait() (int, error) {
	<-s.done
	return s.code, s.err
}

// Done is closed when Wait would return at once.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Signal sends sig to the command; SIGKILL kills the whole sandbox.
func (s *Sandbox) Signal(sig syscall.Signal) error { return s.pr.Signal(sig) }

// Kill kills the whole sandbox at once.
func (s *Sandbox) Kill() { s.pr.Kill() }

// PID is the command's pid in this process's PID namespace, or 0 once it
// has ended.
func (s *Sandbox) PID() int { return s.pr.CommandPID() }

// InitPID is the pid of the sandbox's init (its PID 1) in this process's
// PID namespace; the sandbox ends with it.
func (s *Sandbox) InitPID() int { return s.pr.InitPID() }

// Namespaces returns the inode number of each of the sandbox's namespaces
// (user, mnt, pid, net, ipc, uts, cgroup), as ls -i /proc/PID/ns shows
// them. Valid while the sandbox runs.
func (s *Sandbox) Namespaces() (map[string]uint64, error) { return s.pr.Namespaces() }

// SSHAgentSummary is the Spec.SSHAgent's count of signatures per host
// and refusals ("ssh-agent: signed 2 times for forge.test; refused 1
// (...)"), or "" without the agent or when nothing was asked of it.
func (s *Sandbox) SSHAgentSummary() string {
	if s.agent == nil {
		return ""
	}
	return s.agent.Policy.Summary()
}

// ID is the sandbox's id, as claude-sandbox ps lists it.
func (s *Sandbox) ID() string { return s.id }

// Allow lets the running sandbox reach addresses or CIDRs (ips, as
// Spec.Allow in text) and names (domains, as Spec.AllowDomains; the
// sandbox must have a domain allowlist), as claude-sandbox allow does: in
// force for the next flow once it returns. It returns the changes made.
func (s *Sandbox) Allow(ips, domains []string) ([]string, error) {
	if s.jail == nil {
		return nil, errors.New("sandbox: Allow: the sandbox has no egress jail")
	}
	return s.jail.ChangeReach(true, ips, domains)
}

// Revoke takes back entries allowed at the start or since (Allow).
func (s *Sandbox) Revoke(ips, domains []string) ([]string, error) {
	if s.jail == nil {
		return nil, errors.New("sandbox: Revoke: the sandbox has no egress jail")
	}
	return s.jail.ChangeReach(false, ips, domains)
}

// Addresses are the egress jail's addresses; zero without the jail.
func (s *Sandbox) Addresses() Addresses { return s.addrs }

// EventKind says what an Event reports.
type EventKind string

const (
	// EventBlocked: the jail refused a flow (Event.Block says which and
	// by what rule).
	EventBlocked EventKind = "blocked"
	// EventExit: the command ended and the sandbox is gone (Event.Code,
	// Event.Err as Wait returns them). Always the last event.
	EventExit EventKind = "exit"
	// EventPolicy: the jail's blocked set changed while the sandbox ran,
	// because the host gained or lost an address, a route or a link
	// (Event.Change says what is now blocked or unblocked, and why).
	EventPolicy EventKind = "policy"
	// EventRequest: in the ask mode (Spec.Ask), a flow the jail would
	// refuse is held (Event.Request says what it asks to reach; its
	// Approve or Deny decides).
	EventRequest EventKind = "request"
)

// Event is something that happened to a sandbox.
type Event struct {
	Kind EventKind
	// Block is the refused flow (EventBlocked): time, protocol,
	// destination and the rule that refused it, and the process behind
	// it when the jail found it (Block.PID, Argv, Cwd: its socket was
	// still open when looked up).
	Block netpolicy.Block
	// Change is the widening or narrowing of the blocked set
	// (EventPolicy): "blocked" or "unblocked", the prefix, the rule and
	// the host's change behind it.
	Change netpolicy.Change
	// Request is the pending request (EventRequest).
	Request *Request
	// Code and Err are the exit status and error (EventExit).
	Code int
	Err  error
	// Dropped counts the blocked flows and policy changes not reported because too many
	// events were waiting for OnEvent (EventExit).
	Dropped int
}

// eventQueue delivers events to OnEvent from a goroutine of its own.
type eventQueue struct {
	on      func(Event)
	mu      sync.Mutex
	cond    *sync.Cond
	q       []Event
	closed  bool
	ended   bool // the exit event is queued: later blocks are dropped
	dropped int
	done    chan struct{}
}

const maxPendingEvents = 4096

func newEventQueue(on func(Event)) *eventQueue {
	e := &eventQueue{on: on, done: make(chan struct{})}
	e.cond = sync.NewCond(&e.mu)
	if on == nil {
		close(e.done)
		return e
	}
	go e.run()
	return e
}

func (e *eventQueue) run() {
	defer close(e.done)
	for {
		e.mu.Lock()
		for len(e.q) == 0 && !e.closed {
			e.cond.Wait()
		}
		if len(e.q) == 0 {
			e.mu.Unlock()
			return
		}
		ev := e.q[0]
		e.q = e.q[1:]
		e.mu.Unlock()
		e.on(ev)
	}
}

func (e *eventQueue) push(ev Event, force bool) {
	if e.on == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.ended && !force {
		return
	}
	if !force && len(e.q) >= maxPendingEvents {
		e.dropped++
		return
	}
	e.q = append(e.q, ev)
	e.cond.Signal()
}

// request reports a new request; never dropped (the pending requests
// are capped, 64).
func (e *eventQueue) request(s *Sandbox, r ask.Request) {
	e.push(Event{Kind: EventRequest, Request: &Request{
		ID: r.ID, Proto: r.Proto, Name: r.Name, Addr: r.Addr, Port: r.Port, HostPort: r.Kind == "host-port", Key: r.Key,
		Since: r.Since, Expires: r.Expires, s: s,
	}}, true)
}

func (e *eventQueue) block(b netpolicy.Block) { e.push(Event{Kind: EventBlocked, Block: b}, false) }

func (e *eventQueue) change(c netpolicy.Change) {
	e.push(Event{Kind: EventPolicy, Change: c}, false)
}

func (e *eventQueue) exit(code int, err error) {
	e.mu.Lock()
	dropped := e.dropped
	e.mu.Unlock()
	e.push(Event{Kind: EventExit, Code: code, Err: err, Dropped: dropped}, true)
	e.mu.Lock()
	e.ended = true
	e.mu.Unlock()
}

// close ends the queue once its events are delivered, and waits for that.
func (e *eventQueue) close() {
	e.mu.Lock()
	e.closed = true
	e.ended = true
	e.cond.Signal()
	e.mu.Unlock()
	<-e.done
}

// stdio holds the command's descriptors: the caller's files, /dev/null,
// or pipes copied to and from the caller's readers and writers.
type stdio struct {
	files  [3]*os.File
	child  []*os.File // ends to close once the sandbox holds them
	copies sync.WaitGroup
}

func newStdio(in io.Reader, out, errw io.Writer) (st *stdio, err error) {
	st = &stdio{}
	defer func() {
		if err != nil {
			st.started()
		}
	}()
	null := func() (*os.File, error) {
		f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err == nil {
			st.child = append(st.child, f)
		}
		return f, err
	}
	switch r := in.(type) {
	case nil:
		if st.files[0], err = null(); err != nil {
			return st, err
		}
	case *os.File:
		st.files[0] = r
	default:
		pr, pw, err := os.Pipe()
		if err != nil {
			return st, err
		}
		st.files[0] = pr
		st.child = append(st.child, pr)
		// Not waited for: the reader may never end (as with os/exec).
		go func() {
			_, _ = io.Copy(pw, r)
			pw.Close()
		}()
	}
	for i, w := range []io.Writer{out, errw} {
		switch w := w.(type) {
		case nil:
			if st.files[i+1], err = null(); err != nil {
				return st, err
			}
		case *os.File:
			st.files[i+1] = w
		default:
			pr, pw, err := os.Pipe()
			if err != nil {
				return st, err
			}
			st.files[i+1] = pw
			st.child = append(st.child, pw)
			st.copies.Add(1)
			go func() {
				defer st.copies.Done()
				_, _ = io.Copy(w, pr)
				pr.Close()
			}()
		}
	}
	return st, nil
}

// started closes this process's copies of the sandbox's ends.
func (st *stdio) started() {
	for _, f := range st.child {
		f.Close()
	}
	st.child = nil
}

// wait waits for the output copies to reach their end.
func (st *stdio) wait() { st.copies.Wait() }

// defaultStageExe replaces this program as the stage binary (tests).
var defaultStageExe string

// allThreadsSyscallWorks reports whether this binary can drop privileges
// on every thread (it cannot when built with cgo).
func allThreadsSyscallWorks() bool {
	_, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0)
	return e != syscall.ENOTSUP
}

// callerHomes returns the caller's home directory ($HOME, else the
// password database's) for Spec's default Home, and an empty tmpfs over
// the password database's home when it is another directory.
func callerHomes() (string, []Mount) {
	env := os.Getenv("HOME")
	var db string
	if u, err := user.Current(); err == nil {
		db = u.HomeDir
	}
	if env == "" || env == "/" {
		return db, nil
	}
	if db != "" && db != "/" && path.Clean(db) != path.Clean(env) {
		if fi, err := os.Stat(db); err == nil && fi.IsDir() {
			return env, []Mount{{Kind: mounts.Tmpfs, Dst: path.Clean(db), Mode: 0o700}}
		}
	}
	return env, nil
}

// Request is a flow the jail holds in the ask mode (EventRequest): what
// it asks to reach. Approve or Deny decides it; a request no one answers
// is refused after Spec.AskTimeout.
type Request struct {
	ID    int
	Proto string // "tcp", "udp"; "ssh" for a signature (Key)
	// Name is the name asked for (a name off AllowDomains); Addr the
	// address otherwise; HostPort: Port is a port of the host's loopback.
	Name     string
	Addr     string
	Port     uint16
	HostPort bool
	// Key is set for a signature of the SSH agent (SSHAgent.Confirm):
	// the user key's SHA256 fingerprint; Proto is "ssh", Name and Port
	// the allowed host's. Approve changes no reach then.
	Key     string
	Since   time.Time
	Expires time.Time

	s *Sandbox
}

// AskScope is how far an approval reaches.
type AskScope int

const (
	// AskOnce: only the flows held for the request go.
	AskOnce AskScope = iota + 1
	// AskSession: the destination joins the sandbox's reach for its life
	// (as claude-sandbox allow).
	AskSession
)

// Approve lets the held flows go, and for AskSession every later flow
// to the destination.
func (r *Request) Approve(scope AskScope) error {
	b := r.broker()
	if b == nil {
		return errors.New("sandbox: the ask mode is off")
	}
	sc := ask.Session
	if scope == AskOnce {
		sc = ask.Once
	}
	_, err := b.Approve(r.ID, sc)
	return err
}

// Deny refuses the held flows and every later one to the destination.
func (r *Request) Deny() error {
	b := r.broker()
	if b == nil {
		return errors.New("sandbox: the ask mode is off")
	}
	_, err := b.Deny(r.ID)
	return err
}

func (r *Request) broker() *ask.Broker {
	if r == nil || r.s == nil || r.s.jail == nil {
		return nil
	}
	return r.s.jail.Asks()
}
