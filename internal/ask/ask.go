// Package ask is the ask mode's broker (--ask, issue 31): a flow the
// jail's policy would refuse is held instead while a person decides, and
// the decision (approve once, for the session, or deny; or the timeout)
// is what the held flow then meets.
//
// The broker knows nothing of packets. Whoever refuses a flow (the
// userstack for names, gateway ports and addresses it sees; the jail's
// sink for internal addresses the kernel routes there) calls [Broker.Ask]
// with the destination and the sandbox's source address and port, and a
// Retry function that re-delivers the held packet (a copy of the SYN, or
// nothing). Ask answers at once, never waiting:
//
//   - Hold: drop the packet silently. The sandbox's TCP retransmits its
//     SYN (1 s, 3 s, 7 s, 15 s, 31 s, 63 s after the first under Linux's
//     defaults: a connect waits about two minutes), a UDP client sends
//     again; each comes back here and is held again while the request is
//     pending.
//   - Pass: let it through although the policy refuses it (approved
//     --once: only the flows held for that destination, by their source
//     port).
//   - Refuse: refuse it the normal way (RST, ICMP unreachable): denied,
//     timed out, or beyond the cap of pending requests.
//
// A destination is (protocol, name or address, port). One request per
// destination is pending at a time; every flow to it meanwhile joins that
// request. Once it is decided, Retry is called for each held flow so it
// meets the decision at once rather than at its next retransmission.
//
// Bounds: at most MaxPending requests per sandbox (more are refused at
// once and counted), at most maxHeldPerRequest flows held per request
// (more are held without a Retry: their own retransmission finds the
// decision), and decisions for held flows are kept for decidedTTL.
package ask

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Verdict is what Ask says to do with a flow.
type Verdict uint8

const (
	// Refuse: refuse the flow as the policy would have.
	Refuse Verdict = iota
	// Hold: drop the packet silently; the sandbox retries.
	Hold
	// Pass: let the flow through (approved once).
	Pass
)

func (v Verdict) String() string {
	switch v {
	case Hold:
		return "hold"
	case Pass:
		return "pass"
	}
	return "refuse"
}

// Scope is how far an approval reaches.
type Scope uint8

const (
	// Once: only the flows held for the destination go.
	Once Scope = iota + 1
	// Session: the destination joins the sandbox's reach for its life.
	Session
	// Always: Session, and stored for the workspace's later sandboxes
	// (the CLI's approvals store).
	Always
)

// ParseScope reads "once", "session" or "always".
func ParseScope(s string) (Scope, error) {
	switch s {
	case "once":
		return Once, nil
	case "session", "":
		return Session, nil
	case "always":
		return Always, nil
	}
	return 0, fmt.Errorf("unknown scope %q (once, session or always)", s)
}

func (s Scope) String() string {
	switch s {
	case Once:
		return "once"
	case Session:
		return "session"
	case Always:
		return "always"
	}
	return "?"
}

// Process is the process behind a flow, when it can be found (the seam
// for the sock_diag lookup: nil until then).
type Process struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
}

// A request's process, as the broker keeps it: every pending request is
// in each listing (requests, watch's polls), and the process's command
// line and working directory are the session's text (the lookup keeps
// up to 64 arguments of 512 bytes each, escaped: tens of KiB a request).
// The audit log's records have the lookup's whole answer.
const (
	maxWhoArgv = 1024 // bytes of the arguments kept
	maxWhoCwd  = 512  // bytes of the working directory kept
)

// boundWho returns p cut to maxWhoArgv bytes of arguments (the one that
// crosses it cut, "..." after it) and maxWhoCwd of working directory.
func boundWho(p *Process) *Process {
	if p == nil {
		return nil
	}
	q := &Process{PID: p.PID, Cwd: p.Cwd}
	if len(q.Cwd) > maxWhoCwd {
		q.Cwd = q.Cwd[:maxWhoCwd] + "..."
	}
	n := 0
	for _, a := range p.Argv {
		if n+len(a) > maxWhoArgv {
			q.Argv = append(q.Argv, a[:maxWhoArgv-n]+"...")
			break
		}
		q.Argv = append(q.Argv, a)
		n += len(a)
	}
	return q
}

