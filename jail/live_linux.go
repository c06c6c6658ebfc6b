package jail

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/routes"
)

// The live policy: while the sandbox runs, the launcher watches the host's
// links, addresses, routes and routing rules (rtnetlink notifications in
// the host's namespace) and, at each change, re-reads the host's network,
// rebuilds the policy and, when the blocked set moved, puts the new policy
// in force in both layers: the userstack's (an atomic swap, also seen by
// the sink's records) and the kernel's (routes and filter, applied by the
// holder, which owns the jail's namespace). Every change is logged as a
// JSON line in the block log. If the watch or an update fails, the jail
// fails closed: every new flow is refused, and a warning says why.

// watchGroups are the rtnetlink multicast groups watched (RTMGRP_*).
const watchGroups = unix.RTMGRP_LINK | unix.RTMGRP_IPV4_IFADDR | unix.RTMGRP_IPV6_IFADDR |
	unix.RTMGRP_IPV4_ROUTE | unix.RTMGRP_IPV6_ROUTE | 1<<(unix.RTNLGRP_IPV4_RULE-1) | 1<<(unix.RTNLGRP_IPV6_RULE-1)

// startLive starts following the host's network, once the stack is
// attached.
func (j *Jail) startLive() {
	j.mu.Lock()
	j.lastPlan = j.setup.Routes
	j.mu.Unlock()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: watchGroups})
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		j.failClosed(fmt.Errorf("watch the host's network: %w", err))
		return
	}
	// Through Go's poller: no thread sits in a system call (and holds the
	// runtime's one P from the userstack's loop) while the host is quiet,
	// and Close ends the wait.
	sock := os.NewFile(uintptr(fd), "rtnetlink")
	j.mu.Lock()
	j.watchSock = sock
	j.mu.Unlock()
	go j.watch(sock)
	// The NAT64 prefix is discovered on the first IPv6 flow (nat64.go).
}

// watch reads notifications until the jail closes.
func (j *Jail) watch(sock *os.File) {
	// A change between the launch's look at the host and the subscription
	// would otherwise go unseen (done here, off the launch's path).
	// (Any discovery before it may have seen such a change.)
	j.refresh([]string{"host network re-read after launch"}, &hostChange{})
	rc, err := sock.SyscallConn()
	if err != nil {
		j.failClosed(fmt.Errorf("watch the host's network: %w", err))
		return
	}
	// recv reads one datagram; wait says whether to wait for one. No
	// buffer is held while it waits (for the sandbox's life, mostly): it
	// learns the datagram's length first (MSG_PEEK|MSG_TRUNC returns it
	// whole), then reads it into a buffer of that size. Host network
	// changes are rare; the bytes are garbage once described.
	var buf []byte
	var waited bool // the last recv found nothing queued at first
	recv := func(wait bool) (int, error) {
		var n int
		var rerr error
		waited = false
		err := rc.Read(func(fd uintptr) bool {
			buf = nil
			n, _, rerr = unix.Recvfrom(int(fd), nil, unix.MSG_DONTWAIT|unix.MSG_PEEK|unix.MSG_TRUNC)
			if rerr == nil {
				buf = make([]byte, max(n, 1))
				n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			}
			if wait && errors.Is(rerr, unix.EAGAIN) {
				waited = true
				return false
			}
			return true
		})
		if err != nil {
			return 0, err
		}
		return n, rerr
	}
	// drained is when the queue was last found empty (zero: not yet).
	var drained time.Time
	for {
		n, err := recv(true)
		if j.closed.Load() {
			return
		}
		// When the changes notified were made: a moment before the watch
		// woke, if it had to wait for them (the scheduler's delay,
		// nat64Settle); any time since the queue was last found empty, if
		// they were queued already.
		change := &hostChange{since: time.Now().Add(-nat64Settle)}
		if !waited && drained.Before(change.since) {
			change.since = drained
		}
		var reasons []string
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			// Notifications were lost; the host is re-read anyway.
			reasons = append(reasons, "host network changed (notifications overflowed)")
			change.lost = true
		case err != nil:
			j.failClosed(fmt.Errorf("watch the host's network: %w", err))
			return
		default:
			reasons = append(reasons, describe(buf[:n])...)
		}
		// Drain what else is queued: one re-read covers a burst.
		for {
			n, err := recv(false)
			if errors.Is(err, unix.ENOBUFS) {
				reasons = append(reasons, "host network changed (notifications overflowed)")
				change.lost = true
				continue
			}
			if err != nil {
				drained = time.Now()
				break
			}
			reasons = append(reasons, describe(buf[:n])...)
		}
		if len(reasons) > 0 {
			// When the host's network changed in what its NAT64 answer
			// may depend on, the prefix is asked again on the next IPv6
			// flow (the prefixes known so far stay blocked until then).
			j.refresh(reasons, change)
		}
		if j.isFailed() {
			return
		}
	}
}

