package netpolicy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Block records one refused flow.
type Block struct {
	Time  time.Time      `json:"time"`
	Proto Proto          `json:"proto"`
	Dst   netip.AddrPort `json:"dst"`
	// Name is the host name the flow was for, when the domain allowlist
	// decided it (a DNS query, or a connection to a synthetic address):
	// "evil.example". Empty for flows decided by address.
	Name string `json:"name,omitempty"`
	// Rule is the [Verdict.Rule] that refused the flow.
	Rule string `json:"rule"`
	// ViaDefault is the host route through a default route's gateway
	// that refused the flow ([Verdict.ViaDefaultRoute]): the exit summary
	// names those, which --internet-cidr exempts when they are internet.
	// Zero for any other refusal. Not in the block log (Rule says it).
	ViaDefault netip.Prefix `json:"-"`
	// The process behind the flow, when the jail found it (its socket
	// still open when looked up): its pid in the sandbox, its argv and
	// working directory, bounded and escaped (package flowowner).
	PID  int      `json:"pid,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
}

// Process names the process behind the block for a summary: "nc, pid
// 42" (the base name of argv[0]); "" when unknown.
func (b Block) Process() string {
	if b.PID == 0 {
		return ""
	}
	name := "?"
	if len(b.Argv) > 0 {
		name = b.Argv[0]
		if i := strings.LastIndexByte(name, '/'); i >= 0 && i < len(name)-1 {
			name = name[i+1:]
		}
	}
	return fmt.Sprintf("%s, pid %d", name, b.PID)
}

// String renders the block as "tcp 10.1.2.3:22 (private range 10.0.0.0/8)".
// ICMP destinations are rendered without a port. A block by name is
// rendered by its name, with the port for a connection: "tcp
// evil.example:443 (domain not allowed)", "dns evil.example (domain not
// allowed)" for a query (port 53 of the resolver).
func (b Block) String() string {
	dst := b.Dst.String()
	switch {
	case b.Name != "" && b.Dst.Port() == DNSPort && b.Proto != ProtoICMP:
		return fmt.Sprintf("dns %s (%s)", b.Name, b.Rule)
	case b.Name != "":
		dst = fmt.Sprintf("%s:%d", b.Name, b.Dst.Port())
	case b.Proto == ProtoICMP:
		dst = b.Dst.Addr().String()
	}
	return fmt.Sprintf("%s %s (%s)", b.Proto, dst, b.Rule)
}

// AppendJSONL appends b as one JSON object and a newline to dst.
func AppendJSONL(dst []byte, b Block) ([]byte, error) {
	enc, err := json.Marshal(b)
	if err != nil {
		return dst, err
	}
	dst = append(dst, enc...)
	return append(dst, '\n'), nil
}

// JSONLWriter writes blocks as JSON lines (one object per line). It is safe
// for concurrent use; each Record is a single Write call.
type JSONLWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewJSONLWriter returns a JSONLWriter on w.
func NewJSONLWriter(w io.Writer) *JSONLWriter { return &JSONLWriter{w: w} }

// Record writes b as one line.
func (j *JSONLWriter) Record(b Block) error {
	line, err := AppendJSONL(nil, b)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.w.Write(line)
	return err
}

type blockKey struct {
	proto Proto
	dst   netip.AddrPort
	name  string
	rule  string
}

// Summary renders blocks as one line: "3 connections blocked: tcp
// 10.1.2.3:22 (private range 10.0.0.0/8) x2, udp 192.168.1.9:5064 (private
// range 192.168.0.0/16)". Repeats of the same protocol, destination and
// rule are listed once with a count; at most limit distinct destinations are
// listed (limit <= 0 means 5), the rest as "and N more". No blocks give "".
func Summary(blocks []Block, limit int) string {
	var t Tally
	for _, b := range blocks {
		t.Add(b)
	}
	return t.Summary(limit)
}

// tallyLimit bounds the distinct destinations a Tally remembers, so a
// sandbox scanning the whole private range cannot grow memory without
// bound.
const tallyLimit = 1000

// Tally counts blocks for a summary line. The zero value is ready; it is
// safe for concurrent use. It remembers at most 1000 distinct
// destinations; later distinct ones are only counted.
type Tally struct {
	mu      sync.Mutex
	total   int
	order   []blockKey
	counts  map[blockKey]int
	dropped int
	// who is the first process found behind each destination.
	who map[blockKey]string
}

// Add counts one block.
func (t *Tally) Add(b Block) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total++
	k := blockKey{b.Proto, b.Dst, b.Name, b.Rule}
	if b.Name != "" {
		// By name: every synthetic or resolver address of one name and
		// port counts as one destination.
		k.dst = netip.AddrPortFrom(netip.Addr{}, b.Dst.Port())
		if b.Dst.Port() == DNSPort && b.Proto != ProtoICMP {
			k.proto = 0 // a query, over UDP or TCP alike: "dns NAME"
		}
	}
	if t.counts == nil {
		t.counts = map[blockKey]int{}
	}
	if _, ok := t.counts[k]; !ok {
		if len(t.order) >= tallyLimit {
			t.dropped++
			return
		}
		t.order = append(t.order, k)
	}
	t.counts[k]++
	if p := b.Process(); p != "" {
		if t.who == nil {
			t.who = map[blockKey]string{}
		}
		if _, ok := t.who[k]; !ok {
			t.who[k] = p
		}
	}
}

// Total returns how many blocks were counted.
func (t *Tally) Total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Summary renders the tally as described for the Summary function.
func (t *Tally) Summary(limit int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total == 0 {
		return ""
	}
	if limit <= 0 {
		limit = 5
	}
	var sb strings.Builder
	noun := "connections"
	if t.total == 1 {
		noun = "connection"
	}
	fmt.Fprintf(&sb, "%d %s blocked: ", t.total, noun)
	for i, k := range t.order {
		if i == limit {
			break
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(Block{Proto: k.proto, Dst: k.dst, Name: k.name, Rule: k.rule}.String())
		if p := t.who[k]; p != "" {
			fmt.Fprintf(&sb, " (%s)", p)
		}
		if n := t.counts[k]; n > 1 {
			fmt.Fprintf(&sb, " x%d", n)
		}
	}
	more := t.dropped
	if len(t.order) > limit {
		more += len(t.order) - limit
	}
	if more > 0 {
		fmt.Fprintf(&sb, ", and %d more", more)
	}
	return sb.String()
}

// RecordChange writes c as one line, with the time set if it is zero.
func (j *JSONLWriter) RecordChange(c Change) error {
	if c.Time.IsZero() {
		c.Time = time.Now()
	}
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.w.Write(line)
	return err
}
