package plan

import (
	"errors"
	"io/fs"
	"net/netip"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

type modeInfo struct {
	fakeInfo
	mode fs.FileMode
}

func (m modeInfo) Mode() fs.FileMode { return m.mode }
func (m modeInfo) IsDir() bool       { return m.mode.IsDir() }

func TestDevBindSources(t *testing.T) {
	modes := map[string]fs.FileMode{
		"/dev/dri/renderD128": fs.ModeDevice | fs.ModeCharDevice, "/dev/sda": fs.ModeDevice, "/srv/null2": fs.ModeDevice | fs.ModeCharDevice,
		"/dev/dri": fs.ModeDir, "/dev": fs.ModeDir, "/home/u": fs.ModeDir, "/etc/passwd": 0, "/dev/log": fs.ModeSocket,
		"/dev/shm/link": fs.ModeDir, // a directory by stat, reached through a symlink
	}
	stat := func(p string) (fs.FileInfo, error) {
		if m, ok := modes[p]; ok {
			return modeInfo{mode: m}, nil
		}
		return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	// The path check (mounts.CheckDevDir in production) is asked about
	// directories below /dev only.
	var asked []string
	devDir := func(p string) error {
		asked = append(asked, p)
		if p == "/dev/shm/link" {
			return errors.New("goes through a symlink")
		}
		return nil
	}
	build := func(op mounts.Op) error {
		_, err := Build(Options{Command: []string{"true"}, Net: NetNone, Ops: []mounts.Op{op}, Stat: stat, DevDir: devDir, Host: noHost})
		return err
	}
	for _, src := range []string{"/dev/dri/renderD128", "/dev/sda", "/srv/null2", "/dev/dri"} {
		if err := build(mounts.Op{Kind: mounts.DevBind, Src: src, Dst: "/dev/x"}); err != nil {
			t.Errorf("--dev-bind %s: %v", src, err)
		}
	}
	if len(asked) != 1 || asked[0] != "/dev/dri" {
		t.Errorf("the path check was asked about %q, want only the directory /dev/dri", asked)
	}
	for src, want := range map[string]string{"/dev": "outside /dev", "/home/u": "outside /dev", "/etc/passwd": "not a device node", "/dev/log": "not a device node", "/dev/missing": "does not exist", "/dev/shm/link": "/dev/shm/link: goes through a symlink"} {
		if err := build(mounts.Op{Kind: mounts.DevBind, Src: src, Dst: "/dev/x"}); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--dev-bind") {
			t.Errorf("--dev-bind %s: %v, want a refusal saying %q", src, err, want)
		}
	}
	if err := build(mounts.Op{Kind: mounts.DevBind, Src: "/dev/missing", Dst: "/dev/x", Optional: true}); err != nil {
		t.Errorf("--dev-bind-try of a missing node: %v", err)
	}
	if err := build(mounts.Op{Kind: mounts.DevBind, Src: "/dev/shm/link", Dst: "/dev/x", Optional: true}); err == nil || !strings.Contains(err.Error(), "--dev-bind-try: source /dev/shm/link: goes through a symlink") {
		t.Errorf("--dev-bind-try of a directory through a symlink: %v, want a refusal", err)
	}
}

func TestHostPortsNeedJail(t *testing.T) {
	hp := []netpolicy.HostPort{{Proto: netpolicy.ProtoTCP, Port: 8080}, {Proto: netpolicy.ProtoTCP, Port: 8080}}
	p, err := Build(Options{Command: []string{"true"}, HostPorts: hp, Host: noHost})
	if err != nil || len(p.Egress.HostPorts) != 1 {
		t.Fatalf("jail: %v %v", p, err)
	}
	for _, n := range []Net{NetHost, NetNone} {
		if _, err := Build(Options{Command: []string{"true"}, Net: n, HostPorts: hp, Host: noHost}); err == nil || !strings.Contains(err.Error(), "--net=jail") {
			t.Errorf("--net=%s with host ports: %v", n, err)
		}
	}
}

// --internet-cidr is the jail's: another network mode refuses it, the
// jail's plan carries it.
func TestInternetCIDRNeedsJail(t *testing.T) {
	in := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
	if _, err := Build(Options{Command: []string{"true"}, Net: NetNone, Internet: in, Host: noHost}); err == nil || !strings.Contains(err.Error(), "--internet-cidr applies to the egress jail") {
		t.Errorf("--net=none with --internet-cidr: %v", err)
	}
	p, err := Build(Options{Command: []string{"true"}, Net: NetJail, Internet: in, Host: noHost})
	if err != nil || p.Egress == nil || len(p.Egress.Internet) != 1 || p.Egress.Internet[0] != in[0] {
		t.Errorf("jail plan with --internet-cidr: %+v %v", p, err)
	}
}