// Flow is a flow the policy refused, as its refuser saw it.
type Flow struct {
	Proto netpolicy.Proto
	// Name is the name of a flow to a name (its destination address is
	// then a synthetic one, not shown).
	Name string
	// Dst is the destination address and port the sandbox addressed.
	Dst netip.AddrPort
	// HostPort: Dst is the gateway, the port one of the host's loopback.
	HostPort bool
	// Src is the sandbox's address and port (which flow is held).
	Src netip.AddrPort
	// Who is the process behind the flow, when known.
	Who *Process
	// Retry re-delivers the held packet (nil: nothing to re-deliver).
	// Called on a goroutine of its own, once, after the decision.
	Retry func()
	// Drop, when set, is called instead when Retry never will be (the
	// flow joined a request it is held for already, or none keeps it):
	// the refuser frees what Retry held.
	Drop func()
}

// Request is a pending request, as requests lists it.
type Request struct {
	ID      int    `json:"id"`
	Sandbox string `json:"sandbox"`
	Proto   string `json:"proto"`
	Name    string `json:"name,omitempty"`
	Addr    string `json:"addr,omitempty"` // the gateway, for a host port
	Port    uint16 `json:"port"`
	Kind    string `json:"kind"` // "name", "address", "host-port", "ssh-sign"
	// Key is the user key's SHA256 fingerprint of an ssh-sign request
	// (its Name and Port are the allowed host's; Proto is "ssh").
	Key     string    `json:"key,omitempty"`
	Who     *Process  `json:"who,omitempty"`
	Since   time.Time `json:"since"`
	Expires time.Time `json:"expires"`
	Held    int       `json:"held"` // flows held for it
}

