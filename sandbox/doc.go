// Package sandbox is the entry point for Go programs that run commands in
// claude-sandbox's sandbox: an agent harness, a CI runner, an editor's
// backend. A [Spec] says what to run and what the command may see and
// reach; [Start] builds the sandbox and returns a [Sandbox] to wait for,
// signal, watch (blocked flows, the command's exit) or cancel.
//
// # The re-exec hook
//
// Go cannot create a user namespace for a running, multi-threaded
// process, so the engine re-executes the program's own binary
// (/proc/self/exe) as the sandbox's stages. The program must let those
// re-executions run the stage instead of its main, with one call at the
// very top of main, before flag parsing or anything else:
//
//	func main() {
//		sandbox.Init() // a re-executed stage runs here and never returns
//		...
//	}
//
// This is the pattern of Docker's reexec.Init and of Go's own os/exec
// tests. A program that forgot it gets a [Start] error naming the fix
// (the stage's first message never came), never a hang or a half-built
// sandbox. A program that keeps many sandboxes running can also import
// github.com/claude-sandbox/claude-sandbox/nsexec/stageinit for its side
// effect: each sandbox's init then starts from package initialisation,
// before the packages it does not use, and keeps one thread fewer (the
// claude-sandbox binary does; see nsexec.InitEarly). sandbox.Init is
// still needed.
//
// The binary must be built with CGO_ENABLED=0: the engine drops
// privileges on every thread with syscall.AllThreadsSyscall, which cgo
// binaries cannot use. A program that needs cgo can point
// [Spec.StageExe] at a static helper whose main calls [Init] (the
// claude-sandbox binary is one) built from the same version of this
// module.
//
// [Start] may be called from any goroutine, one locked to its thread
// included (to enter a network namespace first, say) that returns
// afterwards and so ends its thread: the sandbox dies with the program,
// never with the thread that started it. (The stages' parent-death
// signal follows a thread, so the engine starts them from one that
// lives as long as the process: the main thread, or one it keeps for
// that, started at the first [Start] from another thread.)
//
// # Cancellation
//
// Cancelling the context given to [Start] kills the sandbox: its init, the
// command and every process it started die with their PID namespace, the
// mounts with their mount namespace, and the egress jail's links with its
// network namespace. [Sandbox.Wait] returns once all of that is gone.
//
// # What is public
//
// This package, its Spec, Sandbox and Event, and the mounts.Op values a
// Spec's Mounts holds, are the embedding API, kept compatible within a
// major version. The engine's own packages (nsexec, plan, jail, userstack,
// routes) are public for the claude-sandbox command and for tests that
// take a layer apart; they may change between minor versions.
package sandbox
