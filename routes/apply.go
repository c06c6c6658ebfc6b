package routes

import "fmt"

// Executor performs one operation. [Netlink] is the production Executor;
// tests record the calls.
type Executor interface {
	Exec(Op) error
}

// OpError is the failure of one operation: "route add blackhole
// 10.0.0.0/8: operation not permitted".
type OpError struct {
	Op  Op
	Err error
}

func (e *OpError) Error() string { return fmt.Sprintf("%s: %v", e.Op, e.Err) }

// Unwrap returns the underlying error (often a syscall.Errno).
func (e *OpError) Unwrap() error { return e.Err }

// routeBatcher performs consecutive route operations in one exchange
// with the kernel; errs[i] is ops[i]'s failure, or nil. [Netlink] is one.
type routeBatcher interface {
	ExecRoutes(ops []Op) (errs []error)
}

// Apply runs the plan's operations in order. The first failure of a
// fail-closed operation stops it: the error (an *OpError) is returned with
// the warnings so far, and the namespace must not be used. A failed punch
// is recorded as a warning (an *OpError) and the plan continues.
//
// An Executor that can batch routes gets each run of consecutive route
// operations at once: the kernel tries all of them, and the outcome is
// reported as if they had run one by one (a fail-closed failure still
// stops the plan there; routes after it may exist, in a namespace that
// must not be used anyway).
func Apply(p Plan, x Executor) (warnings []error, err error) {
	bx, _ := x.(routeBatcher)
	ops := p.Ops
	for i := 0; i < len(ops); {
		n := 1
		var errs []error
		if bx != nil && ops[i].isRoute() {
			for i+n < len(ops) && ops[i+n].isRoute() {
				n++
			}
			errs = bx.ExecRoutes(ops[i : i+n])
		} else {
			errs = []error{x.Exec(ops[i])}
		}
		for k, e := range errs {
			if e == nil {
				continue
			}
			oe := &OpError{Op: ops[i+k], Err: e}
			if !ops[i+k].FailSoft() {
				return warnings, oe
			}
			warnings = append(warnings, oe)
		}
		i += n
	}
	return warnings, nil
}