// What is the request's destination, as a person reads it.
func (r Request) What() string {
	host := r.Name
	switch {
	case r.Kind == KindSSHSign:
		if r.Port != 22 {
			host = "[" + host + "]:" + strconv.Itoa(int(r.Port))
		}
		return "signature for " + host + " with key " + r.Key
	case r.Kind == "host-port":
		host = "the host's port"
		return fmt.Sprintf("%s %d/%s", host, r.Port, r.Proto)
	case host == "":
		host = r.Addr
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	s := host + ":" + strconv.Itoa(int(r.Port))
	if r.Proto != "tcp" {
		s += "/" + r.Proto
	}
	return s
}

// Decision is what was decided on a request: for the approver hook and
// the audit.
type Decision struct {
	Request Request
	// Approved; Scope says how far.
	Approved bool
	Scope    Scope
	// Expired: no one answered in time (Approved false).
	Expired bool
}

// Config configures a Broker.
type Config struct {
	// Sandbox is the sandbox's id, named in each request.
	Sandbox string
	// Timeout is how long a request waits for an answer; 0:
	// DefaultTimeout.
	Timeout time.Duration
	// MaxPending caps the pending requests; 0: DefaultMaxPending.
	MaxPending int
	// Approve puts an approval in force before the held flows are let
	// go (the jail: a live allow for Session; for Once what a refuser
	// cannot pass by itself). An error leaves the request pending.
	Approve func(Decision) error
	// OnRequest is told of each new request (the terminal's notice, the
	// embedder's event): called from Ask, on the refuser's packet path
	// (with Who set, from the lookup's goroutine), without the broker's
	// lock; it must not block. OnDecision is told
	// of each decision, from Approve, Deny or the timer.
	OnRequest  func(Request)
	OnDecision func(Decision)
	// Who, when set, names the process behind a new request's flow (the
	// jail's socket lookup): called once per request, on a goroutine of
	// its own (never on the caller's packet path), before OnRequest is
	// told of the request; nil when not found.
	Who func(Flow) *Process
	// AfterFunc runs f after d (time.AfterFunc; tests give their own).
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Now is time.Now (tests give their own).
	Now func() time.Time
}

// DefaultTimeout is how long a request waits for an answer.
const DefaultTimeout = 30 * time.Second

// DefaultMaxPending caps a sandbox's pending requests.
const DefaultMaxPending = 64

// maxHeldPerRequest bounds the flows whose Retry a request keeps.
const maxHeldPerRequest = 32

// decidedTTL is how long the decision for a held flow is kept: past the
// sandbox's last SYN retransmission (Linux gives up after about 127 s).
const decidedTTL = 3 * time.Minute

// maxDecided bounds the decisions kept for held flows and the denied
// destinations.
const maxDecided = 4096

type destKey struct {
	sign     string // an ssh-sign request: the key's fingerprint
	proto    netpolicy.Proto
	name     string
	addr     netip.Addr
	port     uint16
	hostPort bool
}

type srcKey struct {
	dest destKey
	src  netip.AddrPort
}

type decided struct {
	v     Verdict
	until time.Time
}

type entry struct {
	// done is closed when an ssh-sign request is decided; v is then
	// the decision (Pass: approved).
	done chan struct{}
	v    Verdict
	why  error
	// scope is how far an approved ssh-sign request reaches (set
	// before done is closed).
	scope Scope
	req   Request
	key   destKey
	held  map[netip.AddrPort]func()
	stop  func() bool
}

// Broker holds and decides a sandbox's requests. Safe for concurrent use.
type Broker struct {
	cfg Config

	mu       sync.Mutex
	next     int
	closed   bool
	pending  map[destKey]*entry
	byID     map[int]*entry
	flows    map[srcKey]decided   // held flows' decisions
	denied   map[destKey]struct{} // refused without asking (deny)
	overflow int                  // refused at the cap
	asked    int                  // requests made
	signOK   map[destKey]struct{} // ssh signatures approved for the session
}

// New returns a broker.
func New(cfg Config) *Broker {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Broker{
		cfg: cfg, pending: map[destKey]*entry{}, byID: map[int]*entry{},
		flows: map[srcKey]decided{}, denied: map[destKey]struct{}{},
		signOK: map[destKey]struct{}{},
	}
}

// Timeout returns how long a request waits.
func (b *Broker) Timeout() time.Duration { return b.cfg.Timeout }

func keyOf(f Flow) destKey {
	k := destKey{proto: f.Proto, name: f.Name, port: f.Dst.Port(), hostPort: f.HostPort}
	if f.Name == "" {
		k.addr = f.Dst.Addr().Unmap()
	}
	return k
}

// Ask decides a flow the policy refused. It never blocks.
func (b *Broker) Ask(f Flow) Verdict {
	kept := false
	defer func() {
		if !kept && f.Drop != nil {
			f.Drop()
		}
	}()
	k := keyOf(f)
	now := b.cfg.Now()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return Refuse
	}
	if d, ok := b.flows[srcKey{k, f.Src}]; ok {
		if now.Before(d.until) {
			if d.v == Pass && f.Proto == netpolicy.ProtoTCP {
				// Once: this flow, once (its retransmitted SYNs meet
				// the flow it made). A UDP socket keeps its pass
				// until decidedTTL: its first datagram may be dropped
				// while its name resolves, and the mapping it makes
				// admits the rest.
				delete(b.flows, srcKey{k, f.Src})
			}
			b.mu.Unlock()
			return d.v
		}
		delete(b.flows, srcKey{k, f.Src})
	}
	if _, ok := b.denied[k]; ok {
		b.mu.Unlock()
		return Refuse
	}
	if e := b.pending[k]; e != nil {
		if _, ok := e.held[f.Src]; !ok {
			if len(e.held) < maxHeldPerRequest {
				e.held[f.Src] = f.Retry
				kept = true
			}
			e.req.Held++
		}
		b.mu.Unlock()
		return Hold
	}
	if len(b.pending) >= b.cfg.MaxPending {
		b.overflow++
		b.mu.Unlock()
		return Refuse
	}
	e := &entry{key: k, held: map[netip.AddrPort]func(){f.Src: f.Retry}}
	kept = true
	e.req = Request{Proto: f.Proto.String(), Name: f.Name, Port: f.Dst.Port(), Who: boundWho(f.Who)}
	switch {
	case f.HostPort:
		e.req.Kind = "host-port"
		e.req.Addr = k.addr.String() // the gateway
	case f.Name != "":
		e.req.Kind = "name"
	default:
		e.req.Kind = "address"
		e.req.Addr = k.addr.String()
	}
	req := b.openLocked(e, now)
	b.mu.Unlock()
	if req.Who == nil && b.cfg.Who != nil {
		// The lookup (system calls, a /proc scan) runs off the caller's
		// packet path; OnRequest is told once it is done.
		go b.fillWho(e, f, req)
		return Hold
	}
	if b.cfg.OnRequest != nil {
		b.cfg.OnRequest(req)
	}
	return Hold
}

// openLocked makes e (its key, kind and destination set) a new pending
// request: its number, sandbox, times and count filled in, its timer
// armed. b.mu is held.
func (b *Broker) openLocked(e *entry, now time.Time) Request {
	b.next++
	b.asked++
	e.req.ID, e.req.Sandbox = b.next, b.cfg.Sandbox
	e.req.Since, e.req.Expires, e.req.Held = now, now.Add(b.cfg.Timeout), 1
	b.pending[e.key] = e
	b.byID[e.req.ID] = e
	id := e.req.ID
	e.stop = b.cfg.AfterFunc(b.cfg.Timeout, func() { b.expire(id) })
	return e.req
}

