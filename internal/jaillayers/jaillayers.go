// Package jaillayers is how this module's test helpers take one
// enforcement layer of the egress jail away, to prove that the other
// blocks alone (integration/embedrun's -layer). It is not part of package
// jail's API: an internal package, which no program outside this module
// can import, and which nothing in the shipped binary sets.
package jaillayers

import (
	"sync"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/routes"
)

// Layers rewrite what each layer of the jails made from now on gets. The
// zero value leaves both as built.
type Layers struct {
	// StackPolicy rewrites every rule set the userstack is given: at
	// attach, at each live update and when the jail fails closed (the
	// kernel layer and the sink's records keep the jail's own).
	StackPolicy func(*netpolicy.Policy) *netpolicy.Policy
	// RoutePlan rewrites every route plan the live policy sends to the
	// kernel layer (the first one is the Setup's, which the caller
	// rewrites itself).
	RoutePlan func(routes.Plan) routes.Plan
}

var (
	mu  sync.Mutex
	cur Layers
)

// Set puts l in force for the jails made after it.
func Set(l Layers) {
	mu.Lock()
	cur = l
	mu.Unlock()
}

// Get returns the layers in force (jail.New reads them once).
func Get() Layers {
	mu.Lock()
	defer mu.Unlock()
	return cur
}
