package jail

import (
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/flowowner"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack"
)

// The process behind a flow: the socket's inode from the kernel's socket
// diagnostics in the jail's namespace (a NETLINK_SOCK_DIAG socket the
// child driver opened there), then the process holding it from the
// sandbox's own /proc (reached through init's root: its pids are the
// sandbox's). Looked up only when someone needs it: for each block
// recorded (the summary, the block log, the embedder's event) and, with
// the audit log on, for each flow let through, never on the userstack's
// packet path. A socket closed by the time of the lookup gives no owner:
// the record says what is known.

// Owner is the process behind a flow: its pid in the sandbox, argv and
// working directory, bounded and escaped.
type Owner = flowowner.Owner

// maxOwnerLookups bounds the lookups a second, and maxOwnerTime the
// time they take in a second (a flood of flows, or a sandbox holding a
// great many descriptors to scan, costs the launcher a bounded share of
// a CPU; the rest are recorded without an owner).
const (
	maxOwnerLookups = 500
	maxOwnerTime    = 100 * time.Millisecond
)

// owners is the jail's lookup state.
type owners struct {
	// mu is held (read) by each lookup and (write) by closeOwners: the
	// descriptors are not closed, and their numbers reused, under one.
	mu      sync.RWMutex
	diag    *flowowner.Diag
	initPID atomic.Int64
	procFD  atomic.Int64 // the sandbox's /proc, open (0: not yet)
	last    atomic.Int64 // the pid found last (looked at first)
	window  atomic.Int64 // the second the count is of
	count   atomic.Int64
	spent   atomic.Int64 // nanoseconds spent looking up in that second
}

// SetInitPID tells the jail the pid of the sandbox's init (in the
// launcher's PID namespace), through whose root it reaches the sandbox's
// /proc. The engine calls it before Attach.
func (j *Jail) SetInitPID(pid int) { j.own.initPID.Store(int64(pid)) }

// SandboxUserNS names the sandbox's user namespace (readlink of its
// init's /proc/PID/ns/user); "" while its init is not known.
func (j *Jail) SandboxUserNS() string {
	pid := j.own.initPID.Load()
	if pid <= 0 {
		return ""
	}
	ns, err := os.Readlink("/proc/" + strconv.FormatInt(pid, 10) + "/ns/user")
	if err != nil {
		return ""
	}
	return ns
}

// FlowOwner returns the process behind the sandbox's flow of proto ("tcp"
// or "udp") from src (the sandbox's end; the zero AddrPort when unknown:
// dst must then name one socket) to dst, if its socket is still open. It
// reads the kernel's socket diagnostics and the sandbox's /proc, so it is
// not for a packet path: call it off the stack's loop.
func (j *Jail) FlowOwner(proto string, src, dst netip.AddrPort) (Owner, bool) {
	j.own.mu.RLock()
	defer j.own.mu.RUnlock()
	d := j.own.diag
	if d == nil || j.closed.Load() || j.own.procFD.Load() < 0 {
		return Owner{}, false
	}
	ino, err := d.Find(proto, src, dst)
	if err != nil || ino == 0 {
		return Owner{}, false
	}
	proc := j.sandboxProc()
	if proc < 0 {
		return Owner{}, false
	}
	o, ok := flowowner.FindSocket(proc, ino, int(j.own.last.Load()))
	if ok {
		j.own.last.Store(int64(o.PID))
	}
	return o, ok
}

// ownerAllowed reports whether one more lookup fits this second's bound.
func (j *Jail) ownerAllowed() bool {
	now := time.Now().Unix()
	if w := j.own.window.Load(); w != now && j.own.window.CompareAndSwap(w, now) {
		j.own.count.Store(0)
		j.own.spent.Store(0)
	}
	return j.own.spent.Load() < int64(maxOwnerTime) && j.own.count.Add(1) <= maxOwnerLookups
}

// boundedOwner is FlowOwner counted against this second's time bound.
func (j *Jail) boundedOwner(proto string, src, dst netip.AddrPort) (Owner, bool) {
	t0 := time.Now()
	o, ok := j.FlowOwner(proto, src, dst)
	j.own.spent.Add(int64(time.Since(t0)))
	return o, ok
}

// blockOwner fills in b's process, when a lookup is allowed and finds it.
func (j *Jail) blockOwner(b *netpolicy.Block, src netip.AddrPort) {
	if b.PID != 0 || j.own.diag == nil || !j.ownerAllowed() {
		return
	}
	var proto string
	switch b.Proto {
	case netpolicy.ProtoTCP:
		proto = "tcp"
	case netpolicy.ProtoUDP:
		proto = "udp"
	default:
		return
	}
	if o, ok := j.boundedOwner(proto, src, b.Dst); ok {
		b.PID, b.Argv, b.Cwd = o.PID, o.Argv, o.Cwd
	}
}

