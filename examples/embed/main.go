// Command embed shows a Go program sandboxing the commands it runs with
// package sandbox, in three short runs:
//
//  1. a shell command with one writable directory (-dir), no network; the
//     rest of the host is read-only, and the caller's home is an empty
//     tmpfs (a Spec without Home hides it; Bare or a Bind opts out);
//  2. this program again, inside the egress jail, dialing each address of
//     -dial: the flows the jail blocks are printed as they happen, with
//     the rule that blocked them; with -host-port PORT, the host's
//     127.0.0.1:PORT is reachable inside at host.internal:PORT
//     (Spec.HostPorts);
//  3. a long command, cancelled: the run ends and nothing of it is left.
//
// With -ask, run 2 runs in the ask mode (Spec.Ask): each flow the jail
// would refuse is held and printed as a request, which this program
// approves for the session when its destination is in -approve (NAME:PORT
// or ADDR:PORT, comma-separated) and denies otherwise.
//
// With -watch instead, it runs one jailed command and prints each change
// of the jail's blocked set as the host's network changes under it (add
// an address to the host to see one), then cancels the run.
//
// Usage:
//
//	embed -dir DIR [-dial ADDR:PORT,...] [-allow-domain NAME,...] [-host-port PORT] [-ask [-approve DEST,...]]
//	embed -watch
//
// Build it with CGO_ENABLED=0. Run 2 sends packets: try it in a network
// namespace of your own (the project's test runs it in its lab network).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/sandbox"
)

func main() {
	sandbox.Init() // first: the engine re-executes this binary as the sandbox's stages

	dir := flag.String("dir", "", "a host directory the first run may write to")
	dial := flag.String("dial", "", "comma-separated ADDR:PORT list the second run dials from inside the jail")
	connect := flag.String("connect", "", "(inside the sandbox) dial these addresses and report")
	watch := flag.Bool("watch", false, "run one jailed command and print the jail's policy changes until the first")
	allowDomain := flag.String("allow-domain", "", "comma-separated names the second run's jail allows (its domain allowlist: nothing else on the internet)")
	hostPort := flag.Uint("host-port", 0, "a port of the host's loopback the second run may reach at host.internal")
	flag.BoolVar(&askMode, "ask", false, "run the second run in the ask mode: approve the requests in -approve, deny the others")
	approveList := flag.String("approve", "", "with -ask, comma-separated NAME:PORT or ADDR:PORT destinations to approve")
	flag.Parse()
	for _, d := range strings.Split(*approveList, ",") {
		if d != "" {
			approved[d] = true
		}
	}
	if *connect != "" {
		connectAll(*connect)
		return
	}
	if *watch {
		if err := watchPolicy(); err != nil {
			fail(err)
		}
		return
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: embed -dir DIR [-dial ADDR:PORT,...]")
		os.Exit(2)
	}
	if err := writable(*dir); err != nil {
		fail(err)
	}
	if *dial != "" {
		var domains []string
		if *allowDomain != "" {
			domains = strings.Split(*allowDomain, ",")
		}
		if err := jailed(*dial, domains, uint16(*hostPort)); err != nil {
			fail(err)
		}
	}
	if err := cancelled(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "embed:", err)
	os.Exit(1)
}

// writable runs a shell command that may write to dir only.
func writable(dir string) error {
	sb, err := sandbox.Start(context.Background(), sandbox.Spec{
		Command: []string{"/bin/sh", "-c", `echo hello > "$1/from-the-sandbox" && echo "wrote $1/from-the-sandbox"; touch /usr/x 2>/dev/null || echo "/usr is read-only"`, "sh", dir},
		Env:     []string{"PATH=/usr/bin:/bin"},
		Mounts:  []sandbox.Mount{sandbox.Bind(dir, dir)},
		Net:     sandbox.NetNone,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
	})
	if err != nil {
		return err
	}
	code, err := sb.Wait()
	fmt.Printf("writable: exit %d\n", code)
	return err
}

