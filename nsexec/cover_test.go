package nsexec

import (
	"os"
	"slices"
	"testing"
)

// Outside a coverage build (the shipped binary, this test binary) a stage
// gets exactly its environment and descriptors, whatever GOCOVERDIR says:
// no host directory is ever handed to a stage.
func TestCoverStageAddsNothingToAnOrdinaryBinary(t *testing.T) {
	t.Setenv("GOCOVERDIR", t.TempDir())
	if coverDir() != "" {
		t.Skip("a coverage build: coverStage is active by design")
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env, extra := coverStage(stageEnv, []*os.File{f})
	if !slices.Equal(env, stageEnv) || len(extra) != 1 || extra[0] != f {
		t.Fatalf("env %q, %d extra descriptors; want the stage's own", env, len(extra))
	}
}
