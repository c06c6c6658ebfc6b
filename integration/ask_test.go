package integration

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
	"github.com/claude-sandbox/claude-sandbox/internal/control"
	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// send asks the sandbox for a probe without waiting for its answer (a
// held connection answers when the request is decided): recv reads it.
func (s *liveSandbox) send(probe string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, probe+"\n"); err != nil {
		s.t.Fatalf("ask %q: %v", probe, err)
	}
}

func (s *liveSandbox) recv() string {
	s.t.Helper()
	line, err := s.out.ReadString('\n')
	if err != nil {
		s.t.Fatalf("answer: %v", err)
	}
	return strings.TrimSpace(line)
}

// waitRequest polls claude-sandbox requests --json (as uid) until a
// request matching want is pending, and returns it.
func waitRequest(t *testing.T, bin string, uid int, want func(ask.Request) bool) ask.Request {
	t.Helper()
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var list []ask.Request
		list, last = hostList[ask.Request](t, bin, uid, "requests", "--json")
		for _, q := range list {
			if want(q) {
				return q
			}
		}
	}
	// What the commands say beyond their lists (a sandbox they could not
	// reach is skipped with a line on stderr), for a failure seen once
	// under the whole suite's load and not since.
	req, _ := hostAs(uid, bin, "requests", "--json").CombinedOutput()
	ps, _ := hostAs(uid, bin, "ps", "--json").CombinedOutput()
	t.Fatalf("no such request pending; requests --json: %s\nrequests again (with stderr): %s\nps --json: %s", last, req, ps)
	return ask.Request{}
}

// wantWho checks that a request names the process behind its flow: the
// lab's probe ("egressprobe serve"), found by the jail's socket lookup
// (held in the userstack for a name, in the sink for an address).
func wantWho(t *testing.T, q ask.Request) {
	t.Helper()
	if q.Who == nil || q.Who.PID <= 0 || len(q.Who.Argv) != 2 || filepath.Base(q.Who.Argv[0]) != "egressprobe" || q.Who.Argv[1] != "serve" {
		t.Errorf("request %d names the process %+v, want the probe (egressprobe serve)", q.ID, q.Who)
	}
}

// reqRef names a request as approve and deny take it: ID/N, never N
// alone, as other tests' sandboxes may have a request N too.
func reqRef(q ask.Request) string { return q.Sandbox + "/" + strconv.Itoa(q.ID) }

func pendingCount(t *testing.T, bin string, uid int) int {
	t.Helper()
	list, _ := hostList[ask.Request](t, bin, uid, "requests", "--json")
	return len(list)
}

