package jail

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/jaillayers"
	"github.com/claude-sandbox/claude-sandbox/jail/netchild"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/routes"
	"github.com/claude-sandbox/claude-sandbox/userstack"
)

// Options are the run-time choices of a Jail.
type Options struct {
	// Log, when set, receives every block as a JSON line.
	Log io.Writer
	// Summary, when set, receives a one-line summary of the blocks when
	// the jail closes ("3 connections blocked: tcp 10.1.2.3:22 (...)").
	Summary io.Writer
	// Dialer opens the host-side sockets; nil: the userstack's own. Its
	// conns must have descriptors (see userstack.Dialer).
	Dialer userstack.Dialer
	// Warn receives a message when the live policy fails closed (nil:
	// none is printed).
	Warn func(string)
	// OnChange, when set, is told of each change of the blocked set while
	// the sandbox runs (the block log gets them too).
	OnChange func(netpolicy.Change)
	// OnBlock, when set, is called with every block as it is recorded,
	// from the stack's block-delivery goroutine (the sink's refusals
	// take the stack's bounded, rate-limited queue too): it must return
	// quickly (queue the block, do not wait on it); while it waits,
	// records beyond the queue are dropped and only counted.
	OnBlock func(netpolicy.Block)
	// MaxUDPFlows caps the sandbox's UDP flows (each holds a host
	// ephemeral port); 0: userstack.DefaultMaxUDPFlows. Each flow evicted
	// at the cap goes to Log like a block, its rule saying so, and the
	// Summary counts them.
	MaxUDPFlows int
	// UDPIdleTimeout is how long an idle UDP mapping keeps its host
	// port; 0: userstack.DefaultUDPIdleTimeout (5 minutes).
	UDPIdleTimeout time.Duration
	// HostPorts are the ports of the host's loopback the sandbox reaches
	// through the gateway (--allow-host-port); every other gateway port
	// is refused and recorded.
	HostPorts []netpolicy.HostPort
	// Publish are the published ports' host sockets (Listen): each
	// connection or client is relayed into the sandbox's port. Close
	// closes them.
	Publish []*Published
	// MaxRelayMemory bounds the TCP relay's buffers across all flows, in
	// bytes; 0: userstack.DefaultMaxRelayMemory.
	MaxRelayMemory int
	// Audit, when set, receives every flow decision and reach or policy
	// change (audit.go). The caller closes it after Close.
	Audit *Audit
	// Ask, when set, turns the ask mode on (ask.go): a flow the policy
	// refuses is held while a request for it is pending.
	Ask *AskOptions
	// Logger, when set, receives the jail's and the relay's diagnostics
	// at debug level (--debug): blocks as they are recorded, live policy
	// changes, and what the relay reports about its flows.
	Logger *slog.Logger
}

// Jail is the running userstack half of the jail; it implements the
// engine's nsexec.Jail.
type Jail struct {
	setup *Setup
	opts  Options
	// Test seams (internal/jaillayers, read once by New; nil in the
	// shipped binary): stackPolicy rewrites each rule set the userstack
	// gets, which then has a policy of its own (stackPol) following
	// setup.Policy through it; routePlan rewrites each route plan the
	// live policy applies.
	stackPolicy func(*netpolicy.Policy) *netpolicy.Policy
	routePlan   func(routes.Plan) routes.Plan
	stackPol    *netpolicy.Policy

	mu     sync.Mutex
	stack  *userstack.Stack
	sink   *os.File
	tally  netpolicy.Tally
	evicts int // UDP flows evicted at the cap
	log    *netpolicy.JSONLWriter
	failed chan error
	once   sync.Once
	pubWG  sync.WaitGroup // the published ports' serving goroutines

	// viaDefault are the host routes through a default route's gateway
	// that refused a flow (netpolicy.Block.ViaDefault), for the summary's
	// hint at --internet-cidr; at most maxViaDefaultNamed (under mu).
	viaDefault []netip.Prefix

	// sinkDone is closed when the sink's reader has returned (nil: it
	// never started).
	sinkDone chan struct{}

	// The live policy (live_linux.go).
	upd          sync.Mutex   // one refresh at a time
	ns           *routes.Conn // the jail namespace's kernel layer
	lastPlan     routes.Plan
	nat64        []netip.Prefix // the NAT64 prefixes discovered (nat64.go)
	n64          *nat64Finder
	deps         nat64Deps                 // what the NAT64 answer may depend on, at the last read (j.upd)
	readHost     func() (HostFacts, error) // discoverNetwork (tests give their own)
	watchSock    *os.File
	closed       atomic.Bool
	failedClosed atomic.Bool

	// The process behind a flow (owner.go).
	own        owners
	auditFlows *auditFlows // nil: no audit log

	// Reach changed while running (reach_live.go).
	names *liveNames // nil: no domain allowlist, or not yet attached
	reach reachState // under upd

	// The ask mode (ask.go): nil when off.
	ask   *ask.Broker
	once1 onceState
	// sinkHeld: bytes of the SYN copies the sink keeps for the ask mode
	// (maxSinkHeld).
	sinkHeld atomic.Int64
}

