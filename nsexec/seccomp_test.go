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
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
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
			raw, err := ttyFilter(c.goarch)
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
	if _, err := ttyFilter("mips"); err == nil {
		t.Fatal("want an error for an unsupported architecture")
	}
}
