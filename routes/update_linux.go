package routes

import (
	"errors"
	"net/netip"
)

// isRoute reports the operations Update manages: the routes the policy
// decides (blocks and punches). Links, addresses and the default routes
// never change while the jail runs.
func isRoute(k OpKind) bool {
	switch k {
	case OpSink, OpPunch:
		return true
	}
	return false
}

// Update moves a running jail's namespace from plan cur to plan next, in
// the order that never opens more than either plan: new and changed
// routes first (a changed route is replaced in place), then the filter
// (one atomic transaction), and last the routes next no longer has. A
// failed punch is a warning; any other failure stops the update with an
// error, and what was already applied stays (the caller fails closed).
func Update(cur, next Plan, n Namespace) (warnings []error, err error) {
	have := map[netip.Prefix]Op{}
	for _, op := range cur.Ops {
		if isRoute(op.Kind) {
			have[op.Prefix] = op
		}
	}
	want := map[netip.Prefix]bool{}
	for _, op := range next.Ops {
		if !isRoute(op.Kind) {
			continue
		}
		want[op.Prefix] = true
		old, ok := have[op.Prefix]
		switch {
		case !ok:
			err = n.AddRoute(op)
		case old.Kind != op.Kind || old.Link != op.Link:
			err = n.ReplaceRoute(op)
		default:
			continue
		}
		if err != nil {
			oe := &OpError{Op: op, Err: err}
			if op.FailSoft() {
				warnings = append(warnings, oe)
				err = nil
				continue
			}
			return warnings, oe
		}
	}
	if next.Filter != nil {
		if err := n.InstallFilter(next.Filter); errors.Is(err, ErrUnrecorded) {
			warnings = append(warnings, err)
		} else if err != nil {
			return warnings, err
		}
	}
	for _, op := range cur.Ops {
		if !isRoute(op.Kind) || want[op.Prefix] {
			continue
		}
		if err := n.DeleteRoute(op); err != nil {
			return warnings, &OpError{Op: Op{Kind: op.Kind, Link: op.Link, Prefix: op.Prefix, Reason: "removing: " + op.Reason}, Err: err}
		}
	}
	return warnings, nil
}
