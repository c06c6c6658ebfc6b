package nsexec

import (
	"os"
	"sync"
)

// The network of plan.NetJail is a driver in two halves, after
// rootlesskit's parent and child drivers: the engine creates the jail's
// user and network namespaces (the holder stage) and knows nothing of
// what goes in them.
//
//   - The child half ([NetChild]) runs in the holder, inside the new
//     namespaces, before anything else runs there. It is compiled into
//     every binary that runs the stages and registered by name
//     ([RegisterNetChild], from an init function of the driver's package).
//   - The parent half is the launcher's [Jail]: it names the child and
//     hands it opaque data, and gets back the child's descriptors (TUN
//     links, sockets opened inside the namespace) and opaque data, which
//     it serves from the launcher's side for the sandbox's life.

// NetChild is the child half of a network driver.
type NetChild interface {
	// Setup configures the current (new, empty) network namespace from
	// data, the parent's opaque bytes. It returns descriptors for the
	// parent's Attach (passed over SCM_RIGHTS; the stage closes its own
	// copies) and opaque bytes for it. warn reaches the user. An error
	// fails the launch: nothing has run in the namespace yet.
	Setup(data []byte, warn func(string)) (files []*os.File, reply []byte, err error)
}

var (
	netChildMu sync.Mutex
	netChilds  = map[string]NetChild{}
)

// RegisterNetChild makes c the child driver named name in this binary.
// Call it from an init function: the stages are this binary re-executed,
// and look the driver up by name before main runs.
func RegisterNetChild(name string, c NetChild) {
	netChildMu.Lock()
	defer netChildMu.Unlock()
	netChilds[name] = c
}

func netChild(name string) NetChild {
	netChildMu.Lock()
	defer netChildMu.Unlock()
	return netChilds[name]
}

// Jail is the parent half of the egress jail's network driver
// (plan.NetJail): the launcher's side, typically a userspace network
// stack that serves the TUN device its child created.
type Jail interface {
	// Child names the registered [NetChild] that sets the jail's
	// namespace up, and the data it is given there.
	Child() (name string, data []byte, err error)
	// Attach starts serving what the child passed back: its descriptors
	// (the engine closes its copies after Attach returns) and its data.
	// When it returns nil the jail is in place, and only then is the
	// command started.
	Attach(files []*os.File, reply []byte) error
	// Failed delivers a fatal error of the jail; the sandbox is killed.
	Failed() <-chan error
	// Close stops the jail, after the sandbox has ended.
	Close()
}

// InitAware is a [Jail] that is told the pid of the sandbox's init (in
// the launcher's PID namespace) before Attach: through it the jail's
// half reaches the sandbox's own /proc (the process behind a flow).
type InitAware interface {
	SetInitPID(pid int)
}
