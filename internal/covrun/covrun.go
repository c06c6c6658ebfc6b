//go:build coverrun

package covrun

import "os"

// Dir is the coverage directory, set with
// -ldflags=-X=github.com/claude-sandbox/claude-sandbox/internal/covrun.Dir=DIR.
var Dir string

func init() {
	if Dir != "" && os.Getenv("GOCOVERDIR") == "" {
		os.Setenv("GOCOVERDIR", Dir)
	}
}
