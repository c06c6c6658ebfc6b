package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/control"
)

const watchHelp = `Usage: claude-sandbox watch [ID]

Shows, as they come, the requests of your sandboxes run with --ask (or of
sandbox ID) and how many flows their jails refuse, until q or Ctrl-C.
Each new request is shown with the keys that answer it: a approves it
for the session, o once, d denies it, s leaves it pending (claude-sandbox
approve and deny still can). From a pipe, the same letters are read as
lines. A key read less than a second after its prompt appeared answers
nothing (it may have been meant for the request before): press it again.
While a watch runs, the launchers print no notice line of their own for
new requests.
`

// watchPoll is how often watch asks the launchers; watchQuiet how long
// after its last poll a launcher keeps its notices quiet.
const (
	watchPoll  = 300 * time.Millisecond
	watchQuiet = 3 * watchPoll
)

// watchSettle is how long a prompt must have been shown before a key
// answers it (a variable for tests). The request a key answers is the
// one at the head of the queue when the key is read, which changes when
// a request is answered or expires: a session that makes two requests
// and knows when the first expires (it made it) could otherwise have a
// key meant for the first, or a second press typed ahead, answer the
// second before anyone has read it.
var watchSettle = time.Second

// watchKeyAt is a key and when it was read.
type watchKeyAt struct {
	b  byte
	at time.Time
}

type watchKey struct {
	sandbox string
	id      int
}

