package shadow

import (
	"slices"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// allow-device patterns are expanded at launch into --dev-bind-try of
// each match; allow-host-port reaches the plan; neither survives
// egress-jail = 0 (host ports) or matches nothing (devices).
func TestAllowDeviceAndHostPort(t *testing.T) {
	in := inputs(fullHost())
	in.Config.AllowDevice = []string{"/dev/nvidia*", "/dev/dri/*", "/dev/none*"}
	in.Config.AllowHostPort = []netpolicy.HostPort{{Proto: netpolicy.ProtoTCP, Port: 11434}}
	in.Glob = func(p string) ([]string, error) {
		return map[string][]string{
			"/dev/nvidia*": {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"},
			"/dev/dri/*":   {"/dev/dri/card0", "/dev/dri/renderD128", "/dev/nvidia0"},
		}[p], nil
	}
	l, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range l.Options.Ops {
		if op.Kind == mounts.DevBind {
			if !op.Optional || op.Src != op.Dst {
				t.Errorf("device op %v: want a -try bind of the node at its own path", op)
			}
			got = append(got, op.Src)
		}
	}
	want := []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dri/card0", "/dev/dri/renderD128"}
	if !slices.Equal(got, want) {
		t.Errorf("device binds %q, want %q", got, want)
	}
	if len(l.Options.HostPorts) != 1 {
		t.Errorf("host ports %v", l.Options.HostPorts)
	}
	in.Config.EgressJail = false
	if l, err = Build(in); err != nil || len(l.Options.HostPorts) != 0 {
		t.Errorf("egress-jail = 0 keeps host ports %v (%v)", l.Options.HostPorts, err)
	}
}

func TestDevicePattern(t *testing.T) {
	for _, ok := range []string{"/dev/nvidia*", "/dev/dri/renderD128", "/dev/dri/*"} {
		if _, err := devicePattern(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"dev/nvidia0", "/dev/[", ""} {
		if _, err := devicePattern(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
