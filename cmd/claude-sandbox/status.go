package main

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/jail"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
)

// The --json-status-fd lines, for programs in any language that run
// claude-sandbox (docs/cli.md). One JSON object a line, told apart by
// "event": "started" once the command runs, "blocked" per flow the jail
// refused (with --json-status-blocked), and last "exited", or "failed"
// when the sandbox could not be built or the command not started.
type statusStarted struct {
	Event      string            `json:"event"`
	ID         string            `json:"id,omitempty"` // the sandbox's, for ps, allow and revoke
	PID        int               `json:"pid"`
	InitPID    int               `json:"init-pid"`
	Namespaces map[string]uint64 `json:"namespaces,omitempty"`
	Jail       *statusJail       `json:"jail,omitempty"`
}

type statusJail struct {
	Addr4   string `json:"addr4"`
	Addr6   string `json:"addr6,omitempty"`
	Gateway string `json:"gateway"`
}

type statusBlocked struct {
	Event string `json:"event"`
	netpolicy.Block
}

type statusEnd struct {
	Event    string `json:"event"`
	ExitCode int    `json:"exit-code"`
	Error    string `json:"error,omitempty"`
	// BlockedDropped counts blocked flows not written because the reader
	// fell too far behind.
	BlockedDropped int `json:"blocked-dropped,omitempty"`
}

// openStatusFD checks that fd is open for writing and keeps it from the
// sandbox's stages.
func openStatusFD(fd int) (*os.File, error) {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, usagef("--json-status-fd %d: not an open descriptor (open it for the command, e.g. 3>status.jsonl)", fd)
	}
	if fl&unix.O_ACCMODE == unix.O_RDONLY {
		return nil, usagef("--json-status-fd %d: open for reading only; it must be writable", fd)
	}
	unix.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "json-status-fd-"+strconv.Itoa(fd)), nil
}

// statusWriter writes the status lines from a goroutine of its own, so
// that a slow reader never stalls the jail's stack: blocked flows wait in
// a bounded queue, and past it are counted (the end line says how many).
// Blocked flows seen before the started line are written after it.
type statusWriter struct {
	f       *os.File
	blocked bool   // write blocked lines
	id      string // the sandbox's id (set before the start)

	mu      sync.Mutex
	cond    *sync.Cond
	q       [][]byte
	early   [][]byte
	open    bool // the started line is queued
	closed  bool
	dropped int
	done    chan struct{}
}

const maxStatusQueue = 4096

func newStatusWriter(f *os.File, blocked bool) *statusWriter {
	s := &statusWriter{f: f, blocked: blocked, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

func (s *statusWriter) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.q) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.q) == 0 {
			s.mu.Unlock()
			return
		}
		line := s.q[0]
		s.q = s.q[1:]
		s.mu.Unlock()
		// A reader that went away costs the sandbox nothing.
		_, _ = s.f.Write(line)
	}
}

func line(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(statusEnd{Event: "error", Error: err.Error()})
	}
	return append(b, '\n')
}

// block is the jail's OnBlock hook.
func (s *statusWriter) block(b netpolicy.Block) {
	if !s.blocked {
		return
	}
	l := line(statusBlocked{Event: "blocked", Block: b})
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
	case len(s.q)+len(s.early) >= maxStatusQueue:
		s.dropped++
	case !s.open:
		s.early = append(s.early, l)
	default:
		s.q = append(s.q, l)
		s.cond.Signal()
	}
}

// started writes the started line for pr.
func (s *statusWriter) started(pr *nsexec.Process, setup *jail.Setup) {
	st := statusStarted{Event: "started", ID: s.id, PID: pr.CommandPID(), InitPID: pr.InitPID()}
	st.Namespaces, _ = pr.Namespaces()
	if setup != nil {
		st.Jail = &statusJail{Addr4: setup.Addr4.String(), Gateway: setup.Gateway.String()}
		if setup.Addr6.IsValid() {
			st.Jail.Addr6 = setup.Addr6.String()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q = append(s.q, line(st))
	s.q = append(s.q, s.early...)
	s.early, s.open = nil, true
	s.cond.Signal()
}

// end writes the last line ("exited", or "failed" when the command never
// ran), waits for every line to be written, and closes the descriptor.
func (s *statusWriter) end(event string, code int, err error) {
	s.mu.Lock()
	e := statusEnd{Event: event, ExitCode: code, BlockedDropped: s.dropped}
	if err != nil {
		e.Error = err.Error()
	}
	s.q = append(s.q, line(e))
	s.closed = true
	s.cond.Signal()
	s.mu.Unlock()
	<-s.done
	s.f.Close()
}

// runWithStatus is nsexec.Run, with the status lines written to s.
func runWithStatus(s *statusWriter, setup *jail.Setup, start func() (*nsexec.Process, error)) (int, error) {
	pr, err := start()
	if err != nil {
		code := nsexec.StartErrorCode(err)
		s.end("failed", code, err)
		return code, err
	}
	s.started(pr, setup)
	code, err := pr.Wait()
	s.end("exited", code, err)
	return code, err
}