// jailed runs this program inside the egress jail to dial addrs, and
// prints each blocked flow as the jail reports it.
func jailed(addrs string, domains []string, hostPort uint16) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var hostPorts []netpolicy.HostPort
	if hostPort != 0 {
		hostPorts = append(hostPorts, netpolicy.HostPort{Proto: netpolicy.ProtoTCP, Port: hostPort})
	}
	sb, err := sandbox.Start(context.Background(), sandbox.Spec{
		Command: []string{self, "-connect", addrs},
		// The caller's home is an empty tmpfs inside (Spec.Home's safe
		// default): bound back, this program runs from there too.
		Mounts: []sandbox.Mount{sandbox.ROBind(self, self)},
		// With names, the jail's domain allowlist: only they (and DNS)
		// are reachable.
		AllowDomains: domains,
		HostPorts:    hostPorts,
		Ask:          askMode,
		Stdout:       os.Stdout,
		Stderr:       os.Stderr,
		Warn:         func(w string) { fmt.Fprintln(os.Stderr, "warning:", w) },
		OnEvent: func(ev sandbox.Event) {
			switch ev.Kind {
			case sandbox.EventBlocked:
				fmt.Printf("blocked: %s\n", ev.Block)
				// The process behind it, when the jail found it.
				if p := ev.Block.Process(); p != "" {
					fmt.Printf("blocked by: %s\n", p)
				}
			case sandbox.EventRequest:
				answer(ev.Request)
			case sandbox.EventExit:
				fmt.Printf("jail: exit %d\n", ev.Code)
			}
		},
	})
	if err != nil {
		return err
	}
	a := sb.Addresses()
	fmt.Printf("jail: sandbox address %s, gateway %s\n", a.Addr4, a.Gateway)
	_, err = sb.Wait()
	return err
}

// watchPolicy runs a jailed command that only waits, prints each change
// of the jail's blocked set (EventPolicy) and cancels the run after the
// first that blocks something, or after a minute without one.
func watchPolicy() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Spec{
		Command: []string{"/bin/sh", "-c", "sleep 600"},
		Stderr:  os.Stderr,
		OnEvent: func(ev sandbox.Event) {
			if ev.Kind != sandbox.EventPolicy {
				return
			}
			c := ev.Change
			fmt.Printf("policy: %s %s (%s; %s)\n", c.Event, c.Prefix, c.Rule, c.Reason)
			if c.Event == "blocked" {
				cancel()
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Println("watch: ready")
	// The run ends cancelled either way: by the first blocking change, or
	// by the deadline when none came.
	_, _ = sb.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("no policy change within a minute")
	}
	return nil
}

// connectAll runs inside the jail: one TCP dial per address.
func connectAll(addrs string) {
	for _, a := range strings.Split(addrs, ",") {
		c, err := net.DialTimeout("tcp", a, 10*time.Second)
		if err != nil {
			fmt.Printf("inside: %s: %v\n", a, err)
			continue
		}
		c.Close()
		fmt.Printf("inside: %s: connected\n", a)
	}
}

// cancelled starts a command that would run for ten minutes, with
// children of its own, and cancels it.
func cancelled() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	sb, err := sandbox.Start(ctx, sandbox.Spec{
		Command: []string{"/bin/sh", "-c", "sleep 600 & sleep 600 & echo started; wait"},
		Net:     sandbox.NetNone,
		Stdout:  w,
	})
	w.Close()
	if err != nil {
		return err
	}
	buf := make([]byte, 8)
	_, _ = r.Read(buf) // "started"
	ns, err := sb.Namespaces()
	if err != nil {
		return err
	}
	cancel()
	code, err := sb.Wait()
	fmt.Printf("cancel: exit %d (%v); processes left in its PID namespace: %d\n", code, err, countIn("pid", ns["pid"]))
	return nil
}

// countIn counts the processes in the namespace of kind with inode ino.
func countIn(kind string, ino uint64) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/"+kind, &st) == nil && st.Ino == ino {
			n++
		}
	}
	return n
}

// The ask mode's choices (-ask, -approve).
var (
	askMode  bool
	approved = map[string]bool{}
)

// answer decides a request of the ask mode: approved for the session when
// its destination is in -approve, denied otherwise. On OnEvent's
// goroutine: Approve and Deny return once the decision is in force.
func answer(r *sandbox.Request) {
	host := r.Name
	if host == "" {
		host = r.Addr
	}
	dest := net.JoinHostPort(host, strconv.Itoa(int(r.Port)))
	if approved[dest] {
		fmt.Printf("request %d: %s %s: approved\n", r.ID, r.Proto, dest)
		if err := r.Approve(sandbox.AskSession); err != nil {
			fmt.Printf("request %d: approve: %v\n", r.ID, err)
		}
		return
	}
	fmt.Printf("request %d: %s %s: denied\n", r.ID, r.Proto, dest)
	if err := r.Deny(); err != nil {
		fmt.Printf("request %d: deny: %v\n", r.ID, err)
	}
}
