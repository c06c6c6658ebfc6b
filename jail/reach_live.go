package jail

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack"
	"github.com/claude-sandbox/claude-sandbox/userstack/names"
)

// Reach changed while the sandbox runs (claude-sandbox allow / revoke,
// through the launcher's control socket): addresses and CIDRs go into the
// policy's allow entries and are put in force as any live policy change
// is (refreshLocked: the userstack's atomic swap, then the kernel routes
// and filter); names go into the domain allowlist the userstack asks for
// every query and every new flow to a name (liveNames). Both are logged
// as policy changes and named in the exit summary.

// liveNames is the domain allowlist as the userstack sees it: the rules
// compiled from the launch's entries and those allowed since, swapped
// whole.
type liveNames struct {
	cur atomic.Pointer[netpolicy.Domains]
}

func (l *liveNames) AllowName(name string) (bool, string) { return l.cur.Load().AllowName(name) }
func (l *liveNames) Allow(name string, port uint16) (bool, string) {
	return l.cur.Load().Allow(name, port)
}

// reachState is what allow and revoke changed (under j.upd).
type reachState struct {
	ips      []netip.Prefix // allowed while running
	revoked  []netip.Prefix // launch-time entries revoked
	names    []netpolicy.DomainRule
	nrevoked []netpolicy.DomainRule // launch-time name rules revoked
	// host loopback ports allowed while running, launch-time ones revoked
	hostPorts, hrevoked []netpolicy.HostPort
	log                 []string // for the exit summary
}

// nameService builds the userstack's names side (package names; nil
// when the domain allowlist is off) from nameConfig.
func (j *Jail) nameService() (userstack.NameService, error) {
	nc := j.nameConfig()
	if nc == nil {
		return nil, nil
	}
	n, err := names.New(*nc)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// nameConfig returns the names side's configuration: the setup's, with
// rules that allow and revoke can change.
func (j *Jail) nameConfig() *names.Config {
	if j.setup.Names == nil {
		return nil
	}
	// A request through the control socket may come while the stack
	// attaches.
	j.upd.Lock()
	defer j.upd.Unlock()
	if j.names == nil {
		d, ok := j.setup.Names.Rules.(*netpolicy.Domains)
		if !ok {
			// Rules of the embedder's own: used as they are.
			return j.setup.Names
		}
		j.names = &liveNames{}
		j.names.cur.Store(d)
	}
	nc := *j.setup.Names
	nc.Rules = j.names
	return &nc
}

// HasNames reports whether the sandbox runs with a domain allowlist.
func (j *Jail) HasNames() bool { return j.setup.Names != nil }

// ReachEntries returns what was allowed and revoked while running.
func (j *Jail) ReachEntries() (allowed, revoked []string) {
	j.upd.Lock()
	defer j.upd.Unlock()
	for _, p := range j.reach.ips {
		allowed = append(allowed, p.String())
	}
	for _, r := range j.reach.names {
		allowed = append(allowed, r.String())
	}
	for _, h := range j.reach.hostPorts {
		allowed = append(allowed, "host-port "+h.String())
	}
	for _, h := range j.reach.hrevoked {
		revoked = append(revoked, "host-port "+h.String())
	}
	for _, p := range j.reach.revoked {
		revoked = append(revoked, p.String())
	}
	for _, r := range j.reach.nrevoked {
		revoked = append(revoked, r.String())
	}
	return allowed, revoked
}

// launchAllow is the user's allow entries at launch (the synthetic pools
// left out: they are not the user's to revoke).
func (j *Jail) launchAllow() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range j.setup.policyCfg.Allow {
		if p != names.DefaultPool4 && p != names.DefaultPool6 {
			out = append(out, p)
		}
	}
	return out
}

