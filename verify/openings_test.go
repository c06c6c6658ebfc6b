package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenings(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "dev/dri"), 0o755))
	hosts := "127.0.0.1 localhost\n" + HostsMarker + " 11434/tcp 5353/udp\n198.51.100.1\thost.internal\n"
	must(os.WriteFile(filepath.Join(root, "etc/hosts"), []byte(hosts), 0o644))
	for _, n := range []string{"null", "zero", "tty"} {
		must(os.WriteFile(filepath.Join(root, "dev", n), nil, 0o644)) // standard names: never listed
	}
	devs := os.Geteuid() == 0
	if devs {
		must(unix.Mknod(filepath.Join(root, "dev/dri/renderD128"), unix.S_IFCHR|0o666, int(unix.Mkdev(226, 128))))
		must(unix.Mknod(filepath.Join(root, "dev/nvidia0"), unix.S_IFCHR|0o666, int(unix.Mkdev(195, 0))))
	}
	must(os.MkdirAll(filepath.Join(root, "run/claude-sandbox"), 0o755))
	must(os.WriteFile(filepath.Join(root, SSHKnownHosts), []byte("forge.test ssh-ed25519 AAAA\nforge.test ssh-rsa AAAA\n[git.example]:2222 ssh-ed25519 AAAA\n"), 0o444))
	env := map[string]string{PublishedEnv: "127.0.0.1:8080:3000/tcp 0.0.0.0:5353:53/udp"}
	e := &Env{Root: root, Getenv: func(k string) string { return env[k] }}
	var got []string
	for _, r := range Openings(e) {
		if r.Status != Open {
			t.Errorf("%v: status %s", r, r.Status)
		}
		got = append(got, r.ID+" "+r.Name)
	}
	want := []string{"P90 host loopback port 11434/tcp", "P90 host loopback port 5353/udp", "P91 published port 127.0.0.1:8080:3000/tcp", "P91 published port 0.0.0.0:5353:53/udp"}
	if devs {
		want = append(want, "P92 device /dev/dri/renderD128", "P92 device /dev/nvidia0")
	}
	want = append(want, "P93 ssh-agent host forge.test", "P93 ssh-agent host [git.example]:2222")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("openings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !hostPortAllowed(e, "tcp", "11434") || hostPortAllowed(e, "udp", "11434") || hostPortAllowed(e, "tcp", "8080") {
		t.Error("hostPortAllowed does not follow the marker")
	}
	// Without the marker (a host.internal the host's own /etc/hosts
	// names), nothing is allowed.
	must(os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("10.0.0.1 host.internal\n# 8080/tcp\n"), 0o644))
	if _, ports := allowedHostPorts(e); len(ports) != 0 {
		t.Errorf("ports without the marker: %v", ports)
	}
	r := Report{Inside: true, Probes: append([]Result{{"P01", "x", Blocked, ""}}, Openings(e)...)}
	if !r.OK() || !strings.Contains(r.ResultLine(), "1 probes: 1 blocked") || !strings.Contains(r.ResultLine(), "openings on purpose") {
		t.Errorf("result line %q", r.ResultLine())
	}
}
