package jail

import (
	"encoding/json"
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack"
)

// The audit log (--audit-log FILE, the shadow's audit-log key,
// sandbox.Spec.AuditLog): one JSON object a line, written by the launcher
// on the host (never inside the sandbox), for every flow decision the jail
// records (TCP flows let through; every refusal the block log gets), every
// reach changed while running (claude-sandbox allow and revoke) and every
// change of the blocked set. Bounded: when the file would pass its cap,
// it is renamed FILE.1 (replacing the one before) and a new FILE begins,
// so the two never hold more than twice the cap.

// DefaultAuditMax is the audit log's size cap, per file.
const DefaultAuditMax = 16 << 20

// AuditRecord is one line of the audit log.
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox,omitempty"`
	// Event is "flow" (a flow decision), "flow-end" (the end of a flow
	// let through: its bytes each way and duration), "dns" (a query the
	// domain allowlist's resolver allowed), "reach" (allow or revoke while
	// running), "policy" (the blocked set changed), "request" (a
	// request of the ask mode answered or expired: Verdict says how), or
	// "ssh-sign" / "ssh-refuse" (the --ssh-agent agent signed, or
	// refused, for Host with the key whose fingerprint is Key; Reason
	// says why not).
	Event   string `json:"event"`
	Proto   string `json:"proto,omitempty"`
	Name    string `json:"name,omitempty"`
	Addr    string `json:"addr,omitempty"`
	Port    uint16 `json:"port,omitempty"`
	Verdict string `json:"verdict,omitempty"` // "allowed", "refused"
	Rule    string `json:"rule,omitempty"`
	Change  string `json:"change,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Host    string `json:"host,omitempty"`
	Key     string `json:"key,omitempty"`
	// QType is a "dns" record's query type (A, AAAA, TXT...): a query
	// for Name the domain allowlist's resolver (at Addr, Port) answered
	// or relayed; refused ones are "flow" records, verdict "refused".
	QType string `json:"qtype,omitempty"`
	// Src is a flow's sandbox end (address and port of its socket), by
	// which a "flow-end" record pairs with its "flow" record.
	Src string `json:"src,omitempty"`
	// A "flow-end" record's: the payload bytes relayed from the sandbox
	// out (BytesOut) and to it (BytesIn), UDP's datagrams each way, the
	// flow's duration in milliseconds, and how it ended (Ended: see
	// userstack.FlowEnd.How). Pointers so that a zero is written.
	BytesOut     *uint64 `json:"bytes_out,omitempty"`
	BytesIn      *uint64 `json:"bytes_in,omitempty"`
	DatagramsOut *uint64 `json:"datagrams_out,omitempty"`
	DatagramsIn  *uint64 `json:"datagrams_in,omitempty"`
	DurationMS   *int64  `json:"duration_ms,omitempty"`
	Ended        string  `json:"ended,omitempty"`
	// The process behind a flow, when found (its socket still open when
	// looked up): its pid in the sandbox, argv and working directory,
	// bounded and escaped.
	PID  int      `json:"pid,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
}

// Audit is an open audit log. Safe for concurrent use.
type Audit struct {
	path    string
	sandbox string
	max     int64

	mu   sync.Mutex
	f    *os.File
	size int64
	err  error // the first write error (the log stops)
}

// OpenAudit opens (appends to) the audit log at path, mode 0600, for
// sandbox id; max <= 0: DefaultAuditMax.
func OpenAudit(path, sandbox string, max int64) (*Audit, error) {
	if max <= 0 {
		max = DefaultAuditMax
	}
	f, size, err := openAuditFile(path, false)
	if err != nil {
		return nil, err
	}
	return &Audit{path: path, sandbox: sandbox, max: max, f: f, size: size}, nil
}

