package nsexec

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Coverage of the stages, for the test suite's coverage run only
// (scripts/test.sh builds the binary with -cover and sets GOCOVERDIR).
//
// A binary built with -cover writes its counters as it exits, into the
// directory GOCOVERDIR named when it started. A stage starts with the
// host's mounts but may exit inside the sandbox (init, after pivot_root),
// where that path is hidden or read-only; and stages get a fixed
// environment (stageEnv), without GOCOVERDIR. So in a -cover binary whose
// environment names GOCOVERDIR, each stage is given that directory as one
// more descriptor (O_PATH, close-on-exec: the command never inherits it)
// and GOCOVERDIR=/proc/self/fd/N, a link that leads to the same directory
// before and after the stage's root changes. In the shipped binary (no
// -cover), or without GOCOVERDIR, nothing is added. coverDir says which:
// it needs runtime/coverage, which only a build with the coverrun tag
// (testutil.Build's coverage build) links (coverdir_coverrun.go); linked
// in every build, it put regexp and a dozen more packages into every
// stage's initialisation (issue 33).

// coverStage adds the coverage directory to a stage's environment and
// descriptors (extra become fds 3, 4, ...), or returns them unchanged.
// The parent's copy of the descriptor is left open: one per stage, in a
// coverage run only.
func coverStage(env []string, extra []*os.File) ([]string, []*os.File) {
	dir := coverDir()
	if dir == "" {
		return env, extra
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return env, extra
	}
	n := 3 + len(extra)
	env = append(env[:len(env):len(env)], fmt.Sprintf("GOCOVERDIR=/proc/self/fd/%d", n))
	return env, append(extra[:len(extra):len(extra)], os.NewFile(uintptr(fd), "coverdir"))
}
