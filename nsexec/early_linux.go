package nsexec

import (
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// Early is a sandbox's init started before its plan was built: see
// [Prestart].
type Early struct {
	net      plan.Net
	uid, gid int
	o        Options
	done     chan struct{}
	l        *launch // once done: the launch, init started, or nil
	taken    bool
}

// Prestart starts, in the background, the init of a sandbox whose plan
// is still being built: in the namespaces a plan with network mode net
// (plan.NetNone or plan.NetHost; for any other it returns nil) and ids
// uid and gid asks for, with the stdio and stage binary of o. The new
// process runs nothing of the plan: it starts its runtime and waits for
// the plan, which [Start] (or [Run]) sends it once built, so the two
// overlap. Pass the result in Options.Early: Start takes init when the
// plan's network mode and ids and the options' stdio, TTY mode and stage
// binary are the ones given here, and otherwise stops it and starts a
// new one. A caller that does not start the sandbox after all calls
// [Early.Abort]. In a stage whose main did not call Init it starts
// nothing (Start reports that).
func Prestart(net plan.Net, uid, gid int, o Options) *Early {
	if net != plan.NetNone && net != plan.NetHost || isStageWithoutInit() {
		return nil
	}
	o.withDefaults()
	o.Early = nil
	e := &Early{net: net, uid: uid, gid: gid, o: o, done: make(chan struct{})}
	go e.spawn()
	return e
}

func (e *Early) spawn() {
	defer close(e.done)
	l := &launch{p: &plan.Plan{Net: e.net, UID: e.uid, GID: e.gid}, o: e.o, initFD: -1}
	if err := l.channels(); err != nil {
		l.closeAll()
		return
	}
	if err := l.terminalSetup(); err != nil {
		l.closeAll()
		return
	}
	if err := l.spawnInit(); err != nil {
		// Start starts it anew, and reports why it failed.
		l.closeAll()
		return
	}
	e.l = l
}

// take returns the early launch for p and o (normalised by Start), init
// started, or nil (after stopping init when it does not suit them).
func (e *Early) take(p *plan.Plan, o Options) *launch {
	if e == nil {
		return nil
	}
	<-e.done
	if e.taken || e.l == nil {
		return nil
	}
	eo := e.l.o
	if p.Net != e.net || p.UID != e.uid || p.GID != e.gid ||
		o.Stdin != eo.Stdin || o.Stdout != eo.Stdout || o.Stderr != eo.Stderr ||
		o.TTY != eo.TTY || o.StageExe != eo.StageExe {
		e.Abort()
		return nil
	}
	e.taken = true
	l := e.l
	l.p, l.o = p, o
	if l.term != nil {
		// The filter was made before the options came.
		l.term.out.f.clipboard = o.Clipboard && l.term.out.f.interactive
	}
	return l
}

// Abort stops init, if it was started and not taken by [Start]; safe to
// call on nil and more than once.
func (e *Early) Abort() {
	if e == nil {
		return
	}
	<-e.done
	if e.taken || e.l == nil {
		return
	}
	e.taken = true
	// Killed before its channel is closed: init, waiting for its start,
	// would otherwise see the end of the channel and say so on stderr.
	l := e.l
	l.killStages()
	l.wait()
	l.closeAll()
}
