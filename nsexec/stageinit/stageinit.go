// Package stageinit runs this binary's sandbox stage, when the process
// was started as one, from package initialisation rather than from main.
// Import it for its side effect, from the main package of a program that
// starts sandboxes:
//
//	import _ "github.com/claude-sandbox/claude-sandbox/nsexec/stageinit"
//
// and still call nsexec.Init (or sandbox.Init) first thing in main. The
// stage then starts before the packages it does not need are initialised
// and keeps one thread fewer for the sandbox's life (see
// nsexec.InitEarly). Packages initialise in the order of their import
// paths where their imports allow: this one comes once nsexec and the
// jail's child driver (which it links, so that the holder stage can run
// from here as well) are initialised, and with them the driver's own
// imports (net, the netlink package); a package that sorts before those
// and is ready meanwhile (shadow, in the claude-sandbox binary) is
// initialised first too. All of that is a few kB of allocations
// (GODEBUG=inittrace=1), no thread.
package stageinit

import (
	// First: a coverage build turns the early start off (covrun).
	_ "github.com/claude-sandbox/claude-sandbox/internal/covrun"
	// The egress jail's child driver registers itself before this
	// package's init runs, so a holder stage starts from package
	// initialisation too instead of waiting for main.
	_ "github.com/claude-sandbox/claude-sandbox/jail/netchild"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
)

func init() { nsexec.InitEarly() }
