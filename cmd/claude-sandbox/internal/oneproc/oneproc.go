// Package oneproc gives the claude-sandbox command one P (GOMAXPROCS=1)
// from its package initialisation, as early as the import order allows:
// it imports only runtime, and its path sorts before every other package
// of the module, so its init function runs sixth or so, right after the
// runtime's own packages, before the heavier initialisers (unicode's
// tables, gVisor's registrations, encoding/json, the CLI's own).
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
// perf record of page faults, issue 33); after os's initialiser (when it
// read the environment itself) about 30; here, a few.
//
// GOMAXPROCS in the environment still decides: main puts it back (this
// package cannot read the environment without importing os, which would
// hold its initialiser back). A sandbox stage
// has GOMAXPROCS=1 in its environment: the runtime starts it with one P
// and the call here changes nothing.
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
