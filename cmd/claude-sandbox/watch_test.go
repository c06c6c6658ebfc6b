package main

import (
	"bufio"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/control"
)

// fakeAsker is a launcher in the ask mode whose pending requests the
// test sets, counting the approvals and denials it is sent.
type fakeAsker struct {
	mu       sync.Mutex
	pending  []ask.Request
	polls    int
	blocked  int
	answered atomic.Int32
}

func (f *fakeAsker) set(list ...ask.Request) {
	f.mu.Lock()
	f.pending = list
	f.mu.Unlock()
}

func (f *fakeAsker) handle(req control.Request) control.Response {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch req.Op {
	case control.OpRequests:
		f.polls++
		return control.Response{OK: true, Requests: f.pending, Status: &control.Status{Ask: true, Blocked: f.blocked}}
	case control.OpApprove, control.OpDeny:
		f.answered.Add(1)
		for _, q := range f.pending {
			if q.ID == req.Req {
				return control.Response{OK: true, Requests: []ask.Request{q}}
			}
		}
		return control.Response{Error: "no such request"}
	}
	return control.Response{Error: "unknown"}
}

// runWatch runs watch ID with stdin and stdout pipes of the test's: keys
// go in through the returned writer, lines come out of the reader.
func runWatch(t *testing.T, id string) (keys io.WriteCloser, lines *bufio.Reader, done chan int) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = inR
	outR, outW := io.Pipe()
	done = make(chan int, 1)
	go func() {
		code := watchMain([]string{id}, outW, io.Discard)
		outW.Close()
		done <- code
	}()
	t.Cleanup(func() {
		// q ends it (the end of its input does not); then its output
		// is drained until it has.
		_, _ = io.WriteString(inW, "q\n")
		inW.Close()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
		<-done
		os.Stdin = old
		inR.Close()
	})
	return inW, bufio.NewReader(outR), done
}

func waitWatchLine(t *testing.T, r *bufio.Reader, subs ...string) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("watch ended before %q: %v", subs, err)
		}
		for _, s := range subs {
			if strings.Contains(line, s) {
				return line
			}
		}
	}
}

// The session makes request 1 (a name a person would approve) and
// request 2 (one they would not), and knows when 1 expires (it made
// it): a key pressed for 1 as it expires, or a second press typed ahead,
// must not answer 2, whose prompt nobody has read yet.
func TestWatchKeyNotForANewPrompt(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	const id = "wwwwwwww"
	now := time.Now()
	benign := ask.Request{ID: 1, Sandbox: id, Proto: "tcp", Name: "pypi.org", Port: 443, Kind: "name", Since: now, Expires: now.Add(time.Minute)}
	evil := ask.Request{ID: 2, Sandbox: id, Proto: "tcp", Name: "evil.test", Port: 443, Kind: "name", Since: now, Expires: now.Add(time.Minute)}
	f := &fakeAsker{}
	srv, err := control.Listen(id, f.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	old := watchSettle
	defer func() { watchSettle = old }()
	watchSettle = time.Hour // every key in this run comes right after its prompt
	f.set(benign)
	keys, lines, _ := runWatch(t, id)
	waitWatchLine(t, lines, id+"/1: tcp pypi.org:443: [a]pprove")
	// Request 1 expires; request 2 is the head now.
	f.set(evil)
	waitWatchLine(t, lines, id+"/2: tcp evil.test:443: [a]pprove")
	for _, k := range []string{"a\n", "o\n", "d\n"} {
		if _, err := io.WriteString(keys, k); err != nil {
			t.Fatal(err)
		}
		got := waitWatchLine(t, lines, "press again", "approved", "denied")
		if !strings.Contains(got, "press again") || f.answered.Load() != 0 {
			t.Fatalf("key %q, sent as request 2's prompt appeared, answered it: %q", strings.TrimSpace(k), got)
		}
	}
}

// Once the prompt has been shown long enough, a key answers it.
func TestWatchKeyAnswers(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	const id = "vvvvvvvv"
	now := time.Now()
	f := &fakeAsker{}
	f.set(ask.Request{ID: 1, Sandbox: id, Proto: "tcp", Name: "pypi.org", Port: 443, Kind: "name", Since: now, Expires: now.Add(time.Minute)})
	srv, err := control.Listen(id, f.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	old := watchSettle
	defer func() { watchSettle = old }()
	watchSettle = 0
	keys, lines, _ := runWatch(t, id)
	waitWatchLine(t, lines, id+"/1: tcp pypi.org:443: [a]pprove")
	if _, err := io.WriteString(keys, "a\n"); err != nil {
		t.Fatal(err)
	}
	if got := waitWatchLine(t, lines, "press again", "approved"); !strings.Contains(got, "approved (session)") || f.answered.Load() != 1 {
		t.Fatalf("the key did not answer: %q", got)
	}
}

// The session makes request 1 (a destination a person would deny), then
// request 2 (one they would approve), and keeps refused flows coming:
// the lines for request 2 and for the refusals must not be the last a
// person reads while a key answers request 1: its prompt follows each.
func TestWatchPromptIsLastLine(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	const id = "uuuuuuuu"
	now := time.Now()
	evil := ask.Request{ID: 1, Sandbox: id, Proto: "tcp", Name: "evil.test", Port: 443, Kind: "name", Since: now, Expires: now.Add(time.Minute)}
	benign := ask.Request{ID: 2, Sandbox: id, Proto: "tcp", Name: "pypi.org", Port: 443, Kind: "name", Since: now, Expires: now.Add(time.Minute)}
	f := &fakeAsker{}
	f.set(evil)
	srv, err := control.Listen(id, f.handle)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, lines, _ := runWatch(t, id)
	head := id + "/1: tcp evil.test:443: [a]pprove"
	waitWatchLine(t, lines, head)
	f.set(evil, benign)
	waitWatchLine(t, lines, "request 2: tcp pypi.org:443")
	f.mu.Lock()
	f.blocked = 7
	f.mu.Unlock()
	for _, after := range []string{"request 2", "7 flows refused"} {
		next, err := lines.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(next, head) {
			t.Fatalf("after the line for %s came %q, not the prompt of request 1, which a key answers", after, next)
		}
		if after == "request 2" {
			waitWatchLine(t, lines, "7 flows refused")
		}
	}
}
