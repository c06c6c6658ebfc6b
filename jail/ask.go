package jail

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// The ask mode (issue 31; the broker is package internal/ask): a flow the
// policy refuses is held while a person decides. Who holds it:
//
//   - the userstack, for a name off the domain allowlist (its query is
//     answered with a synthetic address, nothing asked upstream), an
//     address it refuses (an IP literal on the internet under a domain
//     allowlist) and a gateway port that is not an allowed host port;
//   - the sink, for an address in a blocked range (internal: a private
//     range, a connected subnet), which the kernel routes there.
//
// Approving puts the destination in force as claude-sandbox allow does
// (approve): for the session, the name and port (allow --domain
// NAME:PORT), the address (allow --ip ADDR: every port of it, as --ip is),
// or the host port (allow --host-port); once, only the held flows go:
// the userstack lets them through by itself, and for an address the sink
// held, whose flows must first be routed to the stack, the address is
// allowed until the held flows are admitted, then revoked.

// AskOptions turn the ask mode on (Options.Ask).
type AskOptions struct {
	// Sandbox is the sandbox's id, named in each request.
	Sandbox string
	// Timeout: how long a request waits; 0: ask.DefaultTimeout.
	Timeout time.Duration
	// MaxPending: 0: ask.DefaultMaxPending.
	MaxPending int
	// OnRequest is told of each new request; OnDecision of each
	// decision (not under any lock of the jail's; quick).
	OnRequest  func(ask.Request)
	OnDecision func(ask.Decision)
}

// onceState tracks addresses allowed for flows approved once through the
// sink, until they are admitted.
type onceState struct {
	mu   sync.Mutex
	left map[netip.Addr]int
}

func (j *Jail) newAsk(o *AskOptions) *ask.Broker {
	return ask.New(ask.Config{
		Sandbox: o.Sandbox, Timeout: o.Timeout, MaxPending: o.MaxPending,
		Approve:   j.approve,
		OnRequest: o.OnRequest,
		Who:       j.requestOwner,
		OnDecision: func(d ask.Decision) {
			verdict := "denied"
			switch {
			case d.Approved:
				verdict = "approved " + d.Scope.String()
			case d.Expired:
				verdict = "expired"
			}
			j.opts.Audit.Write(AuditRecord{Event: "request", Proto: d.Request.Proto, Name: d.Request.Name, Addr: d.Request.Addr, Port: d.Request.Port, Key: d.Request.Key, Verdict: verdict, Change: "request " + strconv.Itoa(d.Request.ID)})
			j.debug("request decided", "id", d.Request.ID, "what", d.Request.What(), "verdict", verdict)
			if o.OnDecision != nil {
				o.OnDecision(d)
			}
		},
	})
}

// Asks returns the ask mode's broker (nil: the mode is off).
func (j *Jail) Asks() *ask.Broker { return j.ask }

// stackAsk is the userstack's Config.Ask (nil: off).
func (j *Jail) stackAsk() func(ask.Flow) ask.Verdict {
	if j.ask == nil {
		return nil
	}
	return j.ask.Ask
}

// approve puts an approval in force before its held flows go.
func (j *Jail) approve(d ask.Decision) error {
	r := d.Request
	session := d.Scope != ask.Once
	var err error
	switch r.Kind {
	case ask.KindSSHSign:
		// A signature (--ssh-confirm) changes no reach; the broker does
		// not call this for one.
		return nil
	case "name":
		if session {
			_, err = j.ChangeReach(true, nil, []string{r.Name + ":" + strconv.Itoa(int(r.Port))})
		}
	case "host-port":
		// A UDP port approved once is approved for the session: the
		// stack cannot route a datagram to a port that is not one.
		if session || r.Proto == "udp" {
			_, err = j.ChangeHostPorts(true, []string{strconv.Itoa(int(r.Port)) + "/" + r.Proto})
		}
	case "address":
		a, perr := netip.ParseAddr(r.Addr)
		if perr != nil {
			return perr
		}
		if session {
			_, err = j.ChangeReach(true, []string{a.String()}, nil)
			break
		}
		// Once: the userstack passes what it holds; an address the sink
		// held must be routed to the stack first.
		if v := j.setup.Policy.Check(netpolicy.ProtoTCP, netip.AddrPortFrom(a, r.Port)); v.Kind == netpolicy.KindBlock {
			if _, err = j.ChangeReach(true, []string{a.String()}, nil); err == nil {
				j.onceAllowed(a, min(r.Held, 32))
			}
		}
	default:
		err = fmt.Errorf("unknown request kind %q", r.Kind)
	}
	return err
}

// onceAllowed notes that a was allowed for n held flows approved once: it
// is revoked when they are admitted (onceAdmitted), or after the ask
// timeout whatever happened to them.
func (j *Jail) onceAllowed(a netip.Addr, n int) {
	j.once1.mu.Lock()
	if j.once1.left == nil {
		j.once1.left = map[netip.Addr]int{}
	}
	j.once1.left[a] += max(n, 1)
	j.once1.mu.Unlock()
	time.AfterFunc(j.ask.Timeout(), func() { j.onceRevoke(a, true) })
}

// onceAdmitted is told that a held flow to a was admitted.
func (j *Jail) onceAdmitted(a netip.Addr) { j.onceRevoke(a, false) }

