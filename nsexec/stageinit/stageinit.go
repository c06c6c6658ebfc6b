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
// paths where their imports allow, and this one comes right after nsexec.
package stageinit

import (
	// First: a coverage build turns the early start off (covrun).
	_ "github.com/claude-sandbox/claude-sandbox/internal/covrun"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
)

func init() { nsexec.InitEarly() }
