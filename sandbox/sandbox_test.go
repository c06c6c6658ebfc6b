package sandbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/sandbox"
)

// processesWith lists host pids whose command line contains token.
func processesWith(token string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), token) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// inNamespace lists host pids in the namespace of kind with inode ino.
func inNamespace(kind string, ino uint64) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/"+kind, &st) == nil && st.Ino == ino {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// pinNamespaces opens each namespace of ns through a process in it, so
// that its inode number cannot be given to a namespace created meanwhile
// (another package's tests run sandboxes at the same time, and the kernel
// reuses a freed namespace's number at once): while the files are open, a
// process found by inNamespace is in this very namespace.
func pinNamespaces(t *testing.T, ns map[string]uint64) []*os.File {
	t.Helper()
	var pins []*os.File
	for k, ino := range ns {
		for _, pid := range inNamespace(k, ino) {
			f, err := os.Open("/proc/" + pid + "/ns/" + k)
			if err != nil {
				continue
			}
			var st syscall.Stat_t
			if syscall.Fstat(int(f.Fd()), &st) == nil && st.Ino == ino {
				pins = append(pins, f)
				break
			}
			f.Close()
		}
	}
	if len(pins) != len(ns) {
		t.Fatalf("could hold only %d of the sandbox's %d namespaces open", len(pins), len(ns))
	}
	return pins
}

// openFDs lists this process's descriptors and what they point to.
func openFDs(t *testing.T) map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		// The listing's own descriptor is closed by now: skipped.
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			m[e.Name()] = target
		}
	}
	return m
}

// mountCount counts the host's mounts, leaving out the network namespaces
// pinned under /run/netns (other tests on the machine add and remove
// those while this one runs; the sandbox never makes any).
func mountCount(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(l, " /run/netns") {
			n++
		}
	}
	return n
}

// Cancelling the context kills the sandbox, and when Wait returns nothing
// of it is left: no process (the command, its background children, init,
// the jail's holder), no namespace still in use, no mount on the host,
// no descriptor (TUN links, channels, pipes) in this process. Checked at
// once, with no polling: Wait promises it.
func TestCancelLeavesNothing(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, net := range []sandbox.Net{sandbox.NetNone, sandbox.NetJail} {
		t.Run(string(net), func(t *testing.T) {
			if net == sandbox.NetJail {
				testutil.NeedsTUN(t)
				// The jail relays the sandbox's flows (and asks the
				// host's resolver for the NAT64 prefix before an
				// IPv6 one): never from the machine's own
				// network (TestMain re-executes the tests in a
				// namespace of their own).
				if !isolated {
					if testutil.RequirePrivileged() {
						t.Fatal("not in a network namespace of the test's own: the jail would reach the machine's network")
					}
					t.Skip("not in a network namespace of the test's own: the jail would reach the machine's network")
				}
			}
			mountsBefore := mountCount(t)
			fdsBefore := openFDs(t)
			token := fmt.Sprintf("cancel-%s-%d", net, time.Now().UnixNano())
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// No packet is sent: the command never touches the network.
			// Its background children carry the token until they exec
			// sleep, and "sleep 1414" after.
			sb, err := sandbox.Start(ctx, sandbox.Spec{
				Command: []string{"/bin/sh", "-c", "sleep 1414 & sleep 1414 & echo ready; while :; do sleep 1; done", token},
				Net:     net,
				Stdout:  w,
			})
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			if line, _ := bufio.NewReader(r).ReadString('\n'); line != "ready\n" {
				t.Fatalf("sandbox said %q", line)
			}
			ns, err := sb.Namespaces()
			if err != nil {
				t.Fatal(err)
			}
			initPID, pid := sb.InitPID(), sb.PID()
			if pid == 0 || initPID == 0 || len(processesWith(token)) == 0 {
				t.Fatalf("cannot see the sandbox from the host (init %d, command %d); the test would prove nothing", initPID, pid)
			}
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); !strings.Contains(string(b), token) {
				t.Errorf("PID() = %d is not the command (%q)", pid, b)
			}
			for _, k := range []string{"pid", "mnt", "net", "user"} {
				if len(inNamespace(k, ns[k])) == 0 {
					t.Fatalf("no process in the sandbox's %s namespace %d: Namespaces() is wrong", k, ns[k])
				}
			}
			if net == sandbox.NetJail && !sb.Addresses().Addr4.IsValid() {
				t.Errorf("jail without an address: %+v", sb.Addresses())
			}

			pins := pinNamespaces(t, ns)
			cancel()
			code, err := sb.Wait()
			if !errors.Is(err, context.Canceled) || code != 128+9 {
				t.Errorf("Wait after cancel = %d, %v; want 137, context.Canceled", code, err)
			}
			if left := processesWith(token); len(left) > 0 {
				t.Errorf("the command outlived the cancellation: %v", left)
			}
			if left := processesWith("sleep\x001414"); len(left) > 0 {
				t.Errorf("its background processes outlived the cancellation: %v", left)
			}
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", initPID)); err == nil {
				t.Errorf("init (pid %d) outlived the cancellation", initPID)
			}
			for k, ino := range ns {
				if left := inNamespace(k, ino); len(left) > 0 {
					t.Errorf("processes still in the sandbox's %s namespace: %v", k, left)
				}
			}
			for _, f := range pins {
				f.Close()
			}
			if n := mountCount(t); n != mountsBefore {
				t.Errorf("host mount table changed: %d mounts before, %d after", mountsBefore, n)
			}
			for fd, target := range openFDs(t) {
				if _, ok := fdsBefore[fd]; !ok && !strings.HasPrefix(target, "pipe:") {
					t.Errorf("descriptor %s (%s) left open in the embedding process", fd, target)
				}
			}
			if err := sb.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
				t.Errorf("Signal after the end: %v, want os.ErrProcessDone", err)
			}
		})
	}
}