// New returns a Jail for setup; nothing runs until Attach.
func New(setup *Setup, opts Options) *Jail {
	j := &Jail{setup: setup, opts: opts, failed: make(chan error, 1), deps: setup.deps, readHost: discoverNetwork}
	l := jaillayers.Get()
	j.stackPolicy, j.routePlan = l.StackPolicy, l.RoutePlan
	j.stackPol = setup.Policy
	if j.stackPolicy != nil {
		j.stackPol = &netpolicy.Policy{}
		j.stackPol.Set(j.stackPolicy(setup.Policy))
	}
	j.n64 = &nat64Finder{lookup: lookupNAT64, found: j.useNAT64, timeout: nat64Timeout}
	if opts.Log != nil {
		j.log = netpolicy.NewJSONLWriter(opts.Log)
	}
	if opts.Ask != nil {
		j.ask = j.newAsk(opts.Ask)
	}
	return j
}

// Routes is the plan the child driver applies in the jail's namespace.
func (j *Jail) Routes() routes.Plan { return j.setup.Routes }

// Failed delivers a fatal error of the stack.
func (j *Jail) Failed() <-chan error { return j.failed }

func (j *Jail) fail(err error) {
	select {
	case j.failed <- err:
	default:
	}
}

// Attach builds the userstack on the egress device, starts the sink's
// reader and the live policy, from what the child driver passed: the
// devices, the jail namespace's netlink sockets and the links' indexes.
func (j *Jail) Attach(files []*os.File, reply []byte) error {
	if err := j.attach(files, reply); err != nil {
		return fmt.Errorf("the userstack cannot attach to the TUN device: %w; %s", err, netchild.TUNFixes)
	}
	j.startLive()
	return nil
}

