// Package oneproc gives the claude-sandbox command one P (GOMAXPROCS=1)
// from its package initialisation, as early as the import order allows:
// it imports only os and runtime (not even strings, whose own imports sort
// late and would hold it back), and its path sorts before every other
// package of the module, so its init function runs before the heavier
// initialisers (unicode's tables, gVisor's registrations, encoding/json,
// the CLI's own).
//
// Why one P: the launcher carries the jail's traffic on the userstack's
// event loop, and one P keeps that loop on one thread: with a second, the
// scheduler moves the loop between threads, each move a wake-up that
// costs CPU and buys no throughput (docs/performance.md, "One event
// loop"); without the jail it only relays the terminal and signals. And
// every P has its own cache of partly used memory spans: a second one
// during the setup left a jailed launcher larger for the sandbox's life
// (2.39 against 2.23 MB anonymous, issue 19). No command of this program
// needs two.
//
// Why this early: runtime.GOMAXPROCS(1) destroys the other Ps, and the
// main goroutine may be running on one of them; its span cache then goes
// back to the central lists, one fresh page of the runtime's span sets
// for each size class the initialisers allocated from. Called from main,
// after every initialiser, that cost about 57 page faults a launch (a
// perf record of page faults, issue 33); here, before them, a few.
//
// GOMAXPROCS in the environment still decides. A process started as one
// of this binary's internal helpers (argv[0] "claude-sandbox:...": a
// sandbox stage, which has GOMAXPROCS=1 in its environment anyway, or
// verify's nested helper) is left as it was.
package oneproc

import (
	"os"
	"runtime"
)

// helper begins the argv[0] of this binary's internal helpers.
const helper = "claude-sandbox:"

func init() {
	if os.Getenv("GOMAXPROCS") != "" || len(os.Args) > 0 && len(os.Args[0]) >= len(helper) && os.Args[0][:len(helper)] == helper {
		return
	}
	runtime.GOMAXPROCS(1)
}