// A context cancelled before Start starts nothing.
func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sandbox.Start(ctx, sandbox.Spec{Command: []string{"/bin/true"}, Net: sandbox.NetNone}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context: %v", err)
	}
}

// Signal reaches the command; the exit status and the exit event say how
// it ended, and the exit event is the last.
func TestSignalAndExitEvent(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var events []sandbox.Event
	sb, err := sandbox.Start(context.Background(), sandbox.Spec{
		Command: []string{"/bin/sh", "-c", "trap 'exit 42' USR1; echo ready; while :; do sleep 0.05; done"},
		Net:     sandbox.NetNone,
		Stdout:  w,
		OnEvent: func(ev sandbox.Event) { events = append(events, ev) },
	})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(r).ReadString('\n'); line != "ready\n" {
		t.Fatalf("sandbox said %q", line)
	}
	if err := sb.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	code, err := sb.Wait()
	if code != 42 || err != nil {
		t.Errorf("after SIGUSR1: %d, %v; want 42", code, err)
	}
	if len(events) != 1 || events[0].Kind != sandbox.EventExit || events[0].Code != 42 {
		t.Errorf("events %+v, want one exit event with code 42", events)
	}
}

// Output written to a plain io.Writer is copied in full before Wait
// returns; a command that cannot be found is a Start error.
func TestWriterAndStartError(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	var out strings.Builder
	sb, err := sandbox.Start(context.Background(), sandbox.Spec{
		Command: []string{"/bin/sh", "-c", "seq 1 20000; echo $FOO"},
		Env:     []string{"FOO=bar"},
		Net:     sandbox.NetNone,
		Stdout:  &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := sb.Wait(); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if !strings.HasSuffix(out.String(), "\n20000\nbar\n") {
		t.Errorf("output cut short: ...%q", out.String()[max(0, out.Len()-40):])
	}
	_, err = sandbox.Start(context.Background(), sandbox.Spec{Command: []string{"no-such-command-here"}, Net: sandbox.NetNone})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing command: %v", err)
	}
	// A bad allowlist entry is refused before anything starts, naming the
	// fix; names need the jail.
	_, err = sandbox.Start(context.Background(), sandbox.Spec{Command: []string{"/bin/true"}, AllowDomains: []string{"10.1.2.3"}})
	if err == nil || !strings.Contains(err.Error(), "use --allow-ip") {
		t.Errorf("AllowDomains with an address: %v", err)
	}
	_, err = sandbox.Start(context.Background(), sandbox.Spec{Command: []string{"/bin/true"}, Net: sandbox.NetNone, AllowDomains: []string{"example.com"}})
	if err == nil || !strings.Contains(err.Error(), "apply to the egress jail") {
		t.Errorf("AllowDomains with NetNone: %v", err)
	}
}

// Issue 28: the embedding API is safe by default. A Spec without Home
// gives the caller's home an empty tmpfs, so a planted ~/.ssh/id_ed25519
// is not readable; with Bare the host's home shows (the opt-out works).
// Seen failing (the key read) before the default.
func TestSpecWithoutHomeHidesCallersHome(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	home := testutil.MkdirFor(t, os.Getuid())
	key := home + "/.ssh/id_ed25519"
	// World-readable, so that for a root caller only the home's tmpfs
	// (not the private-file walk) decides what is seen.
	if err := os.MkdirAll(home+"/.ssh", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("PRIVATE-KEY\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	read := func(bare bool) string {
		var out strings.Builder
		sb, err := sandbox.Start(context.Background(), sandbox.Spec{
			Command: []string{"/bin/sh", "-c", "cat " + key + " 2>/dev/null; exit 0"},
			Net:     sandbox.NetNone,
			Bare:    bare,
			Stdout:  &out,
		})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := sb.Wait(); code != 0 || err != nil {
			t.Fatalf("exit %d, %v", code, err)
		}
		return out.String()
	}
	if got := read(false); strings.Contains(got, "PRIVATE-KEY") {
		t.Errorf("a Spec without Home read the caller's ~/.ssh/id_ed25519: %q", got)
	}
	if got := read(true); !strings.Contains(got, "PRIVATE-KEY") {
		t.Errorf("with Bare the host's home should show (the opt-out): %q", got)
	}
}
