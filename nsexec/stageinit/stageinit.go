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
// paths where their imports allow: this one comes once nsexec is
// initialised, and with it nsexec's own imports; a package that sorts
// before those and is ready meanwhile (shadow, in the claude-sandbox
// binary, and some of gVisor's) is initialised first too. It does not
// link the egress jail's child driver (package jail/netchild, which pulls
// in net and the netlink package): a holder stage started here is left to
// that package's init function, which runs it as soon as the driver is
// registered (nsexec.InitHeldEarly), or else to main's nsexec.Init.
package stageinit

import (
	// First: a coverage build turns the early start off (covrun).
	_ "github.com/claude-sandbox/claude-sandbox/internal/covrun"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
)

func init() { nsexec.InitEarly() }
