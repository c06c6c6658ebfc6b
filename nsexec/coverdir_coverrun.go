//go:build coverrun

package nsexec

import (
	"io"
	"os"
	"runtime/coverage"
	"sync"
)

// coverDir is GOCOVERDIR in a -cover binary, else "".
var coverDir = sync.OnceValue(func() string {
	d := os.Getenv("GOCOVERDIR")
	if d == "" || coverage.WriteMeta(io.Discard) != nil {
		return ""
	}
	return d
})
