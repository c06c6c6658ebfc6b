package nsexec

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData lays out struct seccomp_data as a little-endian kernel
// presents it to the filter. The kernel loads 32-bit words in native order
// while x/net/bpf's VM loads them big-endian, so each word is stored
// big-endian here: the VM then sees the value the kernel would load. args[1]
// occupies two words, its low half first (little-endian layout).
func seccompData(arch, nr uint32, arg1 uint64) []byte {
	return seccompData2(arch, nr, 0, arg1)
}

func seccompData2(arch, nr uint32, arg0, arg1 uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	binary.BigEndian.PutUint32(b[16:], uint32(arg0))
	binary.BigEndian.PutUint32(b[16+4:], uint32(arg0>>32))
	binary.BigEndian.PutUint32(b[16+8:], uint32(arg1))
	binary.BigEndian.PutUint32(b[16+8+4:], uint32(arg1>>32))
	return b
}

func TestTTYFilter(t *testing.T) {
	const eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	const enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	const allow = unix.SECCOMP_RET_ALLOW
	cases := []struct {
		name   string
		goarch string
		arch   uint32
		nr     uint32
		arg1   uint64
		want   uint32
	}{
		{"amd64 TIOCSTI", "amd64", unix.AUDIT_ARCH_X86_64, 16, tiocsti, eperm},
		{"amd64 TIOCLINUX", "amd64", unix.AUDIT_ARCH_X86_64, 16, tioclinux, eperm},
		{"amd64 TIOCSTI high bits set", "amd64", unix.AUDIT_ARCH_X86_64, 16, 1<<32 | tiocsti, eperm},
		{"amd64 TIOCLINUX high bits set", "amd64", unix.AUDIT_ARCH_X86_64, 16, 0xffffffff00000000 | tioclinux, eperm},
		{"amd64 TIOCGWINSZ", "amd64", unix.AUDIT_ARCH_X86_64, 16, unix.TIOCGWINSZ, allow},
		{"amd64 x32 TIOCSTI", "amd64", unix.AUDIT_ARCH_X86_64, x32SysBit | 514, tiocsti, eperm},
		{"amd64 i386 TIOCSTI", "amd64", unix.AUDIT_ARCH_I386, 54, tiocsti, eperm},
		{"amd64 i386 other call", "amd64", unix.AUDIT_ARCH_I386, 4, tiocsti, allow},
		{"amd64 write with TIOCSTI-like arg", "amd64", unix.AUDIT_ARCH_X86_64, 1, tiocsti, allow},
		{"amd64 unknown arch", "amd64", unix.AUDIT_ARCH_AARCH64, 29, 0, enosys},
		{"arm64 TIOCSTI", "arm64", unix.AUDIT_ARCH_AARCH64, 29, tiocsti, eperm},
		{"arm64 arm TIOCLINUX", "arm64", unix.AUDIT_ARCH_ARM, 54, tioclinux, eperm},
		{"arm64 openat", "arm64", unix.AUDIT_ARCH_AARCH64, 56, tiocsti, allow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, err := sandboxFilter(c.goarch, false)
			if err != nil {
				t.Fatal(err)
			}
			insns, ok := bpf.Disassemble(raw)
			if !ok {
				t.Fatal("filter does not disassemble")
			}
			vm, err := bpf.NewVM(insns)
			if err != nil {
				t.Fatal(err)
			}
			got, err := vm.Run(seccompData(c.arch, c.nr, c.arg1))
			if err != nil {
				t.Fatal(err)
			}
			if uint32(got) != c.want {
				t.Errorf("verdict %#x, want %#x", got, c.want)
			}
		})
	}
}

func TestTTYFilterUnknownArch(t *testing.T) {
	if _, err := sandboxFilter("mips", false); err == nil {
		t.Fatal("want an error for an unsupported architecture")
	}
}

