package integration

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// lab is the network the jail tests run in (design.md section 6): two
// network namespaces the test creates and deletes, joined by a veth pair.
//
//	host  (192.0.2.2/24, default via 192.0.2.1; plays the sandbox's host)
//	  | veth
//	world (192.0.2.1/24; on its lo: the "internet" 203.0.113.10, a DNS
//	       server 203.0.113.53, a lab device 10.20.0.5, a CGNAT peer
//	       100.64.1.1, the metadata address 169.254.169.254)
//
// No packet leaves these namespaces: the machine's own network and
// resolver are never used (the host's resolv.conf is the lab's, through
// /etc/netns/NAME/resolv.conf, which `ip netns exec` binds).
type lab struct {
	t           testing.TB
	host, world string
	vh, vw      string // the veth ends in host and world
	wg          sync.WaitGroup
	mu          sync.Mutex
	closers     []io.Closer
}

// Addresses in the lab.
const (
	labInternet = "203.0.113.10"
	labDNS      = "203.0.113.53"
	labDevice   = "10.20.0.5"
	labCGNAT    = "100.64.1.1"
	labMetadata = "169.254.169.254"
	labPeer     = "192.0.2.1" // on the host's connected subnet
	labHostAddr = "192.0.2.2"
	// labGateway is the jail's own gateway: the host sits on 192.0.2.0/24,
	// so the jail must pick its addresses from the next candidate range.
	labGateway = "198.51.100.1"
)

func ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newLab(t testing.TB) *lab {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	testutil.NeedsTUN(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("iproute2 is needed for the test network (scripts/test.sh installs it)")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	l := &lab{t: t, host: "cs-host-" + id, world: "cs-world-" + id}
	ip(t, "netns", "add", l.host)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", l.host).Run() })
	ip(t, "netns", "add", l.world)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", l.world).Run() })
	vh, vw := "csh"+id, "csw"+id
	ip(t, "link", "add", vh, "netns", l.host, "type", "veth", "peer", "name", vw, "netns", l.world)
	ip(t, "-n", l.host, "link", "set", "lo", "up")
	ip(t, "-n", l.host, "addr", "add", labHostAddr+"/24", "dev", vh)
	ip(t, "-n", l.host, "link", "set", vh, "up")
	ip(t, "-n", l.host, "route", "add", "default", "via", labPeer)
	// As most distributions do: any group may use ping sockets (the jail
	// proxies the sandbox's pings with one).
	if out, err := exec.Command("ip", "netns", "exec", l.host, "sysctl", "-q", "-w", "net.ipv4.ping_group_range=0 2147483647").CombinedOutput(); err != nil {
		t.Fatalf("ping_group_range: %v\n%s", err, out)
	}
	// Neither side forwards, whatever the machine's own setting: a new
	// namespace inherits net.ipv4.ip_forward from the initial one (Docker
	// and Podman turn it on there), and a world that forwarded would
	// answer a SYN to an address it has no route for with ICMP
	// unreachable instead of dropping it (TestRelayConnectNonAnsweringTimesOut).
	for _, ns := range []string{l.host, l.world} {
		if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=0").CombinedOutput(); err != nil {
			t.Fatalf("ip_forward: %v\n%s", err, out)
		}
	}
	ip(t, "-n", l.world, "link", "set", "lo", "up")
	ip(t, "-n", l.world, "addr", "add", labPeer+"/24", "dev", vw)
	ip(t, "-n", l.world, "link", "set", vw, "up")
	for _, a := range []string{labInternet, labDNS, labDevice, labCGNAT, labMetadata} {
		ip(t, "-n", l.world, "addr", "add", a+"/32", "dev", "lo")
	}
	l.setResolvConf("nameserver " + labDNS + "\n")
	t.Cleanup(l.stop)
	l.vh, l.vw = vh, vw
	return l
}

// IPv6 addresses of a lab with IPv6 (addIPv6).
const (
	labHost6     = "2001:db8:1::2"
	labPeer6     = "2001:db8:1::1"   // on the host's connected IPv6 subnet
	labInternet6 = "2001:db8:ff::10" // the "internet" over IPv6
	labDevice6   = "fd00:20::5"      // a unique-local lab device
)

// addIPv6 gives the lab IPv6: a connected subnet between host and world,
// a default route, and world addresses for the internet and a device.
func (l *lab) addIPv6() {
	t := l.t
	ip(t, "-n", l.host, "addr", "add", labHost6+"/64", "dev", l.vh, "nodad")
	ip(t, "-n", l.world, "addr", "add", labPeer6+"/64", "dev", l.vw, "nodad")
	ip(t, "-n", l.host, "-6", "route", "add", "default", "via", labPeer6)
	for _, a := range []string{labInternet6, labDevice6} {
		ip(t, "-n", l.world, "addr", "add", a+"/128", "dev", "lo")
	}
}

