package jail

import (
	"fmt"
	"sync"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/userstack"
	"github.com/claude-sandbox/claude-sandbox/userstack/inbound"
)

// Published is one published port's host socket (package
// userstack/inbound): opened by Listen before the sandbox starts, served
// once the jail's stack is up, closed by Jail.Close.
type Published = inbound.Published

// Listen opens the host sockets of the published ports. On error every
// socket opened so far is closed and the error names the port and the fix.
func Listen(pubs []netpolicy.Publish) ([]*Published, error) { return inbound.Listen(pubs) }

// servePublished starts relaying the published ports into the sandbox's
// IPv4 address.
func (j *Jail) servePublished(st *userstack.Stack) {
	idle := j.opts.UDPIdleTimeout
	if idle <= 0 {
		idle = userstack.DefaultUDPIdleTimeout
	}
	for _, p := range j.opts.Publish {
		var once sync.Once
		pb := p.Publish
		// The first failure of each port is worth a word: most often a
		// server inside that listens on 127.0.0.1 only, which the relay,
		// coming in at the sandbox's address, cannot reach.
		logf := func(format string, a ...any) {
			if j.opts.Warn == nil {
				return
			}
			once.Do(func() {
				j.opts.Warn(fmt.Sprintf("--publish %s: %s (later failures of this port are not reported)", pb, fmt.Sprintf(format, a...)))
			})
		}
		p.Serve(st, j.setup.Addr4.Addr(), idle, logf, &j.pubWG)
	}
}