func (j *Jail) onceRevoke(a netip.Addr, all bool) {
	j.once1.mu.Lock()
	n, ok := j.once1.left[a]
	if ok && !all && n > 1 {
		j.once1.left[a] = n - 1
		j.once1.mu.Unlock()
		return
	}
	delete(j.once1.left, a)
	j.once1.mu.Unlock()
	if ok && !j.closed.Load() {
		if _, err := j.ChangeReach(false, []string{a.String()}, nil); err != nil {
			j.debug("approve --once: revoke", "addr", a, "err", err)
		}
	}
}

// maxSinkHeld bounds the bytes of the SYN copies the sink keeps for the
// ask mode's re-delivery, across the jail. The broker keeps at most
// DefaultMaxPending requests of 32 held flows each, but a SYN may carry
// data (TCP Fast Open) up to the sink's MTU: 2,048 of them would be
// 128 MiB of the launcher's memory. A SYN the budget cannot take is
// still asked about and held, without a copy: the sandbox's own
// retransmission meets the decision.
const maxSinkHeld = 1 << 20

// sinkAsk asks about a packet the sink would refuse; true: held or
// passed on (the sink sends nothing). A TCP SYN is copied for its
// re-delivery once approved (within maxSinkHeld); a datagram never is
// (it is dropped: the next one takes the new route).
func (j *Jail) sinkAsk(s *sink, proto netpolicy.Proto, pkt []byte, src, dst netip.AddrPort) bool {
	if j.ask == nil {
		return false
	}
	if _, err := netpolicy.ParseAllow(dst.Addr().String()); err != nil {
		return false // never allowed (loopback): never asked
	}
	f := ask.Flow{Proto: proto, Dst: dst, Src: src}
	var cp []byte
	if proto == netpolicy.ProtoTCP && j.sinkHeld.Add(int64(len(pkt))) <= maxSinkHeld {
		cp = slices.Clone(pkt)
		var once sync.Once
		f.Drop = func() { once.Do(func() { j.sinkHeld.Add(-int64(len(cp))) }) }
		f.Retry = func() {
			f.Drop()
			g := f
			g.Retry, g.Drop = nil, nil
			j.sinkDecided(s, j.ask.Ask(g), cp, dst.Addr())
		}
	} else if proto == netpolicy.ProtoTCP {
		j.sinkHeld.Add(-int64(len(pkt)))
	}
	switch j.ask.Ask(f) {
	case ask.Hold:
		return true
	case ask.Pass:
		if proto == netpolicy.ProtoTCP {
			j.sinkDecided(s, ask.Pass, pkt, dst.Addr())
		}
		// A datagram: dropped, the next one takes the new route.
		return true
	}
	return false
}

// sinkDecided acts on the decision for a SYN the sink held: approved, it
// goes to the stack (the address is routed there now); refused, it gets
// the sink's RST.
func (j *Jail) sinkDecided(s *sink, v ask.Verdict, pkt []byte, a netip.Addr) {
	switch v {
	case ask.Pass:
		j.mu.Lock()
		st := j.stack
		j.mu.Unlock()
		if st != nil {
			st.RedeliverSYN(pkt)
		}
		j.onceAdmitted(a)
	case ask.Refuse:
		if reply := s.refusePlain(pkt); reply != nil {
			_, _ = s.dev.Write(reply)
		}
	}
}

// ChangeHostPorts allows or revokes host loopback ports (as
// --allow-host-port takes them) while the sandbox runs: in force for the
// next new flow to the gateway.
func (j *Jail) ChangeHostPorts(allow bool, ports []string) ([]string, error) {
	verb := "allow"
	if !allow {
		verb = "revoke"
	}
	var hps []netpolicy.HostPort
	for _, s := range ports {
		h, err := netpolicy.ParseHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("--host-port: %w", err)
		}
		hps = append(hps, h)
	}
	if len(hps) == 0 {
		return nil, errors.New("nothing to " + verb)
	}
	if err := j.lockForChange(); err != nil {
		return nil, err
	}
	defer j.upd.Unlock()
	j.mu.Lock()
	st := j.stack
	j.mu.Unlock()
	if st == nil {
		return nil, errors.New("the sandbox's network is not up yet: try again")
	}
	rs := j.reach
	var done []string
	for _, h := range hps {
		changed, err := changeEntry(allow, j.opts.HostPorts, &rs.hostPorts, &rs.hrevoked, h)
		if err != nil {
			return nil, fmt.Errorf("--host-port %s: %w", h, err)
		}
		if changed {
			done = append(done, verb+" host-port "+h.String())
		}
	}
	if len(done) == 0 {
		return []string{"nothing changed: allowed already"}, nil
	}
	var now []netpolicy.HostPort
	for _, h := range j.opts.HostPorts {
		if !slices.Contains(rs.hrevoked, h) {
			now = append(now, h)
		}
	}
	now = append(now, rs.hostPorts...)
	st.SetHostPorts(now)
	j.reach = rs
	t := time.Now()
	for _, d := range done {
		j.reach.log = append(j.reach.log, t.Format("15:04:05")+" "+d)
		j.opts.Audit.Write(AuditRecord{Time: t, Event: "reach", Change: d})
	}
	return done, nil
}
