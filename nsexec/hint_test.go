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
	for _, c := range cases {
		got := userNSHint(func(k string) (string, bool) { v, ok := c.sysctls[k]; return v, ok })
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: hint %q lacks %q", c.sysctls, got, w)
			}
		}
	}
}
