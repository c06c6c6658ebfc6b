// Command embedrun is a test helper that embeds the engine the way a Go
// program would: it reads a plan.Plan as JSON from a file and runs it with
// nsexec.Run, with the egress jail assembled by package jail when the plan
// asks for it. Tests use it to apply plans the command line cannot express
// and to take one enforcement layer of the jail away, to prove that the
// other blocks alone. It is never shipped, and the shipped binary has no
// such switch.
//
//	embedrun [-layer=both|routes-only|stack-only] [-fail-stack-on-usr1] [-fail-watch-on-usr2] [-log-blocked FILE] PLAN.json
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/claude-sandbox/claude-sandbox/internal/jaillayers"
	"github.com/claude-sandbox/claude-sandbox/jail"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/routes"
)

func main() {
	nsexec.Init()
	layer := flag.String("layer", "both", "which jail layers enforce: both, routes-only, stack-only")
	failOnUSR1 := flag.Bool("fail-stack-on-usr1", false, "report a userstack failure when SIGUSR1 arrives")
	failOnUSR2 := flag.Bool("fail-watch-on-usr2", false, "fail the live policy closed when SIGUSR2 arrives, as a broken watch of the host's network would")
	logBlocked := flag.String("log-blocked", "", "append blocks and policy changes to this file, as JSON lines")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: embedrun [flags] PLAN.json")
		os.Exit(2)
	}
	b, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedrun:", err)
		os.Exit(2)
	}
	var p plan.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		fmt.Fprintln(os.Stderr, "embedrun:", err)
		os.Exit(2)
	}
	opts := nsexec.Options{}
	if p.Net == plan.NetJail {
		facts, err := jail.DiscoverHost("/etc/resolv.conf")
		if err != nil {
			fmt.Fprintln(os.Stderr, "embedrun:", err)
			os.Exit(2)
		}
		var allow []netip.Prefix
		var allowDomains, denyDomains []string
		if p.Egress != nil {
			allow, allowDomains, denyDomains = p.Egress.Allow, p.Egress.AllowDomains, p.Egress.DenyDomains
		}
		setup, err := jail.PrepareNames(facts, allow, allowDomains, denyDomains)
		if err != nil {
			fmt.Fprintln(os.Stderr, "embedrun:", err)
			os.Exit(2)
		}
		p.Mounts = append(p.Mounts, setup.ResolvConf)
		jo := jail.Options{Summary: os.Stderr, Warn: func(m string) { fmt.Fprintln(os.Stderr, "embedrun: warning:", m) }}
		if *logBlocked != "" {
			f, err := os.OpenFile(*logBlocked, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				fmt.Fprintln(os.Stderr, "embedrun:", err)
				os.Exit(2)
			}
			jo.Log = f
		}
		switch *layer {
		case "both":
		case "routes-only":
			jaillayers.Set(jaillayers.Layers{StackPolicy: allowAll})
		case "stack-only":
			setup.Routes = withoutBlocks(setup.Routes)
			jaillayers.Set(jaillayers.Layers{RoutePlan: withoutBlocks})
		default:
			fmt.Fprintln(os.Stderr, "embedrun: unknown -layer", *layer)
			os.Exit(2)
		}
		jj := jail.New(setup, jo)
		if *failOnUSR2 {
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGUSR2)
			go func() {
				<-sig
				jj.FailClosed(errors.New("simulated failure of the host network watch"))
			}()
		}
		var j nsexec.Jail = jj
		if *failOnUSR1 {
			j = newFailingJail(jj)
		}
		opts.Jail = j
	}
	code, err := nsexec.Run(&p, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedrun:", err)
	}
	os.Exit(code)
}

// allowAll returns a policy that allows every prefix pol blocks (an allow
// entry wins a tie with a block of the same prefix).
func allowAll(pol *netpolicy.Policy) *netpolicy.Policy {
	var allow []netip.Prefix
	for _, e := range pol.RoutePlan() {
		if e.Kind != netpolicy.RoutePunch {
			allow = append(allow, e.Prefix)
		}
	}
	return netpolicy.MustNew(netpolicy.Config{Allow: allow})
}

// withoutBlocks drops every blocking route, and the filter, from the plan.
func withoutBlocks(rp routes.Plan) routes.Plan {
	var out routes.Plan // no Filter
	for _, op := range rp.Ops {
		if op.Kind != routes.OpSink {
			out.Ops = append(out.Ops, op)
		}
	}
	return out
}

// failingJail reports a stack failure on SIGUSR1, as a dying userstack
// would. The signal is caught from the start: the test sends it once the
// command runs, which can be before the engine first asks for Failed (a
// SIGUSR1 nobody was notified of is dropped by the Go runtime).
type failingJail struct {
	*jail.Jail
	fail chan error
}

func newFailingJail(j *jail.Jail) *failingJail {
	f := &failingJail{Jail: j, fail: make(chan error, 1)}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		<-sig
		f.fail <- errors.New("simulated userstack failure")
	}()
	return f
}

func (f *failingJail) Failed() <-chan error { return f.fail }
