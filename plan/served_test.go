package plan

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// A socket the launcher serves (--ssh-agent's) is listed in /proc/net/unix
// like any host socket: bound among the other operations, the socket
// masks would cover it at its place inside; Served binds it after them.
func TestServedSocketAfterMasks(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bind := mounts.Op{Kind: mounts.Bind, Src: sock, Dst: "/run/claude-sandbox/ssh-agent.sock"}
	last := func(p *Plan) (at int, masked bool) {
		at = -1
		for i, op := range p.Mounts {
			if op.Dst != bind.Dst {
				continue
			}
			if op.Kind == mounts.MaskSocket {
				masked = true
			}
			at = i
		}
		return at, masked
	}
	p, err := Build(Options{Command: []string{"true"}, Late: []mounts.Op{bind}})
	if err != nil {
		t.Fatal(err)
	}
	if _, masked := last(p); !masked {
		t.Fatal("a served socket bound among the other operations is not masked: the test proves nothing")
	}
	p, err = Build(Options{Command: []string{"true"}, Served: []mounts.Op{bind}})
	if err != nil {
		t.Fatal(err)
	}
	if at, _ := last(p); at != len(p.Mounts)-1 || p.Mounts[at].Kind != mounts.Bind {
		t.Errorf("the served socket's bind is not the last operation: %+v", p.Mounts)
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Options{Command: []string{"true"}, Served: []mounts.Op{{Kind: mounts.Bind, Src: f, Dst: "/run/x"}}}); err == nil {
		t.Error("Served took a bind of a regular file")
	}
}