func (j *Jail) attach(files []*os.File, reply []byte) error {
	if len(files) != netchild.Files {
		return fmt.Errorf("want %d descriptors from the child driver, got %d", netchild.Files, len(files))
	}
	var r netchild.Reply
	if err := json.Unmarshal(reply, &r); err != nil {
		return fmt.Errorf("the child driver's reply: %w", err)
	}
	// The engine closes its copies after Attach: keep our own (NewTUN
	// keeps its own of the egress device).
	var socks routes.Sockets
	var err error
	if socks.Route, err = dupFile(files[netchild.FileRoute], false); err != nil {
		return err
	}
	if socks.Netfilter, err = dupFile(files[netchild.FileNetfilter], false); err != nil {
		socks.Route.Close()
		return err
	}
	socks.Links = r.Links
	if err := j.attachDiag(files[netchild.FileDiag]); err != nil {
		socks.Route.Close()
		socks.Netfilter.Close()
		return err
	}
	conn := routes.NewConn(socks)
	sinkDev, err := dupFile(files[netchild.FileSink], true)
	if err != nil {
		conn.Close()
		return err
	}
	j.sink = sinkDev
	nameSvc, err := j.nameService()
	if err != nil {
		sinkDev.Close()
		conn.Close()
		return err
	}
	devs := files[:netchild.FileSink+1]
	ep := userstack.NewTUN(devs[0], uint32(routes.DefaultMTU), netchild.VnetHdrLen, func(err error) {
		j.fail(fmt.Errorf("TUN device: %w", err))
	})
	st, err := userstack.New(ep, userstack.Config{
		Policy:     j.stackPol,
		Dialer:     j.opts.Dialer,
		Gateways:   []netipAddr{j.setup.Gateway},
		VirtualDNS: []netipAddr{j.setup.Gateway},
		Upstreams:  j.setup.Upstreams,
		HostPorts:  j.opts.HostPorts,
		Ask:        j.stackAsk(),
		Inbound:    len(j.opts.Publish) > 0,
		OnBlock:    j.record,
		OnFlow:     j.auditFlow(),
		OnFlowEnd:  j.auditFlowEnd(),
		Pinger:     userstack.HostPinger{},
		// Evictions are logged in the block log's format but are not
		// blocks: the summary counts them apart.
		MaxUDPFlows:    j.opts.MaxUDPFlows,
		OnEvict:        j.recordEvict,
		MaxRelayMemory: j.opts.MaxRelayMemory,
		UDPIdleTimeout: j.opts.UDPIdleTimeout,
		Names:          nameSvc,
		Logf:           logf(j.opts.Logger),
		IPv6Ready:      j.ipv6Ready(),
	})
	if err == nil {
		// The egress device failed while the stack attached to it (it
		// could not be duplicated, say): refuse the launch now rather
		// than stop the sandbox once it runs.
		select {
		case err = <-j.failed:
			st.Close()
		default:
		}
	}
	if err != nil {
		ep.Close()
		sinkDev.Close()
		conn.Close()
		return err
	}
	j.mu.Lock()
	j.stack = st
	j.ns = conn
	j.mu.Unlock()
	j.debug("attached", "gateway", j.setup.Gateway, "upstreams", j.setup.Upstreams)
	sk := j.newSink(sinkDev, st)
	done := make(chan struct{})
	j.mu.Lock()
	j.sinkDone = done
	j.mu.Unlock()
	go func() {
		defer close(done)
		sk.run()
	}()
	j.servePublished(st)
	return nil
}

// ipv6Ready is the userstack's IPv6 gate: the NAT64 prefix discovery
// (nat64.go). Also when the sandbox has no IPv6 address of its own: an
// allowed name may still be dialed at an IPv6 address on the host's side,
// and the host may gain IPv6 while the sandbox runs. The gate asks
// nothing until such a flow comes.
func (j *Jail) ipv6Ready() func() <-chan struct{} {
	return j.n64.ready
}

// newSink returns the sink's reader on dev. Its records go through st's
// bounded, rate-limited queue, as the stack's own do (a flood to a
// blocked range costs a bounded number of records, the rest counted in
// st.BlocksDropped for the summary), and reach record from there.
func (j *Jail) newSink(dev *os.File, st *userstack.Stack) *sink {
	s := &sink{dev: dev, pol: j.setup.Policy, record: st.RecordBlock, owner: j.blockOwner}
	if j.ask != nil {
		s.ask = j.sinkAsk
	}
	return s
}

// maxViaDefaultNamed bounds the routes the summary's hint names.
const maxViaDefaultNamed = 8

// viaDefaultNote is the summary's line for flows refused by a host route
// through the default gateway: such a route makes its destination
// internal, and it is the one kind a user may know is internet.
func viaDefaultNote(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return ""
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.String()
	}
	return fmt.Sprintf("refused as internal because the host routes it through its default gateway by a more specific route: %s; if that is internet, exempt it with --internet-cidr (internet-cidr in the shadow's config)", strings.Join(names, ", "))
}

func (j *Jail) record(b netpolicy.Block) {
	if b.Time.IsZero() {
		b.Time = time.Now()
	}
	// A block of the stack's (the sink's looked its owner up already):
	// the destination must name the socket.
	j.blockOwner(&b, netip.AddrPort{})
	j.mu.Lock()
	j.tally.Add(b)
	if p := b.ViaDefault; p.IsValid() && len(j.viaDefault) < maxViaDefaultNamed && !slices.Contains(j.viaDefault, p) {
		j.viaDefault = append(j.viaDefault, p)
	}
	j.mu.Unlock()
	j.debug("blocked", "proto", b.Proto, "dst", b.Dst, "rule", b.Rule)
	j.opts.Audit.block(b)
	if j.log != nil {
		_ = j.log.Record(b)
	}
	if j.opts.OnBlock != nil {
		j.opts.OnBlock(b)
	}
}

