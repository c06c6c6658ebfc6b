package nsexec

import (
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The filter refuses two terminal ioctls that let a process type into, or
// read from, a terminal it does not own: TIOCSTI pushes bytes into a tty's
// input queue, TIOCLINUX can paste a console selection. Only the low 32 bits
// of the request are compared, as the kernel itself truncates the request
// to an unsigned int: a caller setting high bits must not slip past.
const (
	tiocsti   = 0x5412
	tioclinux = 0x541c
)

// Offsets into struct seccomp_data.
const (
	offNr       = 0
	offArch     = 4
	offArg1Low  = 16 + 8*1 // args[1], low half on little-endian machines
	x32SysBit   = 0x40000000
	retAllow    = unix.SECCOMP_RET_ALLOW
	retErrno    = unix.SECCOMP_RET_ERRNO
	errnoReject = uint32(unix.EPERM)
)

// ioctlABI is one system-call ABI the filter knows: its audit arch and the
// number of ioctl in it.
type ioctlABI struct {
	arch  uint32
	ioctl []uint32
}

// abis returns the ABIs a process on this machine can use. A 64-bit x86
// process can also make i386 (int 0x80) and, where enabled, x32 calls; an
// arm64 one can run 32-bit arm code.
func abis(goarch string) ([]ioctlABI, error) {
	switch goarch {
	case "amd64":
		return []ioctlABI{
			{arch: unix.AUDIT_ARCH_X86_64, ioctl: []uint32{16, x32SysBit | 514}},
			{arch: unix.AUDIT_ARCH_I386, ioctl: []uint32{54}},
		}, nil
	case "arm64":
		return []ioctlABI{
			{arch: unix.AUDIT_ARCH_AARCH64, ioctl: []uint32{29}},
			{arch: unix.AUDIT_ARCH_ARM, ioctl: []uint32{54}},
		}, nil
	}
	return nil, fmt.Errorf("seccomp filter: architecture %s is not supported", goarch)
}

// ttyFilter assembles the classic BPF program. Calls from an ABI the filter
// does not know are refused with ENOSYS rather than let through unchecked.
func ttyFilter(goarch string) ([]bpf.RawInstruction, error) {
	list, err := abis(goarch)
	if err != nil {
		return nil, err
	}
	// Layout: [ld arch] [jeq arch_i -> block i]... [ret ENOSYS] [block 0]...
	// Each block: [ld nr] [jeq ioctl_j -> check]... [ret allow]
	//             check: [ld arg1 low] [jeq TIOCSTI -> deny]
	//             [jeq TIOCLINUX -> deny] [ret allow] deny: [ret EPERM]
	var blocks [][]bpf.Instruction
	for _, a := range list {
		n := len(a.ioctl)
		bl := []bpf.Instruction{bpf.LoadAbsolute{Off: offNr, Size: 4}}
		for j, nr := range a.ioctl {
			bl = append(bl, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipTrue: uint8(n - j)})
		}
		bl = append(bl,
			bpf.RetConstant{Val: retAllow},
			bpf.LoadAbsolute{Off: offArg1Low, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: tiocsti, SkipTrue: 2},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: tioclinux, SkipTrue: 1},
			bpf.RetConstant{Val: retAllow},
			bpf.RetConstant{Val: retErrno | errnoReject},
		)
		blocks = append(blocks, bl)
	}
	prog := []bpf.Instruction{bpf.LoadAbsolute{Off: offArch, Size: 4}}
	for i, a := range list {
		skip := len(list) - 1 - i + 1 // the other compares, then the ENOSYS return
		for _, bl := range blocks[:i] {
			skip += len(bl)
		}
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.arch, SkipTrue: uint8(skip)})
	}
	prog = append(prog, bpf.RetConstant{Val: retErrno | uint32(unix.ENOSYS)})
	for _, bl := range blocks {
		prog = append(prog, bl...)
	}
	return bpf.Assemble(prog)
}

// installTTYFilter sets no_new_privs (required to install a filter without
// CAP_SYS_ADMIN) and loads the filter on every thread of the process.
func installTTYFilter() error {
	raw, err := ttyFilter(runtime.GOARCH)
	if err != nil {
		return err
	}
	return loadFilter(raw)
}
