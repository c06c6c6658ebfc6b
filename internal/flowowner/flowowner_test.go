package flowowner

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// msg builds one netlink message of type typ and sequence seq.
func msg(typ uint16, seq uint32, body []byte) []byte {
	b := make([]byte, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint32(b[8:], seq)
	copy(b[nlmsgHdrLen:], body)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// diagMsg builds a struct inet_diag_msg.
func diagMsg(local, remote netip.AddrPort, inode uint32) []byte {
	m := make([]byte, msgLen)
	m[0] = unix.AF_INET
	if local.Addr().Is6() {
		m[0] = unix.AF_INET6
	}
	id := m[4:]
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	copy(id[4:20], local.Addr().AsSlice())
	copy(id[20:36], remote.Addr().AsSlice())
	binary.NativeEndian.PutUint32(m[4+sockIDLen+16:], inode)
	return m
}

func TestEncodeRequest(t *testing.T) {
	b := EncodeRequest(unix.AF_INET6, unix.IPPROTO_UDP, allStates, 7)
	if len(b) != nlmsgHdrLen+56 || int(binary.NativeEndian.Uint32(b)) != len(b) {
		t.Fatalf("length %d, want %d", len(b), nlmsgHdrLen+56)
	}
	if binary.NativeEndian.Uint16(b[4:]) != unix.SOCK_DIAG_BY_FAMILY || binary.NativeEndian.Uint16(b[6:])&unix.NLM_F_DUMP == 0 || binary.NativeEndian.Uint32(b[8:]) != 7 {
		t.Fatalf("header %x", b[:16])
	}
	if b[16] != unix.AF_INET6 || b[17] != unix.IPPROTO_UDP || binary.NativeEndian.Uint32(b[20:]) != allStates {
		t.Fatalf("request %x", b[16:])
	}
}

func TestDecodeReply(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.2:40000")
	d := netip.MustParseAddrPort("10.1.2.3:5064")
	v6l := netip.MustParseAddrPort("[fd00::2]:40001")
	v6r := netip.MustParseAddrPort("[2001:db8::1]:443")
	var b []byte
	b = append(b, msg(sockDiagType, 5, diagMsg(a, d, 111))...)
	b = append(b, msg(sockDiagType, 4, diagMsg(a, d, 999))...) // another sequence
	b = append(b, msg(sockDiagType, 5, diagMsg(v6l, v6r, 222))...)
	socks, done, err := DecodeReply(b, 5)
	if err != nil || done || len(socks) != 2 {
		t.Fatalf("got %v %v %v", socks, done, err)
	}
	if socks[0].Local != a || socks[0].Remote != d || socks[0].Inode != 111 || socks[1].Local != v6l || socks[1].Remote != v6r || socks[1].Inode != 222 {
		t.Fatalf("decoded %+v", socks)
	}
	_, done, err = DecodeReply(msg(unix.NLMSG_DONE, 5, make([]byte, 4)), 5)
	if err != nil || !done {
		t.Fatalf("done: %v %v", done, err)
	}
	e := make([]byte, 4)
	errno := -int32(unix.EPERM)
	binary.NativeEndian.PutUint32(e, uint32(errno))
	if _, _, err := DecodeReply(msg(unix.NLMSG_ERROR, 5, e), 5); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Fatalf("error message: %v", err)
	}
	full := msg(sockDiagType, 5, diagMsg(a, d, 1))
	for _, cut := range []int{3, nlmsgHdrLen, nlmsgHdrLen + 10} {
		if _, _, err := DecodeReply(full[:cut], 5); err != ErrTruncated {
			t.Errorf("cut at %d: %v", cut, err)
		}
	}
	short := msg(sockDiagType, 5, make([]byte, 10))
	if _, _, err := DecodeReply(short, 5); err != ErrTruncated {
		t.Errorf("short message: %v", err)
	}
}

func FuzzDecodeReply(f *testing.F) {
	a := netip.MustParseAddrPort("10.0.0.2:40000")
	d := netip.MustParseAddrPort("10.1.2.3:5064")
	f.Add(msg(sockDiagType, 1, diagMsg(a, d, 1)))
	f.Add(append(msg(sockDiagType, 1, diagMsg(a, d, 1)), msg(unix.NLMSG_DONE, 1, nil)...))
	f.Add(msg(unix.NLMSG_ERROR, 1, []byte{0xff, 0xff, 0xff, 0xff}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, _, _ := DecodeReply(b, 1)
		if len(socks)*(nlmsgHdrLen+msgLen) > len(b) {
			t.Fatalf("%d sockets from %d bytes", len(socks), len(b))
		}
		for _, s := range socks {
			if s.Family != unix.AF_INET && s.Family != unix.AF_INET6 {
				t.Fatalf("family %d", s.Family)
			}
		}
	})
}

func TestMatch(t *testing.T) {
	src := netip.MustParseAddrPort("10.0.0.2:40000")
	dst := netip.MustParseAddrPort("10.1.2.3:5064")
	other := netip.MustParseAddrPort("10.0.0.2:40001")
	socks := []Sock{
		{Local: other, Remote: dst, Inode: 2},
		{Local: src, Remote: dst, Inode: 1},
		{Local: netip.MustParseAddrPort("0.0.0.0:41000"), Remote: netip.AddrPortFrom(netip.IPv4Unspecified(), 0), Inode: 3},
	}
	if got := Match(socks, false, src, dst); got != 1 {
		t.Errorf("by 4-tuple: %d", got)
	}
	if got := Match(socks, false, netip.AddrPort{}, dst); got != 0 {
		t.Errorf("by destination, two sockets: %d, want none", got)
	}
	if got := Match(socks[1:], false, netip.AddrPort{}, dst); got != 1 {
		t.Errorf("by destination, one socket: %d", got)
	}
	usrc := netip.MustParseAddrPort("10.0.0.2:41000")
	if got := Match(socks, true, usrc, dst); got != 3 {
		t.Errorf("unconnected UDP: %d", got)
	}
	if got := Match(socks, false, usrc, dst); got != 0 {
		t.Errorf("unconnected TCP matched: %d", got)
	}
	mapped := netip.AddrPortFrom(netip.MustParseAddr("::ffff:10.1.2.3"), 5064)
	if got := Match(socks, false, src, mapped); got != 1 {
		t.Errorf("v4-mapped destination: %d", got)
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"nc":              "nc",
		"a\x1b[31mred":    `a\x1b[31mred`,
		"tab\there":       `tab\x09here`,
		"back\\slash":     `back\\slash`,
		"bad\xffutf8":     `bad\xffutf8`,
		"déjà vu":         "déjà vu",
		"line\u2028break": `line\u2028break`,
		"nul\x00":         `nul\x00`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	argv := ParseCmdline([]byte("nc\x00-v\x00\x1b]52;c;AAAA\x07\x00"))
	if len(argv) != 3 || argv[2] != `\x1b]52;c;AAAA\x07` {
		t.Errorf("argv %q", argv)
	}
	long := ParseCmdline([]byte(strings.Repeat("x", 2000) + "\x00" + strings.Repeat("y\x00", 200)))
	if len(long) != maxArgs+1 || len(long[0]) != maxArg+3 || long[maxArgs] != "..." {
		t.Errorf("long argv: %d args, first %d bytes", len(long), len(long[0]))
	}
}

// TestDescribeEscapes tries the threat model's claim that nothing of a
// process's argv or working directory reaches a terminal or log raw
// through Describe itself, not only ParseCmdline: a child whose argv[0]
// is an OSC 52 sequence (a terminal's clipboard write) and whose working
// directory's name clears the screen and is not UTF-8.
func TestDescribeEscapes(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "d\x1b[2Jir\xff")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: cat, Args: []string{"x\x1b]52;c;QUJD\x07", "-"}, Dir: dir}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	// Start returns when the exec began, before the new argv is in place
	// (cmdline read empty under -race): a line echoed back means cat runs.
	if _, err := in.Write([]byte("up\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Read(make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	proc, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(proc)
	o := Describe(proc, cmd.Process.Pid)
	if len(o.Argv) != 2 || o.Argv[0] != `x\x1b]52;c;QUJD\x07` || o.Argv[1] != "-" {
		t.Errorf("argv %q", o.Argv)
	}
	if want := base + `/d\x1b[2Jir\xff`; o.Cwd != want {
		t.Errorf("cwd %q, want %q", o.Cwd, want)
	}
}

// TestFindSelf finds this test's own UDP socket (connected to the
// loopback's discard port: a UDP connect sends nothing) through the
// kernel's socket diagnostics and /proc.
func TestFindSelf(t *testing.T) {
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	fd, err := OpenDiag()
	if err != nil {
		t.Fatal(err)
	}
	d := NewDiag(fd)
	defer d.Close()
	ino, err := d.Find("udp", local, netip.MustParseAddrPort("127.0.0.1:9"))
	if err != nil || ino == 0 {
		t.Fatalf("Find: %d, %v", ino, err)
	}
	proc, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(proc)
	o, ok := FindSocket(proc, ino, 0)
	if !ok || o.PID != os.Getpid() {
		t.Fatalf("FindSocket: %+v %v, want pid %d", o, ok, os.Getpid())
	}
	wd, _ := os.Getwd()
	if len(o.Argv) == 0 || filepath.Base(o.Argv[0]) != filepath.Base(os.Args[0]) || o.Cwd != wd {
		t.Fatalf("owner %+v, want argv[0] %q, cwd %q", o, os.Args[0], wd)
	}
	if _, ok := FindSocket(proc, 1, 0); ok {
		t.Error("found a process holding socket inode 1")
	}
}

// BenchmarkLookup is one owner lookup, as the jail makes it for each
// flow while the audit log is on: a socket diagnostics dump of this
// namespace's UDP sockets, matched, then a scan of /proc for the inode.
// This test's /proc is the whole host's (a sandbox's holds only its own
// processes): an upper bound.
func BenchmarkLookup(b *testing.B) {
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	local := c.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := netip.MustParseAddrPort("127.0.0.1:9")
	fd, err := OpenDiag()
	if err != nil {
		b.Fatal(err)
	}
	d := NewDiag(fd)
	defer d.Close()
	proc, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(proc)
	pids, _ := listPIDs(proc)
	b.Run("sock_diag", func(b *testing.B) {
		for range b.N {
			if ino, err := d.Find("udp", local, dst); err != nil || ino == 0 {
				b.Fatal(ino, err)
			}
		}
	})
	ino, _ := d.Find("udp", local, dst)
	b.Run("proc", func(b *testing.B) {
		for range b.N {
			if _, ok := FindSocket(proc, ino, 0); !ok {
				b.Fatal("not found")
			}
		}
		b.ReportMetric(float64(len(pids)), "processes")
	})
	b.Run("proc-hint", func(b *testing.B) {
		for range b.N {
			if _, ok := FindSocket(proc, ino, os.Getpid()); !ok {
				b.Fatal("not found")
			}
		}
	})
}

func TestEncodeExact(t *testing.T) {
	src := netip.MustParseAddrPort("10.0.0.2:40000")
	dst := netip.MustParseAddrPort("10.1.2.3:5064")
	b := EncodeExact(unix.AF_INET, unix.IPPROTO_TCP, src, dst, 3)
	if binary.NativeEndian.Uint16(b[6:])&unix.NLM_F_DUMP != 0 {
		t.Error("an exact request asks for a dump")
	}
	id := b[nlmsgHdrLen+8:]
	if binary.BigEndian.Uint16(id) != 40000 || binary.BigEndian.Uint16(id[2:]) != 5064 || netip.AddrFrom4([4]byte(id[4:8])) != src.Addr() || netip.AddrFrom4([4]byte(id[20:24])) != dst.Addr() {
		t.Errorf("socket id %x", id[:36])
	}
	b = EncodeExact(unix.AF_INET6, unix.IPPROTO_TCP, src, dst, 3)
	id = b[nlmsgHdrLen+8:]
	if got := netip.AddrFrom16([16]byte(id[4:20])); got != netip.MustParseAddr("::ffff:10.0.0.2") {
		t.Errorf("v4-mapped source %v", got)
	}
}
