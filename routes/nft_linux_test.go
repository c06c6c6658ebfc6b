package routes

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// inFreshNetns runs f on a locked thread moved into a new network
// namespace with a TUN link "tun0" (up, 192.0.2.2, default route via it)
// and a sink "blk0" for 10.0.0.0/8. The thread is discarded afterwards.
func inFreshNetns(t *testing.T, f func()) {
	t.Helper()
	withLinks(t, func() {
		pol := netpolicy.MustNew(netpolicy.Config{})
		p, err := BuildPlan(pol, Config{TUN: "tun0", Sink: "blk0", Addr4: netip.MustParsePrefix("192.0.2.2/32"), Addr6: netip.MustParsePrefix("fdc5::2/128")})
		if err != nil {
			t.Error(err)
			return
		}
		nl, err := OpenNetlink()
		if err != nil {
			t.Error(err)
			return
		}
		defer nl.Close()
		if _, err := Apply(p, nl); err != nil {
			t.Error(err)
			return
		}
		f()
	})
}

// withLinks runs f on a locked thread moved into a new network namespace
// holding two TUN links, "tun0" and "blk0", not configured. The thread is
// discarded afterwards.
func withLinks(t *testing.T, f func()) {
	t.Helper()
	testutil.NeedsRoot(t)
	testutil.NeedsTUN(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		var keep []*os.File
		defer func() {
			for _, k := range keep {
				k.Close()
			}
		}()
		for _, name := range []string{"tun0", "blk0"} {
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Errorf("open tun: %v", err)
				return
			}
			var req [unix.IFNAMSIZ + 64]byte
			copy(req[:], name)
			*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
				t.Errorf("TUNSETIFF: %v", e)
				return
			}
			keep = append(keep, os.NewFile(uintptr(fd), name))
		}
		f()
	}()
	<-done
}

// sendBound sends one UDP datagram to dst from a socket bound to dev
// (SO_BINDTODEVICE) and returns the error of connect or send.
func sendBound(dev string, dst netip.AddrPort) error {
	fam := unix.AF_INET
	if dst.Addr().Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if dev != "" {
		if err := unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, dev); err != nil {
			return err
		}
	}
	var sa unix.Sockaddr
	if dst.Addr().Is4() {
		sa = &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
	} else {
		sa = &unix.SockaddrInet6{Addr: dst.Addr().As16(), Port: int(dst.Port())}
	}
	if err := unix.Connect(fd, sa); err != nil {
		return err
	}
	_, err = unix.Write(fd, []byte("x"))
	return err
}