// verdict runs the filter for goarch in x/net/bpf's VM on one call.
func verdict(t *testing.T, goarch string, hostRoot bool, data []byte) uint32 {
	t.Helper()
	raw, err := sandboxFilter(goarch, hostRoot)
	if err != nil {
		t.Fatal(err)
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	got, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(got)
}

func TestDenylist(t *testing.T) {
	const allow = unix.SECCOMP_RET_ALLOW
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	for _, goarch := range []string{"amd64", "arm64"} {
		list, err := abis(goarch)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range list {
			for _, d := range denied {
				nr, ok := x.nrs[d.name]
				if !ok {
					continue
				}
				for _, hostRoot := range []bool{false, true} {
					if got := verdict(t, goarch, hostRoot, seccompData(x.arch, nr, 0)); got != errno(d.errno) {
						t.Errorf("%s arch %#x %s (nr %d): verdict %#x, want %#x", goarch, x.arch, d.name, nr, got, errno(d.errno))
					}
				}
				if x.x32 {
					x32nr := x32SysBit | nr
					if n, ok := x.x32Only[d.name]; ok {
						x32nr = x32SysBit | n
					}
					if got := verdict(t, goarch, false, seccompData(x.arch, x32nr, 0)); got != errno(d.errno) {
						t.Errorf("x32 %s (nr %#x): verdict %#x, want %#x", d.name, x32nr, got, errno(d.errno))
					}
				}
			}
			// Calls every program makes stay allowed.
			for _, name := range []string{"ioctl", "clone", "unshare", "clone3"} {
				if got := verdict(t, goarch, false, seccompData(x.arch, x.nrs[name], 0)); got != allow {
					t.Errorf("%s arch %#x %s: verdict %#x, want allow", goarch, x.arch, name, got)
				}
			}
		}
	}
	// Every denied name is known to at least one ABI of each machine, and
	// the calls the threat model names are known to all.
	for _, d := range denied {
		found := false
		for _, x := range []abi{abiX86_64(), abiI386(), abiAArch64(), abiARM()} {
			_, ok := x.nrs[d.name]
			found = found || ok
		}
		if !found {
			t.Errorf("%s is denied but no ABI has a number for it", d.name)
		}
	}
	for _, name := range []string{"keyctl", "io_uring_setup", "bpf", "perf_event_open", "userfaultfd", "kexec_load", "init_module", "finit_module", "open_by_handle_at"} {
		for _, x := range []abi{abiX86_64(), abiI386(), abiAArch64(), abiARM()} {
			if _, ok := x.nrs[name]; !ok {
				t.Errorf("%s: no number on arch %#x", name, x.arch)
			}
		}
	}
}

func TestHostRootCgroupNS(t *testing.T) {
	const allow = unix.SECCOMP_RET_ALLOW
	const eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	const enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	cases := []struct {
		name     string
		goarch   string
		arch     uint32
		nr       uint32
		arg0     uint64
		hostRoot bool
		want     uint32
	}{
		{"unshare newcgroup, root", "amd64", unix.AUDIT_ARCH_X86_64, 272, unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP, true, eperm},
		{"unshare newcgroup, not root", "amd64", unix.AUDIT_ARCH_X86_64, 272, unix.CLONE_NEWUSER | unix.CLONE_NEWCGROUP, false, allow},
		{"unshare newuser, root", "amd64", unix.AUDIT_ARCH_X86_64, 272, unix.CLONE_NEWUSER | unix.CLONE_NEWNS, true, allow},
		{"clone newcgroup, root", "amd64", unix.AUDIT_ARCH_X86_64, 56, unix.CLONE_NEWCGROUP | uint64(unix.SIGCHLD), true, eperm},
		{"clone newcgroup high bits, root", "amd64", unix.AUDIT_ARCH_X86_64, 56, 1<<40 | unix.CLONE_NEWCGROUP, true, eperm},
		{"clone thread, root", "amd64", unix.AUDIT_ARCH_X86_64, 56, unix.CLONE_VM | unix.CLONE_THREAD, true, allow},
		{"clone3, root", "amd64", unix.AUDIT_ARCH_X86_64, 435, 0, true, enosys},
		{"clone3, not root", "amd64", unix.AUDIT_ARCH_X86_64, 435, 0, false, allow},
		{"x32 unshare newcgroup, root", "amd64", unix.AUDIT_ARCH_X86_64, x32SysBit | 272, unix.CLONE_NEWCGROUP, true, eperm},
		{"i386 clone newcgroup, root", "amd64", unix.AUDIT_ARCH_I386, 120, unix.CLONE_NEWCGROUP, true, eperm},
		{"i386 clone3, root", "amd64", unix.AUDIT_ARCH_I386, 435, 0, true, enosys},
		{"arm64 unshare newcgroup, root", "arm64", unix.AUDIT_ARCH_AARCH64, 97, unix.CLONE_NEWCGROUP, true, eperm},
		{"arm unshare newcgroup, root", "arm64", unix.AUDIT_ARCH_ARM, 337, unix.CLONE_NEWCGROUP, true, eperm},
		{"arm64 clone3, root", "arm64", unix.AUDIT_ARCH_AARCH64, 435, 0, true, enosys},
		{"root: ioctl TIOCSTI still refused", "amd64", unix.AUDIT_ARCH_X86_64, 16, 0, true, eperm},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			arg1 := uint64(0)
			if c.nr == 16 {
				arg1 = tiocsti
			}
			if got := verdict(t, c.goarch, c.hostRoot, seccompData2(c.arch, c.nr, c.arg0, arg1)); got != c.want {
				t.Errorf("verdict %#x, want %#x", got, c.want)
			}
		})
	}
}

