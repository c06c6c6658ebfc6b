package testutil

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// A re-run by ReexecInOwnNetns knows it is one and is isolated, and the
// mark does not outlive the first look; a re-run left in its parent's
// namespace (the clone flag taken off) is a re-run, not isolated.
func TestReexecInOwnNetns(t *testing.T) {
	const expectEnv = "TESTUTIL_TEST_EXPECT_ISOLATED"
	if rerun, isolated := RerunInOwnNetns(); rerun {
		if want := os.Getenv(expectEnv) == "1"; isolated != want {
			t.Fatalf("isolated %v, want %v", isolated, want)
		}
		if _, ok := os.LookupEnv(ownNetnsEnv); ok {
			t.Error("the mark is still in the environment")
		}
		if again, _ := RerunInOwnNetns(); !again {
			t.Error("a second look forgot the re-run")
		}
		return
	}
	NeedsRoot(t)
	for _, own := range []bool{true, false} {
		cmd, err := ReexecInOwnNetns("-test.run=^TestReexecInOwnNetns$", "-test.v", "-test.count=1")
		if err != nil {
			t.Fatal(err)
		}
		if own {
			cmd.Env = append(cmd.Env, expectEnv+"=1")
		} else {
			cmd.SysProcAttr.Cloneflags = 0
		}
		runtime.LockOSThread()
		out, err := cmd.CombinedOutput()
		runtime.UnlockOSThread()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestReexecInOwnNetns") {
			t.Errorf("re-run (own namespace %v): %v\n%s", own, err, out)
		}
	}
}