// TestAskMode: with --allow-domain allowed.test --ask, a connection to a
// name off the list is held (its query answered with a synthetic address,
// the lab's resolver never asked), listed by requests --json, and
// completes without being retried once approve --session returns; a
// second connection to it then passes without a request. deny refuses
// the held connection (ECONNREFUSED, the program's normal error) and a
// later one without asking. An internal address (10.1.2.3:5064, which
// the kernel routes to the sink) is refused when the request times out
// and reached once approved; a host loopback port approved --once lets
// only the held connection go, the next one asks again. approve run
// inside a sandbox fails, the request staying pending.
func TestAskMode(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		const epics = "10.1.2.3"
		ip(t, "-n", l.world, "addr", "add", epics+"/32", "dev", "lo")
		rec := &recorder{tcp: map[net.Conn][]byte{}}
		d := &namesLab{names: map[string]string{
			"allowed.test.": labInternet, "other.test.": labInternet, "third.test.": labInternet,
			"fourth.test.": labInternet, "fifth.test.": labInternet,
		}}
		l.serveRecordedNames(l.world, labDNS+":53", d, rec)
		l.echoTCP(l.world, labInternet+":7000")
		l.echoTCP(l.world, epics+":5064")
		l.echoUDP(l.world, labInternet+":7001")
		l.echoTCP(l.host, "127.0.0.1:8085")
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		const timeout = 20 * time.Second
		audit := filepath.Join(testutil.MkdirFor(t, uid), "audit.jsonl")
		s := l.startLive(t, uid, "", "--allow-domain", "allowed.test", "--ask", "--ask-timeout", timeout.String(), "--audit-log", audit)
		if got := s.try("tcp-wait allowed.test:7000"); got != "ok" {
			t.Fatalf("control: allowed.test:7000: %s", got)
		}
		asked := func(name string) bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, q := range rec.dns {
				if strings.Contains(strings.ToLower(string(q)), name) {
					return true
				}
			}
			return false
		}

		// A name off the list: held, approved for the session.
		s.send("tcp-wait other.test:7000")
		// The process is looked up off the packet path: wait for it too.
		q := waitRequest(t, bin, uid, func(q ask.Request) bool { return q.Name == "other.test" && q.Who != nil })
		// Other tests' sandboxes may run meanwhile: this one is the
		// request's.
		st := psFind(t, bin, uid, q.Sandbox)
		if !st.Ask || st.Pending != 1 {
			t.Errorf("ps: %+v, want ask and one pending", st)
		}
		if q.Sandbox != st.ID || q.Proto != "tcp" || q.Port != 7000 || q.Kind != "name" || q.Held < 1 {
			t.Errorf("request %+v", q)
		}
		wantWho(t, q)
		if asked("other") {
			t.Errorf("the lab's resolver was asked for other.test before any approval")
		}
		notice := "asks to reach other.test:7000: claude-sandbox approve " + reqRef(q) + " (or deny " + reqRef(q) + "; refused in 20s); from pid " + strconv.Itoa(q.Who.PID) + ` "egressprobe serve"`
		called := time.Now()
		if out, err := hostAs(uid, bin, "approve", reqRef(q), "--session").CombinedOutput(); err != nil {
			t.Fatalf("approve: %v: %s", err, out)
		}
		returned := time.Now()
		if got := s.recv(); got != "ok" {
			t.Fatalf("the held connection to other.test:7000 after approve --session: %s", got)
		}
		// Measured, not asserted.
		t.Logf("uid %d: approve took %v; the held connection completed (echo included) %v after it returned", uid, returned.Sub(called), time.Since(returned))
		if got := s.try("tcp-wait other.test:7000"); got != "ok" {
			t.Errorf("a second connection to other.test:7000: %s", got)
		}
		if n := pendingCount(t, bin, uid); n != 0 {
			t.Errorf("%d requests pending after the approved name's second connection", n)
		}

		// UDP to a name off the list: held (dropped while pending, the
		// client sends again), approved for the session.
		s.send("udp-wait fourth.test:7001")
		q = waitRequest(t, bin, uid, func(q ask.Request) bool { return q.Name == "fourth.test" })
		if q.Proto != "udp" || q.Port != 7001 {
			t.Errorf("request %+v", q)
		}
		if out, err := hostAs(uid, bin, "approve", reqRef(q)).CombinedOutput(); err != nil {
			t.Fatalf("approve: %v: %s", err, out)
		}
		if got := s.recv(); got != "ok" {
			t.Fatalf("udp to fourth.test:7001 after approve: %s", got)
		}

		// watch: shows the request as it comes (the launcher printing
		// no notice of its own meanwhile) and answers it with one key.
		watch := hostAs(uid, bin, "watch")
		win, err := watch.StdinPipe()
		must(t, err)
		wout, err := watch.StdoutPipe()
		must(t, err)
		must(t, watch.Start())
		t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
		wr := bufio.NewReader(wout)
		waitLine := func(subs ...string) string {
			t.Helper()
			for {
				line, err := wr.ReadString('\n')
				if err != nil {
					t.Fatalf("watch ended before %q: %v", subs, err)
				}
				for _, sub := range subs {
					if strings.Contains(line, sub) {
						return line
					}
				}
			}
		}
		waitLine("watching ")
		s.send("tcp-wait fifth.test:7000")
		waitLine("tcp fifth.test:7000")
		waitLine("[a]pprove")
		// A key read within a second of its prompt is not taken (it
		// may have been meant for the one before): press again.
		for {
			if _, err := io.WriteString(win, "a\n"); err != nil {
				t.Fatal(err)
			}
			if l := waitLine("press again", "approved (session)"); strings.Contains(l, "approved") {
				break
			}
			time.Sleep(time.Second)
		}
		if got := s.recv(); got != "ok" {
			t.Fatalf("the connection to fifth.test:7000 approved in watch: %s", got)
		}
		if _, err := io.WriteString(win, "q\n"); err != nil {
			t.Fatal(err)
		}
		if err := watch.Wait(); err != nil {
			t.Errorf("watch after q: %v", err)
		}

		// deny: the held connection is refused, and a later one without
		// asking.
		s.send("tcp-wait third.test:7000")
		q = waitRequest(t, bin, uid, func(q ask.Request) bool { return q.Name == "third.test" })
		// approve inside a sandbox (jailed, and sharing the host's
		// network) fails, and leaves the request pending.
		for _, opts := range [][]string{nil, {"--net=host"}} {
			argv := append(append([]string{"run"}, opts...), "--", bin, "approve", strconv.Itoa(q.ID))
			r := testutil.Run(t, l.jailCmd(uid, bin, argv...))
			if r.Code == 0 {
				t.Errorf("approve inside a sandbox %v succeeded: %q %q", opts, r.Stdout, r.Stderr)
			}
		}
		if out, err := hostAs(uid, bin, "deny", st.ID+"/"+strconv.Itoa(q.ID)).CombinedOutput(); err != nil {
			t.Fatalf("deny (after the tries from inside): %v: %s", err, out)
		}
		if got := s.recv(); got != "err:ECONNREFUSED" {
			t.Errorf("the held connection to third.test:7000 after deny: %s, want err:ECONNREFUSED", got)
		}
		if got := s.try("tcp-wait third.test:7000"); got != "err:ECONNREFUSED" {
			t.Errorf("a later connection to the denied third.test:7000: %s, want err:ECONNREFUSED", got)
		}
		if asked("third") {
			t.Errorf("the lab's resolver was asked for the denied third.test")
		}

		// An internal address: the request times out, the held
		// connection is refused; the next asks again, and approved it
		// goes.
		dev := "tcp-wait " + epics + ":5064"
		s.send(dev)
		q = waitRequest(t, bin, uid, func(q ask.Request) bool { return q.Addr == epics && q.Who != nil })
		if q.Port != 5064 || q.Kind != "address" {
			t.Errorf("request %+v", q)
		}
		wantWho(t, q)
		if got := s.recv(); got != "err:ECONNREFUSED" {
			t.Errorf("the held connection to %s after the timeout: %s, want err:ECONNREFUSED", epics, got)
		}
		s.send(dev)
		q = waitRequest(t, bin, uid, func(q ask.Request) bool { return q.Addr == epics })
		if out, err := hostAs(uid, bin, "approve", reqRef(q)).CombinedOutput(); err != nil {
			t.Fatalf("approve: %v: %s", err, out)
		}
		if got := s.recv(); got != "ok" {
			t.Fatalf("the held connection to %s after approve: %s", epics, got)
		}
		if got := s.try(dev); got != "ok" {
			t.Errorf("a second connection to %s: %s", epics, got)
		}

		// A host port, approved once: only the held connection goes.
		hp := "tcp-wait " + labGateway + ":8085"
		s.send(hp)
		q = waitRequest(t, bin, uid, func(q ask.Request) bool { return q.Kind == "host-port" })
		if q.Port != 8085 {
			t.Errorf("request %+v", q)
		}
		if out, err := hostAs(uid, bin, "approve", reqRef(q), "--once").CombinedOutput(); err != nil {
			t.Fatalf("approve --once: %v: %s", err, out)
		}
		if got := s.recv(); got != "ok" {
			t.Fatalf("the held connection to the host port after approve --once: %s", got)
		}
		s.send(hp)
		q2 := waitRequest(t, bin, uid, func(q ask.Request) bool { return q.Kind == "host-port" })
		if q2.ID == q.ID {
			t.Errorf("the next connection joined the answered request %d", q.ID)
		}
		if out, err := hostAs(uid, bin, "deny", reqRef(q2)).CombinedOutput(); err != nil {
			t.Fatalf("deny: %v: %s", err, out)
		}
		if got := s.recv(); got != "err:ECONNREFUSED" {
			t.Errorf("the host port's second connection after deny: %s, want err:ECONNREFUSED", got)
		}

		// The exit summary names what was approved for the session; the
		// terminal had a notice for each request but the one watch
		// showed.
		s.in.Close()
		_ = s.cmd.Wait()
		if !strings.Contains(s.stderr.String(), notice) {
			t.Errorf("no notice %q on the terminal: %s", notice, s.stderr.String())
		}
		if strings.Contains(s.stderr.String(), "fifth.test") {
			t.Errorf("the launcher printed a notice while watch ran: %s", s.stderr.String())
		}
		// The audit log has each answer, and the timeout.
		ab, _ := os.ReadFile(audit)
		for _, want := range []string{
			`"event":"request","proto":"tcp","name":"other.test","port":7000,"verdict":"approved session"`,
			`"event":"request","proto":"tcp","name":"third.test","port":7000,"verdict":"denied"`,
			`"event":"request","proto":"tcp","addr":"` + epics + `","port":5064,"verdict":"expired"`,
			`"verdict":"approved once"`,
		} {
			if !strings.Contains(string(ab), want) {
				t.Errorf("the audit log lacks %s:\n%s", want, ab)
			}
		}
		log, _ := os.ReadFile(s.log)
		sum := s.stderr.String() + string(log)
		for _, want := range []string{"allow domain other.test:7000", "allow ip " + epics + "/32"} {
			if !strings.Contains(sum, want) {
				t.Errorf("the summary or log lacks %q:\n%s", want, sum)
			}
		}
	})
}

