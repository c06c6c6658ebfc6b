package main

import (
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/jail"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/verify"
)

// verify reads the allowed host ports from the comment the jail writes.
func TestHostsMarkerShared(t *testing.T) {
	if jail.HostsMarker != verify.HostsMarker {
		t.Errorf("jail writes %q, verify reads %q", jail.HostsMarker, verify.HostsMarker)
	}
}

func TestReachOptions(t *testing.T) {
	r, err := parseRunArgs([]string{"--allow-host-port", "11434", "--allow-host-port=5353/udp", "--publish", "8080:3000", "--publish=0.0.0.0:5353:53/udp", "--dev-bind", "/dev/null", "/dev/x", "--dev-bind-try", "/dev/nope", "/dev/y", "true"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.opts.HostPorts) != 2 || r.opts.HostPorts[1] != (netpolicy.HostPort{Proto: netpolicy.ProtoUDP, Port: 5353}) {
		t.Errorf("host ports %v", r.opts.HostPorts)
	}
	if len(r.opts.Publish) != 2 || r.opts.Publish[0].String() != "127.0.0.1:8080:3000/tcp" || r.opts.Publish[1].String() != "0.0.0.0:5353:53/udp" {
		t.Errorf("publish %v", r.opts.Publish)
	}
	if len(r.opts.Ops) != 2 || r.opts.Ops[0].Kind != "dev-bind" || r.opts.Ops[1].Optional != true {
		t.Errorf("ops %v", r.opts.Ops)
	}
	for _, bad := range [][]string{{"--allow-ip", "127.0.0.1"}, {"--allow-ip", "::1"}, {"--allow-cidr", "127.0.0.0/8"}, {"--allow-ip", "0.0.0.0"}, {"--allow-ip", "::"}, {"--allow-cidr", "0.0.0.0/8"}, {"--allow-host-port", "0"}, {"--publish", "80"}} {
		_, err := parseRunArgs(append(bad, "true"), false)
		if err == nil {
			t.Errorf("%v accepted", bad)
		}
		if bad[0] != "--publish" && bad[0] != "--allow-host-port" && !strings.Contains(err.Error(), "--allow-host-port") {
			t.Errorf("%v: %v, want it to point to --allow-host-port", bad, err)
		}
	}
	p := &plan.Plan{}
	if openings(p) != "" {
		t.Error("openings of a plan without any")
	}
}