func TestTSYNCFailsClosed(t *testing.T) {
	if err := tsyncResult(0, 0); err != nil {
		t.Fatalf("success reported as %v", err)
	}
	if err := tsyncResult(1234, 0); err == nil {
		t.Fatal("a thread that could not be synchronised was taken as success")
	}
	if err := tsyncResult(0, unix.EINVAL); err == nil {
		t.Fatal("an errno was taken as success")
	}
}

// seccompArgs lays out struct seccomp_data with up to four arguments.
func seccompArgs(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[16+8*i+4:], uint32(a>>32))
	}
	return b
}

// A root caller's sandbox cannot set a set-ID bit (its files in a
// writable bind are owned by host root); openat2 answers ENOSYS; other
// modes, and every mode for a non-root caller, pass.
func TestRootCallerSetIDModes(t *testing.T) {
	const allow = unix.SECCOMP_RET_ALLOW
	eperm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys := unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	x86, i386 := uint32(unix.AUDIT_ARCH_X86_64), uint32(unix.AUDIT_ARCH_I386)
	for _, c := range []struct {
		name   string
		goarch string
		data   []byte
		root   uint32
	}{
		{"chmod 4755", "amd64", seccompArgs(x86, 90, 0, 0o4755), eperm},
		{"chmod 2755", "amd64", seccompArgs(x86, 90, 0, 0o2755), eperm},
		{"chmod 0755", "amd64", seccompArgs(x86, 90, 0, 0o755), allow},
		{"fchmod 4755", "amd64", seccompArgs(x86, 91, 3, 0o4755), eperm},
		{"fchmodat 4755", "amd64", seccompArgs(x86, 268, 3, 0, 0o4755), eperm},
		{"fchmodat2 6755", "amd64", seccompArgs(x86, 452, 3, 0, 0o6755, 0), eperm},
		{"fchmodat 0644", "amd64", seccompArgs(x86, 268, 3, 0, 0o644), allow},
		{"open O_CREAT 4755", "amd64", seccompArgs(x86, 2, 0, unix.O_CREAT, 0o4755), eperm},
		{"openat O_CREAT 4755", "amd64", seccompArgs(x86, 257, 3, 0, unix.O_CREAT, 0o4755), eperm},
		{"openat O_CREAT 0644", "amd64", seccompArgs(x86, 257, 3, 0, unix.O_CREAT, 0o644), allow},
		{"creat 4755", "amd64", seccompArgs(x86, 85, 0, 0o4755), eperm},
		{"mknodat S_IFREG|4755", "amd64", seccompArgs(x86, 259, 3, 0, unix.S_IFREG|0o4755, 0), eperm},
		{"openat2", "amd64", seccompArgs(x86, 437, 3, 0, 0, 24), enosys},
		{"x32 chmod 4755", "amd64", seccompArgs(x86, x32SysBit|90, 0, 0o4755), eperm},
		{"i386 chmod 4755", "amd64", seccompArgs(i386, 15, 0, 0o4755), eperm},
		{"i386 fchmodat 4755", "amd64", seccompArgs(i386, 306, 3, 0, 0o4755), eperm},
		{"i386 openat O_CREAT 4755", "amd64", seccompArgs(i386, 295, 3, 0, unix.O_CREAT, 0o4755), eperm},
		{"arm64 fchmodat 4755", "arm64", seccompArgs(unix.AUDIT_ARCH_AARCH64, 53, 3, 0, 0o4755), eperm},
		{"arm64 openat 0644", "arm64", seccompArgs(unix.AUDIT_ARCH_AARCH64, 56, 3, 0, unix.O_CREAT, 0o644), allow},
		{"arm chmod 4755", "arm64", seccompArgs(unix.AUDIT_ARCH_ARM, 15, 0, 0o4755), eperm},
	} {
		if got := verdict(t, c.goarch, true, c.data); got != c.root {
			t.Errorf("%s, root caller: verdict %#x, want %#x", c.name, got, c.root)
		}
		if got := verdict(t, c.goarch, false, c.data); got != allow {
			t.Errorf("%s, non-root caller: verdict %#x, want allow", c.name, got)
		}
	}
}