// waitNoTentative waits (10 s at most) until no IPv6 address in
// namespace ns is tentative (duplicate address detection still running).
func (l *lab) waitNoTentative(ns string) {
	l.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command("ip", "-n", ns, "-6", "addr", "show", "tentative").CombinedOutput()
		if err != nil {
			l.t.Fatalf("ip -n %s -6 addr show tentative: %v\n%s", ns, err, out)
		}
		if strings.TrimSpace(string(out)) == "" {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("addresses still tentative in %s after 10 s:\n%s", ns, out)
		}
	}
}

// setResolvConf sets the host namespace's /etc/resolv.conf.
func (l *lab) setResolvConf(content string) {
	dir := filepath.Join("/etc/netns", l.host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(content), 0o644); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) stop() {
	l.mu.Lock()
	for _, c := range l.closers {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// inNetns runs f on a thread switched into the named namespace; sockets
// created there stay in it.
func inNetns(name string, f func() error) error { return testutil.InNetns(name, f) }

func (l *lab) track(c io.Closer) {
	l.mu.Lock()
	l.closers = append(l.closers, c)
	l.mu.Unlock()
}

// serveTCP accepts connections on addr in namespace ns and runs handle on
// each, until the lab stops.
func (l *lab) serveTCP(ns, addr string, handle func(c net.Conn)) {
	var ln net.Listener
	if err := inNetns(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		l.t.Fatalf("listen tcp %s in %s: %v", addr, ns, err)
	}
	l.track(ln)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// echoTCP serves a line echo on addr in namespace ns.
func (l *lab) echoTCP(ns, addr string) {
	l.serveTCP(ns, addr, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := c.Write([]byte(line)); err != nil {
				return
			}
		}
	})
}

// echoUDP serves a datagram echo on addr in namespace ns.
func (l *lab) echoUDP(ns, addr string) {
	l.serveUDP(ns, addr, func(req []byte) ([]byte, error) { return req, nil })
}

// serveUDP answers each datagram to addr in namespace ns with what answer
// returns for it (nothing when it returns an error), until the lab ends.
func (l *lab) serveUDP(ns, addr string, answer func([]byte) ([]byte, error)) {
	var pc net.PacketConn
	if err := inNetns(ns, func() (err error) { pc, err = net.ListenPacket("udp", addr); return }); err != nil {
		l.t.Fatalf("listen udp %s in %s: %v", addr, ns, err)
	}
	l.track(pc)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, err := answer(buf[:n]); err == nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
}

// labNames are the names the lab's DNS server answers.
var labNames = map[string]string{"internet.test.": labInternet, "device.test.": labDevice}

// dns serves A records for labNames on addr (UDP and TCP) in namespace ns.
func (l *lab) dns(ns, addr string) {
	l.serveUDP(ns, addr, dnsAnswer)
	l.serveTCP(ns, addr, func(c net.Conn) {
		var hdr [2]byte
		for {
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			q := make([]byte, int(hdr[0])<<8|int(hdr[1]))
			if _, err := io.ReadFull(c, q); err != nil {
				return
			}
			resp, err := dnsAnswer(q)
			if err != nil {
				return
			}
			_, _ = c.Write(append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...))
		}
	})
}

func dnsAnswer(q []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil, errors.New("one question expected")
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(qs[0])
	_ = b.StartAnswers()
	if a, ok := labNames[strings.ToLower(qs[0].Name.String())]; ok && qs[0].Type == dnsmessage.TypeA {
		ip4 := net.ParseIP(a).To4()
		_ = b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 60},
			dnsmessage.AResource{A: [4]byte{ip4[0], ip4[1], ip4[2], ip4[3]}})
	}
	return b.Finish()
}

// hostCmd returns a command that runs bin with args in the lab's host
// namespace, as the test's own user, with the test's environment. `ip
// netns exec` switches the namespace and execs bin in the same process (no
// fork), so what the caller sets on the command (a controlling terminal, a
// session) reaches bin as it would without it. For a test that is not
// about the jail but starts a sandbox in the default mode (--net=jail):
// the jail's start-up traffic (its NAT64 lookup) stays in the lab.
func (l *lab) hostCmd(bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", l.host, bin}, args...)...)
}

// jailCmd returns a command that runs claude-sandbox with args in the
// lab's host namespace, as uid, with a /dev/net/tun usable by that uid
// (mode 0666, as most distributions ship it) in a private mount namespace.
func (l *lab) jailCmd(uid int, bin string, args ...string) *exec.Cmd {
	return l.jailCmdTUN(uid, true, bin, args...)
}

// jailCmdTUN is jailCmd where withTUN=false leaves /dev/net/tun missing, as
// on a host without the tun module or a container without the device.
func (l *lab) jailCmdTUN(uid int, withTUN bool, bin string, args ...string) *exec.Cmd {
	mk := "mknod -m 666 /dev/net/tun c 10 200"
	if !withTUN {
		mk = "true"
	}
	inner := fmt.Sprintf("mount -t tmpfs none /dev/net && %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- \"$@\"", mk, uid, uid)
	argv := append([]string{"netns", "exec", l.host, "sh", "-c", inner, "sh", bin}, args...)
	cmd := exec.Command("ip", argv...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	cmd.Dir = "/"
	return cmd
}