// The embedding API's ask mode: examples/embed -ask gets an EventRequest
// for each flow the jail would refuse and decides it with Request.Approve
// or Request.Deny; the approved internal device is connected, the denied
// gateway port refused (the program's normal error).
func TestEmbedAsk(t *testing.T) {
	bin := testutil.Build(t, "./examples/embed")
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		l.echoTCP(l.world, labDevice+":5064")
		l.echoTCP(l.host, "127.0.0.1:8081")
		dir := testutil.MkdirFor(t, uid)
		dev, port := labDevice+":5064", labGateway+":8081"
		r := testutil.Run(t, l.jailCmd(uid, bin, "-dir", dir, "-dial", dev+","+port, "-ask", "-approve", dev))
		if r.Code != 0 {
			t.Fatalf("examples/embed -ask: %v", r)
		}
		for _, want := range []string{
			": tcp " + dev + ": approved\n",
			"inside: " + dev + ": connected\n",
			": tcp " + port + ": denied\n",
			"inside: " + port + ": dial tcp " + port + ": connect: connection refused\n",
		} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("output lacks %q:\n%v", want, r)
			}
		}
	})
}

// claude-sandbox allow --host-port while a sandbox runs: the host's
// loopback port is reached through the gateway from the next connection
// on, and refused again after revoke (it was refused in the plumbing
// before the ask mode, which needs it for a host port's approval).
func TestControlHostPort(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		l.echoTCP(l.host, "127.0.0.1:8086")
		// A working directory of its own: other tests' sandboxes may run
		// the same probe meanwhile.
		cwd := "/tmp/hostport-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(uid)
		s := l.startLive(t, uid, "", "--tmpfs", cwd, "--chdir", cwd)
		hp := "tcp " + labGateway + ":8086"
		if got := s.try(hp); got != "err:ECONNREFUSED" {
			t.Fatalf("%s before allow: %s, want err:ECONNREFUSED", hp, got)
		}
		var st control.Status
		for deadline := time.Now().Add(10 * time.Second); st.ID == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			list, _ := hostList[control.Status](t, bin, uid, "ps", "--json")
			for _, x := range list {
				if x.Cwd == cwd {
					st = x
				}
			}
		}
		if st.ID == "" {
			t.Fatalf("ps never listed the sandbox in %s", cwd)
		}
		if out, err := hostAs(uid, bin, "allow", st.ID, "--host-port", "8086").CombinedOutput(); err != nil || !strings.Contains(string(out), "allow host-port 8086/tcp") {
			t.Fatalf("allow --host-port: %v: %s", err, out)
		}
		if got := s.try(hp); got != "ok" {
			t.Errorf("%s after allow --host-port returned: %s", hp, got)
		}
		if st2 := psFind(t, bin, uid, st.ID); len(st2.Allowed) != 1 || st2.Allowed[0] != "host-port 8086/tcp" {
			t.Errorf("ps after allow: allowed %v", st2.Allowed)
		}
		if out, err := hostAs(uid, bin, "revoke", st.ID, "--host-port", "8086").CombinedOutput(); err != nil {
			t.Fatalf("revoke --host-port: %v: %s", err, out)
		}
		if got := s.try(hp); got != "err:ECONNREFUSED" {
			t.Errorf("%s after revoke: %s, want err:ECONNREFUSED", hp, got)
		}
	})
}