// requestOwner is the process behind an ask mode request's flow (the
// broker asks once per request), when a lookup is allowed and finds it.
func (j *Jail) requestOwner(f ask.Flow) *ask.Process {
	if j.own.diag == nil || !j.ownerAllowed() || (f.Proto != netpolicy.ProtoTCP && f.Proto != netpolicy.ProtoUDP) {
		return nil
	}
	o, ok := j.boundedOwner(f.Proto.String(), f.Src, f.Dst)
	if !ok {
		return nil
	}
	return &ask.Process{PID: o.PID, Argv: o.Argv, Cwd: o.Cwd}
}

// sandboxProc returns the sandbox's /proc, opened once through init's
// root; -1 when it cannot be reached (yet). It must be a procfs in which
// this process has no pid (not the host's): the sandbox's PID namespace.
func (j *Jail) sandboxProc() int {
	if fd := j.own.procFD.Load(); fd > 0 {
		return int(fd)
	}
	pid := j.own.initPID.Load()
	if pid <= 0 {
		return -1
	}
	root, err := unix.Open("/proc/"+strconv.FormatInt(pid, 10)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	defer unix.Close(root)
	fd, err := unix.Openat(root, "proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	var st unix.Statfs_t
	buf := make([]byte, 64)
	if unix.Fstatfs(fd, &st) != nil || st.Type != unix.PROC_SUPER_MAGIC {
		unix.Close(fd)
		return -1
	}
	if _, err := unix.Readlinkat(fd, "self", buf); err == nil {
		// This process has a pid there: not the sandbox's PID namespace.
		unix.Close(fd)
		return -1
	}
	if !j.own.procFD.CompareAndSwap(0, int64(fd)) {
		unix.Close(fd)
		return int(j.own.procFD.Load())
	}
	return fd
}

// attachDiag keeps a copy of the child's socket diagnostics socket.
func (j *Jail) attachDiag(f *os.File) error {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	j.own.diag = flowowner.NewDiag(fd)
	return nil
}

// closeOwners closes the lookup's socket and /proc.
func (j *Jail) closeOwners() {
	j.own.mu.Lock()
	defer j.own.mu.Unlock()
	if j.own.diag != nil {
		j.own.diag.Close()
	}
	if fd := j.own.procFD.Swap(-1); fd > 0 {
		unix.Close(int(fd))
	}
}

// auditQueue is how many allowed flows may wait for their owner's lookup
// before the audit log records them without it.
const auditQueue = 256

// auditFlows records allowed flows in the audit log with their owner,
// looked up off the stack's loop: the stack hands each flow to a queue;
// one goroutine looks up and writes. A full queue, or a lookup beyond the
// bound, writes the record without the owner.
type auditFlows struct {
	j    *Jail
	ch   chan queuedFlow
	done chan struct{}
}

func (j *Jail) newAuditFlows() *auditFlows {
	a := &auditFlows{j: j, ch: make(chan queuedFlow, auditQueue), done: make(chan struct{})}
	go a.run()
	return a
}

// close ends the queue, once the stack has stopped, and waits for the
// records queued to be written.
func (a *auditFlows) close() {
	if a == nil {
		return
	}
	close(a.ch)
	<-a.done
}

// queuedFlow is a flow waiting for its owner, and when it was let
// through; or (end set) a flow's end, queued behind it so that the two
// are written in order.
type queuedFlow struct {
	f   userstack.Flow
	t   time.Time
	e   userstack.FlowEnd
	end bool
}

func (a *auditFlows) note(f userstack.Flow) {
	select {
	case a.ch <- queuedFlow{f: f, t: time.Now()}:
	default:
		a.j.opts.Audit.flow(f, time.Now(), Owner{})
	}
}

// noteEnd is the userstack's OnFlowEnd: the end goes through the queue
// (after its flow's record); a full queue writes it at once.
func (a *auditFlows) noteEnd(e userstack.FlowEnd) {
	select {
	case a.ch <- queuedFlow{e: e, end: true}:
	default:
		a.j.opts.Audit.flowEnd(e)
	}
}

func (a *auditFlows) run() {
	defer close(a.done)
	for q := range a.ch {
		if q.end {
			a.j.opts.Audit.flowEnd(q.e)
			continue
		}
		if q.f.QType != "" {
			a.j.opts.Audit.flow(q.f, q.t, Owner{}) // a DNS query: no socket to look up
			continue
		}
		var o Owner
		if a.j.ownerAllowed() {
			o, _ = a.j.boundedOwner(q.f.Proto.String(), q.f.Src, q.f.Dst)
		}
		a.j.opts.Audit.flow(q.f, q.t, o)
	}
}
