package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// oneByOne hides Netlink's ExecRoutes: Apply then adds each route with
// its own request.
type oneByOne struct{ *Netlink }

func (o oneByOne) Exec(op Op) error { return o.Netlink.Exec(op) }

// routeTable lists the namespace's routes as comparable lines.
func routeTable(t *testing.T) []string {
	t.Helper()
	rs, err := DumpRoutes()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		// The kernel's own routes for the links' addresses (proto
		// kernel: local, broadcast, and IPv6's, which appear only once
		// duplicate address detection is done, at any moment) are not the
		// plan's: comparing them made the test fail one run in three.
		if r.Protocol == unix.RTPROT_KERNEL {
			continue
		}
		l, err := net.InterfaceByIndex(int(r.Link))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s dev %s table %d proto %d scope %d type %d", r.Dst, l.Name, r.Table, r.Protocol, r.Scope, r.Type))
	}
	slices.Sort(out)
	return out
}

// The setup's routes go to the kernel in one batch (Netlink.ExecRoutes);
// the table it leaves is exactly the one adding them one by one leaves,
// and its failures are reported per operation as before: a failed punch
// is a warning and the plan goes on, a failed route of the walls stops it
// with that route's error.
func TestApplyBatchesRoutes(t *testing.T) {
	cfg := Config{TUN: "tun0", Sink: "blk0", Addr4: netip.MustParsePrefix("192.0.2.2/32"), Addr6: netip.MustParsePrefix("fdc5::2/128")}
	p, err := BuildPlan(netpolicy.MustNew(netpolicy.Config{
		Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")},
	}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	routes := 0
	for _, op := range p.Ops {
		if op.isRoute() {
			routes++
		}
	}
	if routes < 20 {
		t.Fatalf("the plan has %d routes; the test wants a real batch", routes)
	}
	apply := func(x func(*Netlink) Executor) (table []string) {
		withNetlink(t, func(nl *Netlink) {
			if w, err := Apply(p, x(nl)); err != nil || len(w) != 0 {
				t.Errorf("Apply: warnings %v, error %v", w, err)
				return
			}
			table = routeTable(t)
		})
		return table
	}
	batched := apply(func(n *Netlink) Executor { return n })
	single := apply(func(n *Netlink) Executor { return oneByOne{n} })
	if len(batched) < routes || !slices.Equal(batched, single) {
		t.Fatalf("batched routes differ from one-by-one routes:\nbatched %q\nsingle  %q", batched, single)
	}

	withNetlink(t, func(nl *Netlink) {
		bad := Plan{Ops: slices.Clone(p.Ops)}
		// A punch through a link that does not exist fails softly; a
		// sink route added twice (EEXIST) fails closed, in the middle
		// of a run of routes.
		var sink Op
		for _, op := range bad.Ops {
			if op.Kind == OpSink {
				sink = op
				break
			}
		}
		punch := Op{Kind: OpPunch, Link: "nosuch0", Prefix: netip.MustParsePrefix("10.9.9.9/32")}
		var ops []Op
		for i, op := range bad.Ops {
			ops = append(ops, op)
			if op.isRoute() && i+1 < len(bad.Ops) && bad.Ops[i+1].isRoute() && len(ops) > 0 && sink.Prefix.IsValid() {
				ops = append(ops, punch, sink)
				ops = append(ops, bad.Ops[i+1:]...)
				break
			}
		}
		bad.Ops = ops
		w, err := Apply(bad, nl)
		var oe *OpError
		if !errors.As(err, &oe) || oe.Op != sink || !errors.Is(err, syscall.EEXIST) {
			t.Errorf("Apply with a duplicate route: %v, want the duplicate's EEXIST", err)
		}
		if len(w) != 1 || !errors.As(w[0], &oe) || oe.Op != punch {
			t.Errorf("warnings %v, want the punch's alone", w)
		}
	})
}

// withNetlink runs f with a Netlink handle in the namespace of withLinks.
func withNetlink(t *testing.T, f func(*Netlink)) {
	t.Helper()
	withLinks(t, func() {
		nl, err := OpenNetlink()
		if err != nil {
			t.Error(err)
			return
		}
		defer nl.Close()
		f(nl)
	})
}