func TestInstallFilterRefusesBoundSockets(t *testing.T) {
	inFreshNetns(t, func() {
		blocked := netip.MustParseAddrPort("10.1.2.3:9")
		// Control: without the filter, a socket bound to the TUN reaches
		// the blocked range (the sink route does not apply to it).
		if err := sendBound("tun0", blocked); err != nil {
			t.Errorf("control: bound send to %v without the filter: %v, want it sent", blocked, err)
		}
		pol := netpolicy.MustNew(netpolicy.Config{DNSResolvers: []netip.Addr{netip.MustParseAddr("10.0.0.53")}, Allow: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
		f := BuildFilter(pol, "tun0", "blk0", true)
		if err := InstallFilter(f); err != nil {
			t.Fatalf("InstallFilter: %v", err)
		}
		// Twice: the second replaces the first.
		if err := InstallFilter(f); err != nil {
			t.Fatalf("InstallFilter again: %v", err)
		}
		for _, dst := range []string{"10.1.2.3:9", "172.16.0.1:9", "169.254.169.254:80", "224.0.0.1:9", "[64:ff9b::a01:203]:9", "[fd00::1]:9", "[fe80::1]:9", "10.0.0.53:54"} {
			if err := sendBound("tun0", netip.MustParseAddrPort(dst)); !errors.Is(err, syscall.EPERM) {
				t.Errorf("bound send to %s: %v, want EPERM", dst, err)
			}
		}
		for _, dst := range []string{"203.0.113.10:9", "10.9.1.1:9", "10.0.0.53:53", "[2001:db8::1]:9"} {
			if err := sendBound("tun0", netip.MustParseAddrPort(dst)); err != nil && !strings.Contains(err.Error(), "unreachable") {
				t.Errorf("bound send to %s: %v, want it sent", dst, err)
			}
		}
		// Unbound sockets still take the sink route.
		if err := sendBound("", blocked); err != nil {
			t.Errorf("unbound send to the sink: %v", err)
		}
		// And a narrowed filter reopens what it no longer lists.
		if err := InstallFilter(&Filter{Dev: "tun0"}); err != nil {
			t.Fatal(err)
		}
		if err := sendBound("tun0", blocked); err != nil {
			t.Errorf("after an empty filter: %v", err)
		}
	})
}

// BenchmarkInstallFilter measures writing the default policy's table in a
// new namespace, as the holder does at each launch; BenchmarkReplaceFilter
// rewriting it, as a live update does (a replaced rule waits for an RCU
// grace period).
func BenchmarkInstallFilter(b *testing.B) { benchFilter(b, false) }

func BenchmarkReplaceFilter(b *testing.B) { benchFilter(b, true) }

func benchFilter(b *testing.B, replace bool) {
	testutil.NeedsRoot(b)
	testutil.NeedsTUN(b)
	f := BuildFilter(netpolicy.MustNew(netpolicy.Config{}), "tun0", "blk0", true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its namespaces
		// fresh moves the thread to a new namespace with tun0 and blk0;
		// closing the returned descriptors deletes them.
		fresh := func() ([]int, error) {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return nil, err
			}
			var fds []int
			for _, name := range []string{"tun0", "blk0"} {
				fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
				if err != nil {
					return fds, err
				}
				fds = append(fds, fd)
				var req [unix.IFNAMSIZ + 64]byte
				copy(req[:], name)
				*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
				if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
					return fds, e
				}
			}
			return fds, nil
		}
		closeAll := func(fds []int) {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
		fds, err := fresh()
		if err != nil {
			closeAll(fds)
			b.Error(err)
			return
		}
		if replace {
			if err := InstallFilter(f); err != nil {
				b.Error(err)
				return
			}
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if !replace && i > 0 {
				b.StopTimer()
				closeAll(fds)
				if fds, err = fresh(); err != nil {
					closeAll(fds)
					b.Error(err)
					return
				}
				b.StartTimer()
			}
			if err := InstallFilter(f); err != nil {
				b.Error(err)
				return
			}
		}
		b.StopTimer()
		closeAll(fds)
	}()
	<-done
	b.ReportMetric(float64(len(f.Block)), "ranges")
}

// Update moves a namespace from one plan to the next: a new block is
// routed to the sink and filtered, one that went is removed from both, and
// a punch that became a block is replaced in place.
func TestUpdateMovesRoutesAndFilter(t *testing.T) {
	inFreshNetns(t, func() {
		cfg := Config{TUN: "tun0", Sink: "blk0", Addr4: netip.MustParsePrefix("192.0.2.2/32"), Addr6: netip.MustParsePrefix("fdc5::2/128")}
		plan := func(c netpolicy.Config) Plan {
			p, err := BuildPlan(netpolicy.MustNew(c), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		// inFreshNetns applied the default plan.
		cur := plan(netpolicy.Config{})
		if err := InstallFilter(cur.Filter); err != nil {
			t.Fatal(err)
		}
		nl, err := OpenNetlink()
		if err != nil {
			t.Fatal(err)
		}
		defer nl.Close()
		routed := netip.MustParseAddrPort("198.18.50.10:9")
		if err := sendBound("tun0", routed); err != nil {
			t.Fatalf("control: %v before the update: %v", routed, err)
		}
		next := plan(netpolicy.Config{HostRoutes: []netip.Prefix{netip.MustParsePrefix("198.18.50.0/24")}})
		if _, err := Update(cur, next, nl); err != nil {
			t.Fatalf("Update: %v", err)
		}
		if err := sendBound("tun0", routed); !errors.Is(err, syscall.EPERM) {
			t.Errorf("bound send to %v after the update: %v, want EPERM", routed, err)
		}
		if dev := routeDev(t, routed.Addr()); dev != "blk0" {
			t.Errorf("%v routed to %q, want blk0", routed.Addr(), dev)
		}
		// And back: the route and the filter rule go.
		if _, err := Update(next, cur, nl); err != nil {
			t.Fatalf("Update back: %v", err)
		}
		if err := sendBound("tun0", routed); err != nil {
			t.Errorf("bound send after the block went: %v", err)
		}
		if dev := routeDev(t, routed.Addr()); dev != "tun0" {
			t.Errorf("%v routed to %q after the block went, want tun0", routed.Addr(), dev)
		}
	})
}

// routeDev is the device the kernel routes a to (ip route get, run from
// the calling thread's namespace).
func routeDev(t *testing.T, a netip.Addr) string {
	t.Helper()
	var rs []struct{ Dev string }
	ipJSON(t, &rs, "route", "get", a.String())
	if len(rs) == 0 {
		t.Fatalf("route get %v: no route", a)
	}
	return rs[0].Dev
}

// A Conn over sockets opened inside the namespace moves it from a thread
// in another namespace (as the launcher does, once the holder is gone):
// the routes and the filter change there, twice over the same sockets.
func TestConnUpdatesFromOutside(t *testing.T) {
	inFreshNetns(t, func() {
		cfg := Config{TUN: "tun0", Sink: "blk0", Addr4: netip.MustParsePrefix("192.0.2.2/32"), Addr6: netip.MustParsePrefix("fdc5::2/128")}
		plan := func(c netpolicy.Config) Plan {
			p, err := BuildPlan(netpolicy.MustNew(c), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		cur := plan(netpolicy.Config{})
		if err := InstallFilter(cur.Filter); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSockets("tun0", "blk0")
		if err != nil {
			t.Fatal(err)
		}
		conn := NewConn(s)
		defer conn.Close()
		next := plan(netpolicy.Config{HostRoutes: []netip.Prefix{netip.MustParsePrefix("198.18.50.0/24")}})
		// From a goroutine that is not locked to this thread: it runs
		// on another thread, in the test's own namespace.
		outside := func(from, to Plan) error {
			done := make(chan error)
			go func() {
				_, err := Update(from, to, conn)
				done <- err
			}()
			return <-done
		}
		routed := netip.MustParseAddrPort("198.18.50.10:9")
		for round := 0; round < 2; round++ {
			if err := outside(cur, next); err != nil {
				t.Fatalf("round %d: Update: %v", round, err)
			}
			if err := sendBound("tun0", routed); !errors.Is(err, syscall.EPERM) {
				t.Errorf("round %d: bound send to %v after the update: %v, want EPERM", round, routed, err)
			}
			if dev := routeDev(t, routed.Addr()); dev != "blk0" {
				t.Errorf("round %d: %v routed to %q, want blk0", round, routed.Addr(), dev)
			}
			if err := outside(next, cur); err != nil {
				t.Fatalf("round %d: Update back: %v", round, err)
			}
			if err := sendBound("tun0", routed); err != nil {
				t.Errorf("round %d: bound send after the block went: %v", round, err)
			}
			if dev := routeDev(t, routed.Addr()); dev != "tun0" {
				t.Errorf("round %d: %v routed to %q after the block went, want tun0", round, routed.Addr(), dev)
			}
		}
	})
}