func watchMain(args []string, stdout, stderr io.Writer) int {
	f := newFlags("watch")
	var id string
	if len(args) > 0 && !wantsHelp(args[:1]) && len(args[0]) > 0 && args[0][0] != '-' {
		id, args = args[0], args[1:]
	}
	if code, done := parseFlags(f, args, watchHelp, stdout, stderr); done {
		return code
	}
	if f.NArg() > 0 {
		return usageLine(stderr, "watch", fmt.Sprintf("unexpected argument %q", f.Arg(0)))
	}
	uid := os.Getuid()
	if id != "" {
		if _, err := control.Lookup(uid, os.Getenv, id); err != nil {
			fmt.Fprintf(stderr, "claude-sandbox watch: %v\n", err)
			return 1
		}
	}
	// Keys: single bytes from a terminal in non-canonical mode, or
	// letters on lines from a pipe.
	keys := make(chan watchKeyAt, 16)
	in := os.Stdin
	restore, raw := rawInput(in)
	defer restore()
	eol := "\n"
	if raw {
		eol = "\r\n" // the terminal's output still maps \n, but be plain
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		var b [1]byte
		for {
			n, err := in.Read(b[:])
			if n == 1 {
				keys <- watchKeyAt{b[0], time.Now()}
			}
			if err != nil {
				close(keys)
				return
			}
		}
	}()
	var mu sync.Mutex
	// promptLast: the last line shown is the prompt of the request a key
	// answers (the head of the queue). Any other line (a new request, a
	// count of refusals) is followed by that prompt again, so the last
	// line never names another request than the one a key answers.
	promptLast := false
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format+eol, a...)
		promptLast = false
	}
	say("claude-sandbox watch: keys: a approve (session), o once, d deny, s skip, q quit")
	seen := map[watchKey]bool{}
	blocked := map[string]int{}
	var queue []ask.Request // shown, not yet answered here
	paths := map[string]control.Sandbox{}
	var shown time.Time   // when the head's prompt was first shown
	var prompted watchKey // the request of that prompt
	prompt := func() {
		if len(queue) > 0 {
			q := queue[0]
			if k := (watchKey{q.Sandbox, q.ID}); k != prompted {
				shown, prompted = time.Now(), k
			}
			say("%s/%d: %s %s: [a]pprove, [o]nce, [d]eny, [s]kip?", q.Sandbox, q.ID, q.Proto, escapeReport(q.What()))
			promptLast = true
		}
	}
	poll := func() {
		var list []control.Sandbox
		if id != "" {
			if s, err := control.Lookup(uid, os.Getenv, id); err == nil {
				list = []control.Sandbox{s}
			}
		} else {
			list = control.Find(uid, os.Getenv)
		}
		pending := map[watchKey]bool{}
		for _, s := range list {
			r, err := control.Call(s.Path, control.Request{Op: control.OpRequests, Watch: true})
			if err != nil || !r.OK {
				continue
			}
			paths[s.ID] = s
			if r.Status != nil && r.Status.Blocked != blocked[s.ID] {
				if r.Status.Blocked > blocked[s.ID] {
					say("%s: %d flows refused so far", s.ID, r.Status.Blocked)
				}
				blocked[s.ID] = r.Status.Blocked
			}
			for _, q := range r.Requests {
				k := watchKey{s.ID, q.ID}
				pending[k] = true
				if !seen[k] {
					seen[k] = true
					proc := ""
					if q.Who != nil {
						proc = " (" + processLabel(q.Who) + ")"
					}
					say("%s: request %d: %s %s%s, held %d, refused at %s", s.ID, q.ID, q.Proto, escapeReport(q.What()), proc, q.Held, q.Expires.Local().Format("15:04:05"))
					queue = append(queue, q)
					if len(queue) == 1 {
						prompt()
					}
				}
			}
		}
		// Answered elsewhere, or expired: off the queue.
		out := queue[:0]
		head := false
		for i, q := range queue {
			if pending[watchKey{q.Sandbox, q.ID}] {
				out = append(out, q)
			} else {
				say("%s/%d: answered elsewhere or expired", q.Sandbox, q.ID)
				head = head || i == 0
			}
		}
		queue = out
		if head {
			prompt()
		}
	}
	answer := func(key watchKeyAt) {
		if len(queue) == 0 {
			return
		}
		k := key.b
		q := queue[0]
		if k != 's' && key.at.Before(shown.Add(watchSettle)) {
			// Typed before this prompt was shown, or just after:
			// meant for the one before, perhaps.
			say("%s/%d: shown just now: press again to answer it", q.Sandbox, q.ID)
			return
		}
		s, ok := paths[q.Sandbox]
		if !ok {
			return
		}
		req := control.Request{Op: control.OpApprove, Req: q.ID, Scope: "session"}
		switch k {
		case 'o':
			req.Scope = "once"
		case 'd':
			req = control.Request{Op: control.OpDeny, Req: q.ID}
		case 's':
			say("%s/%d: left pending", q.Sandbox, q.ID)
			queue = queue[1:]
			prompt()
			return
		}
		r, err := control.Call(s.Path, req)
		switch {
		case err != nil:
			say("%s/%d: %v", q.Sandbox, q.ID, err)
		case !r.OK:
			say("%s/%d: %s", q.Sandbox, q.ID, r.Error)
		case req.Op == control.OpDeny:
			say("%s/%d: denied", q.Sandbox, q.ID)
		default:
			say("%s/%d: approved (%s)", q.Sandbox, q.ID, req.Scope)
		}
		queue = queue[1:]
		prompt()
	}
	tick := time.NewTicker(watchPoll)
	defer tick.Stop()
	poll()
	say("watching %d sandboxes in the ask mode", len(paths))
	for {
		select {
		case <-sigs:
			return 0
		case key, ok := <-keys:
			if !ok {
				// End of input: keep watching without keys.
				keys = nil
				continue
			}
			switch k := key.b; k {
			case 'q', 4: // q, Ctrl-D
				return 0
			case 3: // Ctrl-C with the terminal's signals off
				return 0
			case 'a', 'o', 'd', 's':
				answer(key)
			}
		case <-tick.C:
			poll()
		}
		if !promptLast {
			prompt()
		}
	}
}

// rawInput turns off line editing and echo on f when it is a terminal
// (signals stay on), and returns what restores it.
func rawInput(f *os.File) (func(), bool) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}, false
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if unix.IoctlSetTermios(fd, unix.TCSETS, &t) != nil {
		return func() {}, false
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, true
}
