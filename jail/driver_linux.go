package jail

import (
	"encoding/json"

	"github.com/claude-sandbox/claude-sandbox/jail/netchild"
)

// The jail's network driver (nsexec's NetChild and Jail): the child half,
// package netchild, runs in the engine's holder stage, inside the jail's
// new network namespace, and builds it (TUN links, routes, filter); Jail
// is the launcher's half and serves what it passes back.

// ChildDriver is the name the jail's child driver is registered under in
// every binary that links this package.
const ChildDriver = netchild.Name

// devices are the TUN links the child creates: the egress device, then
// the sink for blocked ranges.
func devices() []netchild.Link {
	return []netchild.Link{{Name: TUN, Offload: true}, {Name: SinkDevice}}
}

// Child names the jail's child driver and its data: the devices and the
// route plan of Setup.
func (j *Jail) Child() (string, []byte, error) {
	data, err := json.Marshal(netchild.Data{Routes: j.setup.Routes, Devices: devices()})
	return ChildDriver, data, err
}
