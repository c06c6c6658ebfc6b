package nsexec

import "testing"

// The launch (limitPids) and doctor (PidsLimitKind) share one decision:
// pid_max first, then a pids cgroup, then RLIMIT_NPROC, never
// RLIMIT_NPROC for host root (it does not bind uid 0 of the host).
func TestPidsBoundFor(t *testing.T) {
	for _, c := range []struct {
		pidMax, cgroup, hostRoot bool
		want                     pidsBound
	}{
		{true, false, false, boundPidMax},
		{true, true, true, boundPidMax},
		{false, true, true, boundCgroup},
		{false, true, false, boundCgroup},
		{false, false, false, boundNproc},
		{false, false, true, boundNone},
	} {
		if got := pidsBoundFor(c.pidMax, c.cgroup, c.hostRoot); got != c.want {
			t.Errorf("pidsBoundFor(%v, %v, %v) = %d, want %d", c.pidMax, c.cgroup, c.hostRoot, got, c.want)
		}
	}
}