// ChangeReach allows (allow true) or revokes addresses and CIDRs (ips,
// as --allow-ip takes them) and names (domains, as --allow-domain takes
// them, presets included) while the sandbox runs, and returns the
// changes, one line each. Names need the sandbox to have a domain
// allowlist. A revoke names entries allowed before, at launch or since.
// In force for the next flow once it returns.
func (j *Jail) ChangeReach(allow bool, ips, domains []string) ([]string, error) {
	verb := "allow"
	if !allow {
		verb = "revoke"
	}
	var pfxs []netip.Prefix
	var errs []error
	for _, s := range ips {
		p, err := netpolicy.ParseAllow(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--ip: %w", err))
			continue
		}
		pfxs = append(pfxs, p)
	}
	var rules []netpolicy.DomainRule
	if len(domains) > 0 {
		if j.setup.Names == nil {
			errs = append(errs, errors.New("--domain: this sandbox was started without a domain allowlist (--allow-domain), so every name is reachable already; names can be allowed only in a sandbox started with one"))
		} else if rs, err := netpolicy.ExpandDomains(domains); err != nil {
			errs = append(errs, fmt.Errorf("--domain: %w", err))
		} else {
			rules = rs
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(pfxs) == 0 && len(rules) == 0 {
		return nil, errors.New("nothing to " + verb + ": give --ip or --domain")
	}
	if err := j.lockForChange(); err != nil {
		return nil, err
	}
	defer j.upd.Unlock()
	j.mu.Lock()
	attached := j.ns != nil
	j.mu.Unlock()
	if !attached && len(pfxs) > 0 {
		return nil, errors.New("the sandbox's network is not up yet: try again")
	}
	st := j.reach
	var done []string  // one line per change
	var names []string // done's domain changes' rules ("" for an address)
	launch := j.launchAllow()
	for _, p := range pfxs {
		changed, err := changeEntry(allow, launch, &st.ips, &st.revoked, p)
		if err != nil {
			return nil, fmt.Errorf("--ip %s: %w", p, err)
		}
		if changed {
			done, names = append(done, verb+" ip "+p.String()), append(names, "")
		}
	}
	var launchNames []netpolicy.DomainRule
	if len(rules) > 0 {
		launchNames, _ = netpolicy.ExpandDomains(j.setup.AllowDomains)
	}
	for _, r := range rules {
		changed, err := changeEntry(allow, launchNames, &st.names, &st.nrevoked, r)
		if err != nil {
			return nil, fmt.Errorf("--domain %s: %w", r, err)
		}
		if changed {
			done, names = append(done, verb+" domain "+r.String()), append(names, r.String())
		}
	}
	if len(done) == 0 {
		return []string{"nothing changed: allowed already"}, nil
	}
	reason := "claude-sandbox " + strings.Join(done, ", ")
	if len(rules) > 0 {
		if err := j.putNames(st, launchNames); err != nil {
			return nil, err
		}
	}
	j.reach = st
	if len(pfxs) > 0 {
		j.refreshLocked([]string{reason}, &hostChange{})
		if j.isFailed() {
			return nil, errors.New("the jail could not put the change in force and has failed closed (every new connection is refused)")
		}
	}
	now := time.Now()
	for i, d := range done {
		j.reach.log = append(j.reach.log, now.Format("15:04:05")+" "+d)
		j.opts.Audit.Write(AuditRecord{Time: now, Event: "reach", Change: d})
		if names[i] != "" {
			// Names are not in the blocked set: logged here.
			ev := "allowed"
			if !allow {
				ev = "blocked"
			}
			j.logChange(netpolicy.Change{Time: now, Event: ev, Prefix: names[i], Rule: d, Reason: reason})
		}
	}
	return done, nil
}

// putNames compiles the domain allowlist from the launch's entries and
// st's, and swaps it in.
func (j *Jail) putNames(st reachState, launch []netpolicy.DomainRule) error {
	if j.names == nil {
		return errors.New("--domain: this sandbox's domain rules cannot be changed while it runs")
	}
	deny, err := netpolicy.ExpandDomains(j.setup.DenyDomains)
	if err != nil {
		return err
	}
	var allow []netpolicy.DomainRule
	for _, r := range launch {
		if !slices.Contains(st.nrevoked, r) {
			allow = append(allow, r)
		}
	}
	allow = append(allow, st.names...)
	j.names.cur.Store(netpolicy.NewDomains(allow, deny))
	return nil
}

// reachSummary is the exit summary's line for reach changed while
// running ("" when none was).
func (j *Jail) reachSummary() string {
	j.upd.Lock()
	defer j.upd.Unlock()
	if len(j.reach.log) == 0 {
		return ""
	}
	return "reach changed while running: " + strings.Join(j.reach.log, "; ")
}

// auditFlow is the userstack's OnFlow: nil without an audit log.
func (j *Jail) auditFlow() func(userstack.Flow) {
	if j.opts.Audit == nil {
		return nil
	}
	// With the process behind each flow (owner.go).
	j.auditFlows = j.newAuditFlows()
	return j.auditFlows.note
}

// auditFlowEnd is the userstack's OnFlowEnd: nil without an audit log
// (the stack then does nothing at a flow's end). After auditFlow.
func (j *Jail) auditFlowEnd() func(userstack.FlowEnd) {
	if j.auditFlows == nil {
		return nil
	}
	return j.auditFlows.noteEnd
}

// changeEntry allows (allow) or revokes e against the launch-time entries
// and what was allowed (added) or revoked since, both copied on write (a
// reachState is shared with readers). It reports whether anything changed:
// allowing what is allowed already changes nothing, revoking what is not
// allowed is an error.
func changeEntry[T comparable](allow bool, launch []T, added, revoked *[]T, e T) (bool, error) {
	if allow {
		if i := slices.Index(*revoked, e); i >= 0 {
			*revoked = slices.Delete(slices.Clone(*revoked), i, i+1)
			return true, nil
		}
		if slices.Contains(launch, e) || slices.Contains(*added, e) {
			return false, nil
		}
		*added = append(slices.Clone(*added), e)
		return true, nil
	}
	if i := slices.Index(*added, e); i >= 0 {
		*added = slices.Delete(slices.Clone(*added), i, i+1)
		return true, nil
	}
	if slices.Contains(launch, e) && !slices.Contains(*revoked, e) {
		*revoked = append(slices.Clone(*revoked), e)
		return true, nil
	}
	return false, errors.New("not allowed in this sandbox, nothing to revoke")
}

// lockForChange takes j.upd for a reach change made while the sandbox
// runs (allow, revoke, an approval), and refuses one the jail can no
// longer make; on success the caller unlocks j.upd.
func (j *Jail) lockForChange() error {
	j.upd.Lock()
	switch {
	case j.isFailed():
		j.upd.Unlock()
		return errors.New("the jail has failed closed: every new connection is refused, and stays so")
	case j.closed.Load():
		j.upd.Unlock()
		return errors.New("the sandbox is ending")
	}
	return nil
}
