// Command embedrun is a test helper that embeds the engine the way a Go
// program would: it reads a plan.Plan as JSON from the file named by its
// first argument and runs it with nsexec.Run. Tests use it to apply plans
// the command line cannot express. It is never shipped.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/claude-sandbox/claude-sandbox/nsexec"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

func main() {
	nsexec.Init()
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: embedrun PLAN.json")
		os.Exit(2)
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedrun:", err)
		os.Exit(2)
	}
	var p plan.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		fmt.Fprintln(os.Stderr, "embedrun:", err)
		os.Exit(2)
	}
	code, err := nsexec.Run(&p, nsexec.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedrun:", err)
	}
	os.Exit(code)
}
