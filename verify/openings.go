package verify

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Openings are what the sandbox was let reach on purpose: host loopback
// ports (--allow-host-port), published ports (--publish) and host devices
// (--dev-bind). verify prints a line for each, status OPEN (never a
// failure: they were asked for), so a session sees what it was given.
// IDs: P90 host loopback ports, P91 published ports, P92 devices, P93
// --ssh-agent hosts.

// Open is the status of an opening's line.
const Open Status = "OPEN"

// PublishedEnv is the variable the launcher sets inside to the published
// ports ("127.0.0.1:8080:3000/tcp ...", space-separated): nothing inside
// could tell them otherwise.
const PublishedEnv = "CLAUDE_SANDBOX_PUBLISHED"

// HostsMarker starts the comment of the sandbox's /etc/hosts that lists
// the allowed host loopback ports (jail.HostsMarker).
const HostsMarker = "# claude-sandbox: host.internal is the host's loopback on the ports (--allow-host-port):"

// SSHKnownHosts is the known_hosts --ssh-agent places inside, holding
// exactly the hosts its agent signs for (sshagent.InsideKnownHosts).
const SSHKnownHosts = "/run/claude-sandbox/ssh_known_hosts"

// sshAgentHosts lists the hosts of SSHKnownHosts, each once, in order.
func sshAgentHosts(e *Env) []string {
	b, err := os.ReadFile(e.path(SSHKnownHosts))
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && !seen[f[0]] {
			seen[f[0]] = true
			out = append(out, f[0])
		}
	}
	return out
}

// hostPortRE is compiled on first use, not at every start of the binary
// (issue 33).
var hostPortRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{1,5}/(tcp|udp)$`) })

// allowedHostPorts reads the allowed host loopback ports and host.internal's
// address from the sandbox's /etc/hosts (read-only inside); none when the
// file has no marker.
func allowedHostPorts(e *Env) (addr string, ports []string) {
	b, err := os.ReadFile(e.path("/etc/hosts"))
	if err != nil {
		return "", nil
	}
	marked := false
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, HostsMarker); ok {
			marked = true
			for _, f := range strings.Fields(rest) {
				if hostPortRE().MatchString(f) {
					ports = append(ports, f)
				}
			}
			continue
		}
		if f := strings.Fields(l); marked && len(f) >= 2 && f[1] == "host.internal" {
			addr = f[0]
		}
	}
	return addr, ports
}

// hostPortAllowed reports whether port/network is an allowed host port.
func hostPortAllowed(e *Env, network, port string) bool {
	_, ports := allowedHostPorts(e)
	for _, p := range ports {
		if p == port+"/"+network {
			return true
		}
	}
	return false
}

// standardDev are the private /dev's own entries.
var standardDev = map[string]bool{
	"null": true, "zero": true, "full": true, "random": true, "urandom": true, "tty": true,
	"pts": true, "shm": true, "ptmx": true, "fd": true, "stdin": true, "stdout": true, "stderr": true,
}

// devices lists the device nodes in /dev beyond the private /dev's own,
// one directory level deep (/dev/dri/renderD128).
func devices(e *Env) []string {
	var out []string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		ents, err := os.ReadDir(e.path(dir))
		if err != nil {
			return
		}
		for _, d := range ents {
			p := dir + "/" + d.Name()
			if dir == "/dev" && standardDev[d.Name()] {
				continue
			}
			var st unix.Stat_t
			if unix.Lstat(e.path(p), &st) != nil {
				continue
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFCHR:
				out = append(out, fmt.Sprintf("%s (character device %d:%d)", p, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
			case unix.S_IFBLK:
				out = append(out, fmt.Sprintf("%s (block device %d:%d)", p, unix.Major(st.Rdev), unix.Minor(st.Rdev)))
			case unix.S_IFDIR:
				if depth < 2 {
					walk(p, depth+1)
				}
			}
		}
	}
	walk("/dev", 0)
	sort.Strings(out)
	return out
}

// Openings returns a line for each opening (none when there are none).
func Openings(e *Env) []Result {
	var out []Result
	if addr, ports := allowedHostPorts(e); len(ports) > 0 {
		where := "host.internal"
		if addr != "" {
			where += " (" + addr + ")"
		}
		for _, p := range ports {
			out = append(out, Result{"P90", "host loopback port " + p, Open, "reachable at " + where + " on the same port: the host's 127.0.0.1:" + strings.Split(p, "/")[0] + "; every other host loopback port stays refused (P32)"})
		}
	}
	if e.Getenv != nil {
		for _, p := range strings.Fields(e.Getenv(PublishedEnv)) {
			out = append(out, Result{"P91", "published port " + p, Open, "the launcher listens on the host and relays each connection into this sandbox's port (a server here must listen on 0.0.0.0)"})
		}
	}
	for _, d := range devices(e) {
		out = append(out, Result{"P92", "device " + strings.Fields(d)[0], Open, d + ", bound from the host with --dev-bind: usable here"})
	}
	for _, h := range sshAgentHosts(e) {
		out = append(out, Result{"P93", "ssh-agent host " + h, Open, "the agent at SSH_AUTH_SOCK signs an ssh authentication to " + h + " with the caller's key (its server proved the host key of " + SSHKnownHosts + "); every other signature is refused"})
	}
	return out
}
