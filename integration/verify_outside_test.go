package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// verify run under `claude-sandbox run` (a sandbox, not the shadow's)
// and outside any sandbox says one verdict each, and exits 1.
func TestVerifyOutsideShadowOneVerdict(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{bin, "run", "--net=none", "--", bin, "verify"}, "RESULT: NOT INSIDE the shadow"},
		{[]string{bin, "verify"}, "RESULT: NOT INSIDE claude-sandbox"},
	} {
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.Dir = "/"
		r := testutil.Run(t, cmd)
		if r.Code != 1 || strings.Count(r.Stdout, "RESULT") != 1 || !strings.Contains(r.Stdout, c.want) || strings.Contains(r.Stdout, "LEAKING") {
			t.Errorf("%q: %v; want one verdict, %q", c.argv, r, c.want)
		}
	}
}
