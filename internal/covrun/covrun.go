//go:build coverrun

package covrun

import (
	"os"

	"github.com/claude-sandbox/claude-sandbox/nsexec"
)

// Dir is the coverage directory, set with
// -ldflags=-X=github.com/claude-sandbox/claude-sandbox/internal/covrun.Dir=DIR.
var Dir string

func init() {
	if Dir != "" && os.Getenv("GOCOVERDIR") == "" {
		os.Setenv("GOCOVERDIR", Dir)
	}
	// The stages then run from main (nsexec.Init), after coverage's exit hook is set
	// (stageinit imports this package, so this runs before InitEarly).
	nsexec.NoEarlyInit()
}
