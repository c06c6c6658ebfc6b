// Package earlyinit starts the sandbox's init for `claude-sandbox run
// --net=none` (or --net=host) from package initialisation, before the
// packages of the egress jail and the CLI are initialised: their
// initialisers (the netstack's among them) then run while init is cloned
// and starts its runtime, instead of before (nsexec.Prestart).
//
// Only the plainest command lines are recognised, from the words before
// `--` or the command; the CLI parses them properly later and hands the
// early init to nsexec.Start, which takes it only when the plan's network
// mode and ids are the ones it was started with, and stops it otherwise.
// A guess that is wrong costs a process, never a wall.
package earlyinit

import (
	"os"
	"path/filepath"
	"strings"

	// First: a coverage build's GOCOVERDIR, which the stages inherit
	// (nsexec's coverDir is read once, at the first stage).
	_ "github.com/claude-sandbox/claude-sandbox/internal/covrun"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

var early *nsexec.Early

func init() {
	if net := guessNet(os.Args); net != "" {
		// No thread of this program ever ends (see the launch in main).
		early = nsexec.Prestart(net, os.Getuid(), os.Getgid(), nsexec.Options{ThreadsNeverEnd: true})
	}
}

// guessNet returns the network mode of a `run` command line that names
// none or host, or "".
func guessNet(argv []string) plan.Net {
	if len(argv) < 3 || filepath.Base(argv[0]) == "claude" || argv[1] != "run" {
		return ""
	}
	var net string
	for i := 2; i < len(argv); i++ {
		a := argv[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		switch {
		case a == "-h" || a == "--help":
			return ""
		case strings.HasPrefix(a, "--net="):
			net = strings.TrimPrefix(a, "--net=")
		case a == "--net" && i+1 < len(argv):
			i++
			net = argv[i]
		}
	}
	switch plan.Net(net) {
	case plan.NetNone, plan.NetHost:
		return plan.Net(net)
	}
	return ""
}

// Take returns the early init, once, or nil.
func Take() *nsexec.Early {
	e := early
	early = nil
	return e
}

// Abort stops the early init if no one took it: call it before exiting.
func Abort() {
	Take().Abort()
}