// recordEvict logs a UDP flow evicted at the flow cap.
func (j *Jail) recordEvict(b netpolicy.Block) {
	if b.Time.IsZero() {
		b.Time = time.Now()
	}
	j.mu.Lock()
	j.evicts++
	j.mu.Unlock()
	if j.log != nil {
		_ = j.log.Record(b)
	}
}

// Evicted returns how many UDP flows were evicted at the flow cap so far.
func (j *Jail) Evicted() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.evicts
}

// Blocked returns how many flows were refused so far.
func (j *Jail) Blocked() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.tally.Total()
}

// Close stops the stack and writes the summary.
func (j *Jail) Close() {
	j.once.Do(func() {
		j.closed.Store(true)
		if j.ask != nil {
			// Every pending request is refused: the held flows get
			// their RST while the stack and the sink still answer.
			j.ask.Close()
		}
		j.n64.close()
		for _, p := range j.opts.Publish {
			p.Close()
		}
		j.mu.Lock()
		st := j.stack
		sinkDone := j.sinkDone
		j.mu.Unlock()
		// The sink first: its reader records through the stack's queue,
		// which delivers (or counts) only what is given before the
		// stack closes.
		if j.sink != nil {
			j.sink.Close()
		}
		if sinkDone != nil {
			<-sinkDone
		}
		var dropped, evictsUnlogged uint64
		stEvicts := 0
		if st != nil {
			st.Close()
			dropped = st.BlocksDropped()
			// Eviction records take the block records' queue: the
			// count is the stack's, whether logged or not.
			evictsUnlogged = st.EvictRecordsDropped()
			stEvicts = int(st.UDPEvictions())
		}
		j.pubWG.Wait()
		j.auditFlows.close()
		j.closeOwners()
		j.mu.Lock()
		if j.watchSock != nil {
			j.watchSock.Close()
		}
		ns := j.ns
		j.mu.Unlock()
		if ns != nil {
			// After the netlink call under way, if any (not after a
			// whole refresh: the host's network is re-read once the
			// jail attaches, and a short sandbox would wait for it);
			// a refresh still going fails on the closed sockets and
			// stops (closed). The namespace goes with the last
			// reference to it (these sockets, the TUN links).
			ns.Close()
		}
		if j.opts.Summary != nil {
			j.mu.Lock()
			sum := j.tally.Summary(5)
			evicts := max(j.evicts, stEvicts)
			via := viaDefaultNote(j.viaDefault)
			j.mu.Unlock()
			if sum != "" {
				fmt.Fprintln(j.opts.Summary, "claude-sandbox:", sum)
			}
			if via != "" {
				fmt.Fprintln(j.opts.Summary, "claude-sandbox:", via)
			}
			if r := j.reachSummary(); r != "" {
				fmt.Fprintln(j.opts.Summary, "claude-sandbox:", r)
			}
			if evicts > 0 {
				fmt.Fprintf(j.opts.Summary, "claude-sandbox: %d UDP flows evicted at the cap of %d flows (least recently used first)\n", evicts, j.maxUDPFlows())
			}
			if dropped > 0 {
				fmt.Fprintf(j.opts.Summary, "claude-sandbox: %s\n", droppedNote(dropped))
			}
		}
		if evictsUnlogged > 0 && j.log != nil && j.opts.Warn != nil {
			j.opts.Warn(fmt.Sprintf("%d UDP flow evictions were not logged (a flood beyond the block log's rate of %d records a second)", evictsUnlogged, userstack.BlockRecordRate))
		}
		if dropped > 0 {
			j.debug("block records dropped", "count", dropped)
			if j.opts.Summary == nil && j.opts.Warn != nil {
				// The blocks went to a log file: the count of those
				// missing from it still reaches the terminal.
				j.opts.Warn(droppedNote(dropped))
			}
		}
	})
}

// droppedNote says how many blocked flows went unrecorded: refused all
// the same, but beyond the block records' queue or rate (a flood).
func droppedNote(n uint64) string {
	return fmt.Sprintf("%d more blocked flows were refused but not recorded (a flood beyond the block log's rate of %d records a second)", n, userstack.BlockRecordRate)
}

func (j *Jail) maxUDPFlows() int {
	if j.opts.MaxUDPFlows > 0 {
		return j.opts.MaxUDPFlows
	}
	return userstack.DefaultMaxUDPFlows
}