// fillWho names the process behind request req's flow f (Config.Who),
// then tells OnRequest of it.
func (b *Broker) fillWho(e *entry, f Flow, req Request) {
	if w := boundWho(b.cfg.Who(f)); w != nil {
		req.Who = w
		b.mu.Lock()
		if b.byID[req.ID] == e {
			e.req.Who = w
		}
		b.mu.Unlock()
	}
	if b.cfg.OnRequest != nil {
		b.cfg.OnRequest(req)
	}
}

// List returns the pending requests, oldest first.
func (b *Broker) List() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Request, 0, len(b.byID))
	for _, e := range b.byID {
		out = append(out, e.req)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Pending returns how many requests wait.
func (b *Broker) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byID)
}

// Counts returns the requests made so far and those refused at the cap.
func (b *Broker) Counts() (asked, overflow int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.asked, b.overflow
}

// ErrNoRequest: no pending request has that id.
var ErrNoRequest = errors.New("no such pending request (answered, expired, or never made)")

// Approve approves request id for scope: the Approve hook puts it in
// force, then the held flows go.
func (b *Broker) Approve(id int, scope Scope) (Request, error) {
	if scope < Once || scope > Always {
		return Request{}, errors.New("approve: no scope")
	}
	b.mu.Lock()
	e := b.byID[id]
	if e == nil || b.closed {
		b.mu.Unlock()
		return Request{}, ErrNoRequest
	}
	req := e.req
	sign := e.done != nil
	if sign && scope == Always {
		b.mu.Unlock()
		return req, ErrAlwaysSign
	}
	if sign {
		e.scope = scope
	}
	if sign && scope == Session && len(b.signOK) < maxDecided {
		// Before the waiting signatures go: one that comes meanwhile
		// passes too.
		b.signOK[e.key] = struct{}{}
	}
	b.mu.Unlock()
	d := Decision{Request: req, Approved: true, Scope: scope}
	if b.cfg.Approve != nil && !sign {
		// An ssh signature changes no reach: the hook (the jail's
		// reach) is not told of it.
		// Outside the lock: the hook changes the jail's reach, which
		// may take the refusers' paths (that call Ask).
		if err := b.cfg.Approve(d); err != nil {
			return req, err
		}
	}
	if !b.finish(id, Pass, false) {
		if scope != Once {
			return req, ErrExpiredInForce
		}
		return req, ErrNoRequest
	}
	if b.cfg.OnDecision != nil {
		b.cfg.OnDecision(d)
	}
	return req, nil
}

// ErrExpiredInForce: the request expired (or was denied) while its
// approval was put in force: the connections held for it were refused,
// the destination is reachable from the next one.
var ErrExpiredInForce = errors.New("the request expired while it was approved: its held connections were refused, the next one passes")

// Deny refuses request id: its held flows are refused, and the
// destination is refused without asking again for the sandbox's life
// (allow, or approve on a later request cannot come: allow changes the
// policy itself).
func (b *Broker) Deny(id int) (Request, error) {
	b.mu.Lock()
	e := b.byID[id]
	if e == nil || b.closed {
		b.mu.Unlock()
		return Request{}, ErrNoRequest
	}
	req := e.req
	if e.done == nil && len(b.denied) < maxDecided {
		// A signature denied is that one: the next asks again.
		b.denied[e.key] = struct{}{}
	}
	b.mu.Unlock()
	if !b.finish(id, Refuse, false) {
		return req, ErrNoRequest
	}
	if b.cfg.OnDecision != nil {
		b.cfg.OnDecision(Decision{Request: req})
	}
	return req, nil
}

// expire refuses request id when no one answered in time: its held
// flows are refused; a later flow to the destination asks again.
func (b *Broker) expire(id int) {
	b.mu.Lock()
	e := b.byID[id]
	var req Request
	if e != nil {
		req = e.req
	}
	b.mu.Unlock()
	if e == nil || !b.finish(id, Refuse, true) {
		return
	}
	if b.cfg.OnDecision != nil {
		b.cfg.OnDecision(Decision{Request: req, Expired: true})
	}
}