// openAuditFile opens the log at path for appending (truncated with
// trunc: a rotation's new file) and returns its size: never through a
// symlink, never blocking on a FIFO, and a non-regular file is refused
// once open, at the launch and at every rotation alike.
func openAuditFile(path string, trunc bool) (*os.File, int64, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND | unix.O_NOFOLLOW | unix.O_NONBLOCK
	if trunc {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// Write appends r (its Time and Sandbox filled in when empty).
func (a *Audit) Write(r AuditRecord) {
	if a == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if r.Sandbox == "" {
		r.Sandbox = a.sandbox
	}
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return
	}
	if a.size > 0 && a.size+int64(len(b)) > a.max {
		a.rotate()
		if a.f == nil {
			return
		}
	}
	n, err := a.f.Write(b)
	a.size += int64(n)
	if err != nil && a.err == nil {
		a.err = err
	}
}

// rotate renames the log FILE.1 and starts a new one (a.mu held).
func (a *Audit) rotate() {
	a.f.Close()
	a.f = nil
	if err := os.Rename(a.path, a.path+".1"); err != nil && a.err == nil {
		a.err = err
	}
	f, size, err := openAuditFile(a.path, true)
	if err != nil {
		if a.err == nil {
			a.err = err
		}
		return
	}
	a.f, a.size = f, size
}

// Close closes the log and returns the first write error, if any.
func (a *Audit) Close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		a.f.Close()
		a.f = nil
	}
	return a.err
}

func (a *Audit) block(b netpolicy.Block) {
	if a == nil {
		return
	}
	r := AuditRecord{Time: b.Time, Event: "flow", Proto: b.Proto.String(), Name: b.Name, Verdict: "refused", Rule: b.Rule, PID: b.PID, Argv: b.Argv, Cwd: b.Cwd}
	if b.Dst.Addr().IsValid() {
		r.Addr = b.Dst.Addr().String()
		r.Port = b.Dst.Port()
	}
	a.Write(r)
}

// flow records a flow let through at t, and o, the process behind it
// (the zero Owner: not found).
func (a *Audit) flow(f userstack.Flow, t time.Time, o Owner) {
	if a == nil {
		return
	}
	if f.QType != "" {
		a.Write(AuditRecord{Time: t, Event: "dns", Proto: f.Proto.String(), Name: f.Name, QType: f.QType, Addr: f.Dst.Addr().String(), Port: f.Dst.Port(), Verdict: "allowed", Rule: f.Rule})
		return
	}
	r := AuditRecord{Time: t, Event: "flow", Proto: f.Proto.String(), Name: f.Name, Verdict: "allowed", Rule: f.Rule, Port: f.Dst.Port(), Src: f.Src.String(), PID: o.PID, Argv: o.Argv, Cwd: o.Cwd}
	switch {
	case f.Target.IsValid():
		r.Addr, r.Port = f.Target.Addr().String(), f.Target.Port()
	case f.Name == "":
		r.Addr = f.Dst.Addr().String()
	}
	a.Write(r)
}

// flowEnd records the end of a flow let through (at its end: the
// record's time is the end's).
func (a *Audit) flowEnd(e userstack.FlowEnd) {
	if a == nil {
		return
	}
	ms := e.Duration.Milliseconds()
	r := AuditRecord{Time: e.Start.Add(e.Duration), Event: "flow-end", Proto: e.Proto.String(), Name: e.Name,
		Port: e.Dst.Port(), Src: e.Src.String(), BytesOut: &e.Up, BytesIn: &e.Down, DurationMS: &ms, Ended: e.How}
	if e.Name == "" {
		r.Addr = e.Dst.Addr().String()
	}
	if e.Proto == netpolicy.ProtoUDP {
		r.DatagramsOut, r.DatagramsIn = &e.UpPackets, &e.DownPackets
	}
	a.Write(r)
}

func (a *Audit) change(c netpolicy.Change) {
	if a == nil {
		return
	}
	a.Write(AuditRecord{Time: c.Time, Event: "policy", Change: c.Event + " " + c.Prefix, Rule: c.Rule, Reason: c.Reason})
}