// describe names the changes in a batch of rtnetlink notifications.
func describe(b []byte) []string {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return []string{"host network changed"}
	}
	var out []string
	for _, m := range msgs {
		var s string
		switch m.Header.Type {
		case unix.RTM_NEWADDR:
			s = "host address added"
		case unix.RTM_DELADDR:
			s = "host address removed"
		case unix.RTM_NEWROUTE:
			s = "host route added"
		case unix.RTM_DELROUTE:
			s = "host route removed"
		case unix.RTM_NEWLINK:
			s = "host link changed"
		case unix.RTM_DELLINK:
			s = "host link removed"
		case unix.RTM_NEWRULE, unix.RTM_DELRULE:
			s = "host routing rule changed"
		default:
			continue
		}
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// refresh re-reads the host's network and puts the policy it gives in
// force, if the blocked set moved. It drops the NAT64 answer when the
// host's network changed in what that answer may depend on, or may have
// (checkNAT64): change is what prompted the re-read (nil: a NAT64
// answer).
func (j *Jail) refresh(reasons []string, change *hostChange) {
	j.upd.Lock()
	defer j.upd.Unlock()
	j.refreshLocked(reasons, change)
}

// refreshLocked is refresh with j.upd held.
func (j *Jail) refreshLocked(reasons []string, change *hostChange) {
	if j.isFailed() {
		return
	}
	facts, err := j.readHost()
	if err != nil {
		j.checkNAT64(nat64Deps{}, change)
		j.failClosedLocked(fmt.Errorf("re-read the host's network: %w", err))
		return
	}
	j.checkNAT64(facts.deps, change)
	j.mu.Lock()
	facts.NAT64 = j.nat64
	j.mu.Unlock()
	pol, rp, err := j.setup.build(facts, j.reach)
	if err != nil {
		j.failClosedLocked(err)
		return
	}
	changes := netpolicy.Diff(j.setup.Policy, pol)
	j.debug("host network re-read", "reasons", reasons, "changes", len(changes))
	if len(changes) == 0 {
		return
	}
	// The userstack (and the sink's records) first: an atomic swap, in
	// force for the next flow. Then the kernel layer, through the holder.
	j.setPolicy(pol)
	if j.routePlan != nil {
		rp = j.routePlan(rp)
	}
	if err := j.apply(rp); err != nil {
		if j.closed.Load() {
			// The sandbox is ending: nothing is left to protect.
			j.failedClosed.Store(true)
			return
		}
		j.failClosedLocked(fmt.Errorf("update the jail's routes and filter: %w", err))
		return
	}
	j.mu.Lock()
	j.lastPlan = rp
	j.mu.Unlock()
	reason := strings.Join(reasons, "; ")
	now := time.Now()
	for _, c := range changes {
		c.Time, c.Reason = now, reason
		j.logChange(c)
	}
}

// apply moves the jail's namespace from the last plan put in force to
// rp, through the sockets its child driver opened there (called with
// j.upd held). A punch that fails is a warning.
func (j *Jail) apply(rp routes.Plan) error {
	j.mu.Lock()
	ns, cur := j.ns, j.lastPlan
	j.mu.Unlock()
	if ns == nil {
		return errors.New("the jail is not attached")
	}
	warnings, err := routes.Update(cur, rp, ns)
	for _, w := range warnings {
		if j.opts.Warn != nil {
			j.opts.Warn(fmt.Sprintf("egress jail: %v (that destination stays unreachable)", w))
		}
	}
	return err
}

func (j *Jail) logChange(c netpolicy.Change) {
	j.debug("policy change", "event", c.Event, "prefix", c.Prefix, "rule", c.Rule, "reason", c.Reason)
	if j.log != nil {
		_ = j.log.RecordChange(c)
	}
	j.opts.Audit.change(c)
	if j.opts.OnChange != nil {
		j.opts.OnChange(c)
	}
}

// FailClosed puts the jail in the state the live policy falls back to when
// it can no longer follow the host: every new flow refused in both layers,
// logged, and a warning naming cause. Embedders may call it when they know
// the host's network is in doubt; tests call it to check that state.
func (j *Jail) FailClosed(cause error) { j.failClosed(cause) }

func (j *Jail) isFailed() bool { return j.failedClosed.Load() }

// setPolicy puts pol's rules in force for the sink's records and the
// userstack (through the stackPolicy seam, when a test set one).
func (j *Jail) setPolicy(pol *netpolicy.Policy) {
	j.setup.Policy.Set(pol)
	if j.stackPolicy != nil {
		j.stackPol.Set(j.stackPolicy(pol))
	}
}

// failClosed refuses every new flow from now on, in both layers (the
// kernel's as far as the holder still answers), and says why.
func (j *Jail) failClosed(cause error) {
	// After any refresh under way: it must not put its policy in force
	// over this one.
	j.upd.Lock()
	defer j.upd.Unlock()
	j.failClosedLocked(cause)
}

// failClosedLocked is failClosed with j.upd held.
func (j *Jail) failClosedLocked(cause error) {
	if j.closed.Load() || !j.failedClosed.CompareAndSwap(false, true) {
		return
	}
	msg := fmt.Sprintf("egress jail: %v; the jail can no longer follow the host's network, so every new connection is refused from now on (the sandbox keeps running; restart it to restore its network)", cause)
	j.setPolicy(netpolicy.FailClosed("fail-closed: " + cause.Error()))
	j.mu.Lock()
	attached, last := j.ns != nil, j.lastPlan
	j.mu.Unlock()
	if attached {
		all := routes.Plan{Ops: last.Ops, Filter: &routes.Filter{Dev: TUN, Block: []netpolicy.Range{
			{From: netip.IPv4Unspecified(), To: netip.AddrFrom4([4]byte{255, 255, 255, 255})},
			{From: netip.IPv6Unspecified(), To: netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")},
		}}}
		_ = j.apply(all)
	}
	j.logChange(netpolicy.Change{Time: time.Now(), Event: "blocked", Prefix: "0.0.0.0/0 ::/0", Rule: "fail-closed", Reason: cause.Error()})
	if j.opts.Warn != nil {
		j.opts.Warn(msg)
	}
}
