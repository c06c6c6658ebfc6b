package control

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/jail"
)

// Launcher is what a launcher says of its sandbox, and the jail its
// allow and revoke requests change (nil: no jail).
type Launcher struct {
	ID        string
	Command   []string
	Cwd       string
	Workspace string
	Net       string // "" is "jail"
	Started   time.Time
	Jail      *jail.Jail
	// WatchedAt, when set, is the time (UnixNano) a claude-sandbox watch
	// last asked for the requests.
	WatchedAt *atomic.Int64
}

// Handle answers one request.
func (l *Launcher) Handle(req Request) Response {
	switch req.Op {
	case OpStatus:
		st := &Status{ID: l.ID, PID: os.Getpid(), Command: l.Command, Cwd: l.Cwd, Workspace: l.Workspace, Net: l.Net, Started: l.Started}
		if st.Net == "" {
			st.Net = "jail"
		}
		if l.Jail != nil {
			st.Blocked = l.Jail.Blocked()
			st.Allowed, st.Revoked = l.Jail.ReachEntries()
			st.Names = l.Jail.HasNames()
			if b := l.Jail.Asks(); b != nil {
				st.Ask, st.Pending = true, b.Pending()
			}
		}
		return Response{OK: true, Status: st}
	case OpAllow, OpRevoke:
		if l.Jail == nil {
			return Response{Error: fmt.Sprintf("sandbox %s runs with --net=%s, without the egress jail: its reach cannot change", l.ID, l.Net)}
		}
		var changes []string
		if len(req.IP)+len(req.Domain) > 0 || len(req.HostPort) == 0 {
			c, err := l.Jail.ChangeReach(req.Op == OpAllow, req.IP, req.Domain)
			if err != nil {
				return Response{Error: err.Error()}
			}
			changes = c
		}
		if len(req.HostPort) > 0 {
			c, err := l.Jail.ChangeHostPorts(req.Op == OpAllow, req.HostPort)
			if err != nil {
				return Response{Error: err.Error(), Changes: changes}
			}
			changes = append(changes, c...)
		}
		return Response{OK: true, Changes: changes}
	case OpRequests, OpApprove, OpDeny:
		var b *ask.Broker
		if l.Jail != nil {
			b = l.Jail.Asks()
		}
		if b == nil {
			return Response{Error: fmt.Sprintf("sandbox %s does not run in the ask mode (--ask): it makes no requests", l.ID)}
		}
		switch req.Op {
		case OpRequests:
			if req.Watch && l.WatchedAt != nil {
				l.WatchedAt.Store(time.Now().UnixNano())
			}
			return Response{OK: true, Requests: b.List(), Status: &Status{ID: l.ID, Blocked: l.Jail.Blocked(), Ask: true, Pending: b.Pending()}}
		case OpDeny:
			r, err := b.Deny(req.Req)
			if err != nil {
				return Response{Error: fmt.Sprintf("request %d: %v", req.Req, err)}
			}
			return Response{OK: true, Requests: []ask.Request{r}}
		}
		scope, err := ask.ParseScope(req.Scope)
		if err != nil {
			return Response{Error: err.Error()}
		}
		r, err := b.Approve(req.Req, scope)
		if err != nil {
			return Response{Error: fmt.Sprintf("request %d: %v", req.Req, err)}
		}
		return Response{OK: true, Requests: []ask.Request{r}}
	}
	return Response{Error: fmt.Sprintf("unknown request %q", req.Op)}
}

// Serve serves l on its socket (Listen).
func (l *Launcher) Serve() (*Server, error) { return Listen(l.ID, l.Handle) }
