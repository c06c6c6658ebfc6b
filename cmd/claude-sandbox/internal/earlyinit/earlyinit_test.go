package earlyinit

import (
	"testing"

	"github.com/claude-sandbox/claude-sandbox/plan"
)

func TestGuessNet(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want plan.Net
	}{
		{[]string{"cs", "run", "--net=none", "--", "/bin/true"}, plan.NetNone},
		{[]string{"cs", "run", "--net", "host", "true"}, plan.NetHost},
		{[]string{"cs", "run", "--net=none", "--net=jail", "true"}, ""},
		{[]string{"cs", "run", "--net=jail", "--net=none", "true"}, plan.NetNone},
		{[]string{"cs", "run", "true", "--net=none"}, ""},            // the command's own argument
		{[]string{"cs", "run", "--", "true", "--net=none"}, ""},      // likewise
		{[]string{"cs", "plan", "--json", "--net=none", "true"}, ""}, // plan never starts one
		{[]string{"cs", "run", "--net=none", "--help"}, ""},
		{[]string{"cs", "run", "true"}, ""}, // the jail, by default
		{[]string{"/usr/bin/claude", "run", "--net=none", "true"}, ""},
		{[]string{"claude-sandbox:stage"}, ""},
	} {
		if got := guessNet(c.argv); got != c.want {
			t.Errorf("guessNet(%q) = %q, want %q", c.argv, got, c.want)
		}
	}
}
