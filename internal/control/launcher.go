package control

import (
	"fmt"
	"os"
	"time"

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
		}
		return Response{OK: true, Status: st}
	case OpAllow, OpRevoke:
		if l.Jail == nil {
			return Response{Error: fmt.Sprintf("sandbox %s runs with --net=%s, without the egress jail: its reach cannot change", l.ID, l.Net)}
		}
		if len(req.HostPort) > 0 {
			return Response{Error: "--host-port cannot change while a sandbox runs yet: give it at launch (--allow-host-port)"}
		}
		changes, err := l.Jail.ChangeReach(req.Op == OpAllow, req.IP, req.Domain)
		if err != nil {
			return Response{Error: err.Error()}
		}
		return Response{OK: true, Changes: changes}
	}
	return Response{Error: fmt.Sprintf("unknown request %q", req.Op)}
}

// Serve serves l on its socket (Listen).
func (l *Launcher) Serve() (*Server, error) { return Listen(l.ID, l.Handle) }
