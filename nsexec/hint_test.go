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
	defer func(m, f, i func() bool) { procMasked, seccompFiltered, insideSandbox = m, f, i }(procMasked, seccompFiltered, insideSandbox)
	procMasked, seccompFiltered, insideSandbox = func() bool { return false }, func() bool { return true }, func() bool { return false }
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
// masked /proc and no seccomp filter) is told the real cause, the
// read-only or masked /proc, with the runtimes' flags, never
// seccomp=unconfined; a container under a filter (Docker's defaults) is
// told seccomp, and the unmask flag too when /proc is masked.
func TestUserNSHintProcAndSeccomp(t *testing.T) {
	defer func(m, f, i func() bool) { procMasked, seccompFiltered, insideSandbox = m, f, i }(procMasked, seccompFiltered, insideSandbox)
	none := func(string) (string, bool) { return "", false }
	set := func(masked, filtered, inside bool) {
		procMasked = func() bool { return masked }
		seccompFiltered = func() bool { return filtered }
		insideSandbox = func() bool { return inside }
	}
	for _, c := range []struct {
		masked, filtered, inside bool
		want, never              []string
	}{
		{true, true, true, []string{"/proc", "systempaths=unconfined", "unmask=ALL"}, []string{"seccomp=unconfined"}},   // sandbox in a sandbox, fallback
		{true, false, false, []string{"/proc", "systempaths=unconfined", "unmask=ALL"}, []string{"seccomp=unconfined"}}, // seccomp=unconfined container
		{true, true, false, []string{"seccomp=unconfined", "systempaths=unconfined"}, nil},                              // Docker's defaults
		{false, false, false, []string{"no seccomp filter"}, []string{"seccomp=unconfined"}},
	} {
		set(c.masked, c.filtered, c.inside)
		got := userNSHint(none)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("masked %v, filtered %v, inside %v: %q lacks %q", c.masked, c.filtered, c.inside, got, w)
			}
		}
		for _, w := range c.never {
			if strings.Contains(got, w) {
				t.Errorf("masked %v, filtered %v, inside %v: %q advises %q", c.masked, c.filtered, c.inside, got, w)
			}
		}
	}
}