// finish ends request id: its held flows get v, and each Retry runs.
func (b *Broker) finish(id int, v Verdict, expired bool) bool {
	b.mu.Lock()
	e := b.byID[id]
	if e == nil {
		b.mu.Unlock()
		return false
	}
	delete(b.byID, id)
	delete(b.pending, e.key)
	if e.stop != nil && !expired {
		e.stop()
	}
	if e.done != nil {
		e.v, e.why = v, ErrDenied
		switch {
		case expired:
			e.why = ErrExpired
		case b.closed:
			e.why = ErrClosed
		}
		close(e.done)
		b.mu.Unlock()
		return true
	}
	now := b.cfg.Now()
	b.gcLocked(now)
	var retries []func()
	for src, retry := range e.held {
		if len(b.flows) < maxDecided {
			b.flows[srcKey{e.key, src}] = decided{v: v, until: now.Add(decidedTTL)}
		}
		if retry != nil {
			retries = append(retries, retry)
		}
	}
	b.mu.Unlock()
	for _, r := range retries {
		go r()
	}
	return true
}

// gcLocked drops the held flows' decisions that are past their time.
func (b *Broker) gcLocked(now time.Time) {
	if len(b.flows) < maxDecided/2 {
		return
	}
	for k, d := range b.flows {
		if !now.Before(d.until) {
			delete(b.flows, k)
		}
	}
}

// Close refuses every pending request (the sandbox ends); Ask refuses
// from then on.
func (b *Broker) Close() {
	b.mu.Lock()
	b.closed = true
	ids := make([]int, 0, len(b.byID))
	for id := range b.byID {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.finish(id, Refuse, false)
	}
}

// KindSSHSign is the kind of a request to make an ssh signature
// (ConfirmSign).
const KindSSHSign = "ssh-sign"

// Sign is a signature the sandbox's ssh agent would make: its host
// policy allows it, and the ask mode confirms each (--ssh-confirm).
type Sign struct {
	// Host and Port are the allowed host the connection is bound to.
	Host string
	Port uint16
	// Key is the user key's SHA256 fingerprint.
	Key string
	// Who is the ssh client, when known.
	Who *Process
}

// Errors ConfirmSign refuses a signature with; their text is the
// refusal's reason in the agent's report and the audit log.
var (
	// ErrDenied: the request was denied.
	ErrDenied = errors.New("denied")
	// ErrExpired: no one answered in time.
	ErrExpired = errors.New("not answered in time (the ask timeout)")
	// ErrClosed: the sandbox ends.
	ErrClosed = errors.New("the sandbox ends")
	// ErrTooMany: the pending requests are at their cap.
	ErrTooMany = errors.New("too many pending requests")
	// ErrAlwaysSign: approve --always is not for a signature.
	ErrAlwaysSign = errors.New("an ssh signature is approved --once or --session, never stored for later sandboxes (--always)")
)

// ConfirmSign asks for signature s and waits for the answer (approved
// once or for the session, denied, or the timeout): nil lets it be made.
// A (host, key) approved for the session passes without asking; a
// signature asked for while another for the same host and key waits
// joins its request: a denial or the timeout refuses it too, an approval
// for the session makes it, an approval once does not (once is the
// signature the request showed: the joined one asks for itself). Unlike a
// flow's, a denial is that request's: the next signature asks again.
func (b *Broker) ConfirmSign(s Sign) error {
	for {
		e, joined, err := b.confirmSign(s)
		if e == nil {
			return err
		}
		<-e.done
		if e.v != Pass {
			return e.why
		}
		if joined && e.scope == Once {
			// Approved once: the signature shown (its process) is
			// made; one that joined it asks for itself.
			continue
		}
		return nil
	}
}

// confirmSign opens s's request, or joins the one pending for its host
// and key (joined): nil when s needs none (err: nil, approved for the
// session; else refused).
func (b *Broker) confirmSign(s Sign) (e *entry, joined bool, err error) {
	k := destKey{sign: s.Key, name: s.Host, port: s.Port}
	now := b.cfg.Now()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, false, ErrClosed
	}
	if _, ok := b.signOK[k]; ok {
		b.mu.Unlock()
		return nil, false, nil
	}
	e = b.pending[k]
	var req Request
	if e != nil {
		e.req.Held++
		joined = true
	} else {
		if len(b.pending) >= b.cfg.MaxPending {
			b.overflow++
			b.mu.Unlock()
			return nil, false, ErrTooMany
		}
		e = &entry{key: k, done: make(chan struct{})}
		e.req = Request{Proto: "ssh", Name: s.Host, Port: s.Port, Kind: KindSSHSign, Key: s.Key, Who: boundWho(s.Who)}
		req = b.openLocked(e, now)
	}
	b.mu.Unlock()
	if req.ID != 0 && b.cfg.OnRequest != nil {
		b.cfg.OnRequest(req)
	}
	return e, joined, nil
}
