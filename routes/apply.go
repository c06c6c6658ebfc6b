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

// Apply runs the plan's operations in order. The first failure of a
// fail-closed operation stops it: the error (an *OpError) is returned with
// the warnings so far, and the namespace must not be used. A failed punch
// is recorded as a warning (an *OpError) and the plan continues.
func Apply(p Plan, x Executor) (warnings []error, err error) {
	for _, op := range p.Ops {
		if e := x.Exec(op); e != nil {
			oe := &OpError{Op: op, Err: e}
			if op.FailSoft() {
				warnings = append(warnings, oe)
				continue
			}
			return warnings, oe
		}
	}
	return warnings, nil
}
