package nsexec

import (
	"strings"
	"testing"
)

func TestUserNSHint(t *testing.T) {
	cases := []struct {
		sysctls map[string]string
		want    []string
	}{
		{map[string]string{"user.max_user_namespaces": "0"}, []string{"user.max_user_namespaces=15000"}},
		{map[string]string{"kernel.unprivileged_userns_clone": "0"}, []string{"kernel.unprivileged_userns_clone=1"}},
		{map[string]string{"kernel.apparmor_restrict_unprivileged_userns": "1"}, []string{"AppArmor", "apparmor_restrict_unprivileged_userns=0"}},
		{map[string]string{"user.max_user_namespaces": "0", "kernel.apparmor_restrict_unprivileged_userns": "1"}, []string{"max_user_namespaces", "AppArmor"}},
		{map[string]string{"user.max_user_namespaces": "1000"}, []string{"seem unavailable", "seccomp"}},
	}
	defer func(m, f func() bool) { procMasked, seccompFiltered = m, f }(procMasked, seccompFiltered)
	procMasked, seccompFiltered = func() bool { return false }, func() bool { return true }
	for _, c := range cases {
		got := userNSHint(func(k string) (string, bool) { v, ok := c.sysctls[k]; return v, ok })
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: hint %q lacks %q", c.sysctls, got, w)
			}
		}
	}
}

// A sandbox inside a sandbox in the /proc fallback (or a container with a
// masked /proc) is told the real cause, the read-only or masked /proc,
// with the runtimes' flags, never seccomp=unconfined; without a seccomp
// filter in force, seccomp is not advised either.
func TestUserNSHintProcAndSeccomp(t *testing.T) {
	defer func(m, f func() bool) { procMasked, seccompFiltered = m, f }(procMasked, seccompFiltered)
	none := func(string) (string, bool) { return "", false }
	for _, seccomp := range []bool{true, false} {
		procMasked, seccompFiltered = func() bool { return true }, func() bool { return seccomp }
		got := userNSHint(none)
		if strings.Contains(got, "seccomp=unconfined") || !strings.Contains(got, "systempaths=unconfined") || !strings.Contains(got, "unmask=ALL") || !strings.Contains(got, "/proc") {
			t.Errorf("masked /proc, seccomp filter %v: %q", seccomp, got)
		}
	}
	procMasked, seccompFiltered = func() bool { return false }, func() bool { return false }
	if got := userNSHint(none); strings.Contains(got, "seccomp=unconfined") {
		t.Errorf("no seccomp filter in force, yet: %q", got)
	}
}
