package nsexec

import (
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The sandbox's seccomp filter is a denylist: everything is allowed except
//
//   - two terminal ioctls that let a process type into, or read from, a
//     terminal it does not own: TIOCSTI pushes bytes into a tty's input
//     queue, TIOCLINUX can paste a console selection. Only the low 32 bits
//     of the request are compared, as the kernel itself truncates the
//     request to an unsigned int: a caller setting high bits must not slip
//     past;
//   - the system calls of [denied], kernel surface a sandboxed program has
//     no business with (keyrings, io_uring, bpf, module loading, ...),
//     after Docker's default profile; docs/threat-model.md says why each;
//   - for a caller that is root on the host only: a new cgroup namespace
//     (CLONE_NEWCGROUP in clone or unshare; clone3, whose flags sit in
//     memory a filter cannot read, answers ENOSYS so libc falls back to
//     clone). In a nested user namespace of its own a root caller's uid 0
//     is still host uid 0, and with a cgroup namespace it owns it could
//     mount a cgroup hierarchy whose files (owned by host root) govern the
//     launcher's cgroup.
//   - for a caller that is root on the host only: a set-user-ID or
//     set-group-ID mode bit in chmod, fchmod, fchmodat(2), and in the
//     mode of creat, open, openat, mknod(at). A file such a sandbox
//     creates in a writable bind is owned by host root: chmod 4755 on a
//     copy of a shell left a root shell on the host for any local user
//     (the sandbox's nosuid mount does not follow the file outside).
//     openat2, whose mode sits in memory, answers ENOSYS (libc and
//     programs fall back to openat).
const (
	tiocsti   = 0x5412
	tioclinux = 0x541c
)

// Offsets into struct seccomp_data.
const (
	offNr      = 0
	offArch    = 4
	offArg0Low = 16       // args[0], low half on little-endian machines
	offArg1Low = 16 + 8*1 // args[1], low half on little-endian machines
	setIDBits  = unix.S_ISUID | unix.S_ISGID
	x32SysBit  = 0x40000000
	retAllow   = unix.SECCOMP_RET_ALLOW
	retErrno   = unix.SECCOMP_RET_ERRNO
)

// denied is the default denylist, with the errno each call answers: ENOSYS
// where a program is expected to treat the call as absent from the kernel
// and fall back (io_uring, the keyring, long-removed calls), EPERM where
// an unprivileged caller would get it anyway.
var denied = []struct {
	name  string
	errno unix.Errno
}{
	{"keyctl", unix.ENOSYS}, {"add_key", unix.ENOSYS}, {"request_key", unix.ENOSYS},
	{"io_uring_setup", unix.ENOSYS}, {"io_uring_enter", unix.ENOSYS}, {"io_uring_register", unix.ENOSYS},
	{"bpf", unix.EPERM},
	{"perf_event_open", unix.EPERM},
	{"userfaultfd", unix.EPERM},
	{"kexec_load", unix.EPERM}, {"kexec_file_load", unix.EPERM},
	{"init_module", unix.EPERM}, {"finit_module", unix.EPERM}, {"delete_module", unix.EPERM},
	{"open_by_handle_at", unix.EPERM},
	{"acct", unix.EPERM},
	{"swapon", unix.EPERM}, {"swapoff", unix.EPERM},
	{"reboot", unix.EPERM},
	{"syslog", unix.EPERM},
	{"quotactl", unix.EPERM}, {"quotactl_fd", unix.EPERM},
	{"settimeofday", unix.EPERM}, {"stime", unix.EPERM},
	{"clock_settime", unix.EPERM}, {"clock_settime64", unix.EPERM},
	{"clock_adjtime", unix.EPERM}, {"clock_adjtime64", unix.EPERM},
	{"iopl", unix.EPERM}, {"ioperm", unix.EPERM},
	{"vm86", unix.ENOSYS}, {"vm86old", unix.ENOSYS},
	{"lookup_dcookie", unix.ENOSYS},
	{"uselib", unix.ENOSYS}, {"ustat", unix.ENOSYS}, {"sysfs", unix.ENOSYS},
	{"_sysctl", unix.ENOSYS}, {"nfsservctl", unix.ENOSYS},
}

// modeArg names, for each call that takes a file mode, the argument that
// holds it (refused with a set-ID bit for root callers).
var modeArg = []struct {
	name string
	arg  uint32
}{
	{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2},
	{"creat", 1}, {"open", 2}, {"openat", 3}, {"mknod", 1}, {"mknodat", 2},
}

// abi is one system-call ABI the filter knows: its audit arch and its
// numbers for the calls the filter looks at. A call the ABI lacks is
// simply absent from nrs.
type abi struct {
	arch uint32
	// x32 marks the x86_64 ABI, whose x32 calls carry x32SysBit: the
	// filter strips the bit and checks them against the same numbers,
	// plus the few x32 numbers of their own (x32Only).
	x32     bool
	x32Only map[string]uint32
	nrs     map[string]uint32
}

// Numbers from the kernel's syscall tables (as golang.org/x/sys/unix's
// zsysnum files list them); a unit test checks every denied name is known
// to every ABI that has it. Each table is a function, built when a
// filter is: as package variables, their maps were built at every start
// of this binary, in every stage and for every subcommand (issue 33).
func abiX86_64() abi {
	return abi{arch: unix.AUDIT_ARCH_X86_64, x32: true,
		x32Only: map[string]uint32{"ioctl": 514, "kexec_load": 528},
		nrs: map[string]uint32{
			"ioctl": 16, "clone": 56, "unshare": 272, "clone3": 435,
			"chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "creat": 85, "open": 2, "openat": 257,
			"mknod": 133, "mknodat": 259, "openat2": 437,
			"keyctl": 250, "add_key": 248, "request_key": 249,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
			"kexec_load": 246, "kexec_file_load": 320,
			"init_module": 175, "finit_module": 313, "delete_module": 176,
			"open_by_handle_at": 304, "acct": 163, "swapon": 167, "swapoff": 168,
			"reboot": 169, "syslog": 103, "quotactl": 179, "quotactl_fd": 443,
			"settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305,
			"iopl": 172, "ioperm": 173, "lookup_dcookie": 212,
			"uselib": 134, "ustat": 136, "sysfs": 139, "_sysctl": 156, "nfsservctl": 180,
		}}
}

// abiI386 is i386's table.
func abiI386() abi {
	return abi{arch: unix.AUDIT_ARCH_I386,
		nrs: map[string]uint32{
			"ioctl": 54, "clone": 120, "unshare": 310, "clone3": 435,
			"chmod": 15, "fchmod": 94, "fchmodat": 306, "fchmodat2": 452, "creat": 8, "open": 5, "openat": 295,
			"mknod": 14, "mknodat": 297, "openat2": 437,
			"keyctl": 288, "add_key": 286, "request_key": 287,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"bpf": 357, "perf_event_open": 336, "userfaultfd": 374,
			"kexec_load":  283,
			"init_module": 128, "finit_module": 350, "delete_module": 129,
			"open_by_handle_at": 342, "acct": 51, "swapon": 87, "swapoff": 115,
			"reboot": 88, "syslog": 103, "quotactl": 131, "quotactl_fd": 443,
			"settimeofday": 79, "stime": 25, "clock_settime": 264, "clock_settime64": 404,
			"clock_adjtime": 343, "clock_adjtime64": 405,
			"iopl": 110, "ioperm": 101, "vm86": 166, "vm86old": 113, "lookup_dcookie": 253,
			"uselib": 86, "ustat": 62, "sysfs": 135, "_sysctl": 149, "nfsservctl": 169,
		}}
}

// abiAArch64 is arm64's table.
func abiAArch64() abi {
	return abi{arch: unix.AUDIT_ARCH_AARCH64,
		nrs: map[string]uint32{
			"ioctl": 29, "clone": 220, "unshare": 97, "clone3": 435,
			"fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "openat": 56, "mknodat": 33, "openat2": 437,
			"keyctl": 219, "add_key": 217, "request_key": 218,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
			"kexec_load": 104, "kexec_file_load": 294,
			"init_module": 105, "finit_module": 273, "delete_module": 106,
			"open_by_handle_at": 265, "acct": 89, "swapon": 224, "swapoff": 225,
			"reboot": 142, "syslog": 116, "quotactl": 60, "quotactl_fd": 443,
			"settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266,
			"lookup_dcookie": 18, "nfsservctl": 42,
		}}
}

// abiARM is 32-bit arm's table.
func abiARM() abi {
	return abi{arch: unix.AUDIT_ARCH_ARM,
		nrs: map[string]uint32{
			"ioctl": 54, "clone": 120, "unshare": 337, "clone3": 435,
			"chmod": 15, "fchmod": 94, "fchmodat": 333, "fchmodat2": 452, "creat": 8, "open": 5, "openat": 322,
			"mknod": 14, "mknodat": 324, "openat2": 437,
			"keyctl": 311, "add_key": 309, "request_key": 310,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"bpf": 386, "perf_event_open": 364, "userfaultfd": 388,
			"kexec_load": 347, "kexec_file_load": 401,
			"init_module": 128, "finit_module": 379, "delete_module": 129,
			"open_by_handle_at": 371, "acct": 51, "swapon": 87, "swapoff": 115,
			"reboot": 88, "syslog": 103, "quotactl": 131, "quotactl_fd": 443,
			"settimeofday": 79, "clock_settime": 262, "clock_settime64": 404,
			"clock_adjtime": 372, "clock_adjtime64": 405, "lookup_dcookie": 249,
			"uselib": 86, "ustat": 62, "sysfs": 135, "_sysctl": 149, "nfsservctl": 169,
		}}
}

// abis returns the ABIs a process on this machine can use. A 64-bit x86
// process can also make i386 (int 0x80) and, where enabled, x32 calls; an
// arm64 one can run 32-bit arm code.
func abis(goarch string) ([]abi, error) {
	switch goarch {
	case "amd64":
		return []abi{abiX86_64(), abiI386()}, nil
	case "arm64":
		return []abi{abiAArch64(), abiARM()}, nil
	}
	return nil, fmt.Errorf("seccomp filter: architecture %s is not supported", goarch)
}

// sandboxFilter assembles the classic BPF program. Calls from an ABI the
// filter does not know are refused with ENOSYS rather than let through
// unchecked. hostRoot adds the cgroup-namespace refusal.
//
// Layout: [ld arch] [jeq arch_i -> abi_i]... [ret ENOSYS], then per ABI:
//
//	abi_i:    ld nr; (x86_64: jset x32 bit -> x32_i)
//	          jeq ioctl -> ioctl_i; ja common_i
//	x32_i:    and ~x32 bit; jeq x32 ioctl -> ioctl_i; jeq x32-only denied...
//	common_i: jeq denied_nr -> ret_errno... ; (hostRoot: clone, unshare ->
//	          flags_i; clone3 -> ENOSYS); ret allow
//	flags_i:  ld arg0 low; jset CLONE_NEWCGROUP -> EPERM; ret allow
//	ioctl_i:  ld arg1 low; jeq TIOCSTI/TIOCLINUX -> EPERM; ret allow
//	returns:  one ret per errno used
func sandboxFilter(goarch string, hostRoot bool) ([]bpf.RawInstruction, error) {
	list, err := abis(goarch)
	if err != nil {
		return nil, err
	}
	a := newAsm()
	a.ld(offArch)
	for i, x := range list {
		a.jeq(x.arch, fmt.Sprintf("abi%d", i))
	}
	a.ret(retErrno | uint32(unix.ENOSYS))
	for i, x := range list {
		l := func(s string) string { return fmt.Sprintf("%s%d", s, i) }
		errLabel := func(e unix.Errno) string { return fmt.Sprintf("errno%d_%d", i, int(e)) }
		used := map[unix.Errno]bool{unix.EPERM: true}
		a.label(l("abi"))
		a.ld(offNr)
		if x.x32 {
			a.jset(x32SysBit, l("x32"))
		}
		a.jeq(x.nrs["ioctl"], l("ioctl"))
		if x.x32 {
			a.jmp(l("common"))
			a.label(l("x32"))
			a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: ^uint32(x32SysBit)})
			a.jeq(x.x32Only["ioctl"], l("ioctl"))
			for _, d := range denied {
				if nr, ok := x.x32Only[d.name]; ok {
					a.jeq(nr, errLabel(d.errno))
					used[d.errno] = true
				}
			}
		}
		a.label(l("common"))
		for _, d := range denied {
			if nr, ok := x.nrs[d.name]; ok {
				a.jeq(nr, errLabel(d.errno))
				used[d.errno] = true
			}
		}
		modeLabel := func(arg uint32) string { return fmt.Sprintf("mode%d_%d", i, arg) }
		modeArgs := map[uint32]bool{}
		if hostRoot {
			a.jeq(x.nrs["clone"], l("flags"))
			a.jeq(x.nrs["unshare"], l("flags"))
			a.jeq(x.nrs["clone3"], errLabel(unix.ENOSYS))
			a.jeq(x.nrs["openat2"], errLabel(unix.ENOSYS))
			used[unix.ENOSYS] = true
			for _, m := range modeArg {
				if nr, ok := x.nrs[m.name]; ok {
					a.jeq(nr, modeLabel(m.arg))
					modeArgs[m.arg] = true
				}
			}
		}
		a.ret(retAllow)
		if hostRoot {
			a.label(l("flags"))
			a.ld(offArg0Low)
			a.jset(unix.CLONE_NEWCGROUP, errLabel(unix.EPERM))
			a.ret(retAllow)
			for arg := uint32(1); arg <= 3; arg++ {
				if modeArgs[arg] {
					a.label(modeLabel(arg))
					a.ld(offArg0Low + 8*arg)
					a.jset(setIDBits, errLabel(unix.EPERM))
					a.ret(retAllow)
				}
			}
		}
		a.label(l("ioctl"))
		a.ld(offArg1Low)
		a.jeq(tiocsti, errLabel(unix.EPERM))
		a.jeq(tioclinux, errLabel(unix.EPERM))
		a.ret(retAllow)
		for _, e := range []unix.Errno{unix.EPERM, unix.ENOSYS} {
			if used[e] {
				a.label(errLabel(e))
				a.ret(retErrno | uint32(e))
			}
		}
	}
	return a.assemble()
}

// asm is a small assembler for classic BPF with named jump targets, so
// the program above needs no hand-counted skips. Conditional jumps fall
// through when false.
type asm struct {
	prog   []bpf.Instruction
	labels map[string]int
	fixes  []fix
}

type fix struct {
	at    int
	label string
}

func newAsm() *asm { return &asm{labels: map[string]int{}} }

func (a *asm) emit(i bpf.Instruction) { a.prog = append(a.prog, i) }
func (a *asm) ld(off uint32)          { a.emit(bpf.LoadAbsolute{Off: off, Size: 4}) }
func (a *asm) ret(v uint32)           { a.emit(bpf.RetConstant{Val: v}) }
func (a *asm) label(name string)      { a.labels[name] = len(a.prog) }

func (a *asm) jeq(val uint32, label string) {
	a.fixes = append(a.fixes, fix{len(a.prog), label})
	a.emit(bpf.JumpIf{Cond: bpf.JumpEqual, Val: val})
}

func (a *asm) jset(val uint32, label string) {
	a.fixes = append(a.fixes, fix{len(a.prog), label})
	a.emit(bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: val})
}

func (a *asm) jmp(label string) {
	a.fixes = append(a.fixes, fix{len(a.prog), label})
	a.emit(bpf.Jump{})
}

func (a *asm) assemble() ([]bpf.RawInstruction, error) {
	for _, f := range a.fixes {
		to, ok := a.labels[f.label]
		if !ok {
			return nil, fmt.Errorf("seccomp filter: no label %s", f.label)
		}
		skip := to - f.at - 1
		switch in := a.prog[f.at].(type) {
		case bpf.JumpIf:
			if skip < 0 || skip > 255 {
				return nil, fmt.Errorf("seccomp filter: jump to %s out of range (%d)", f.label, skip)
			}
			in.SkipTrue = uint8(skip)
			a.prog[f.at] = in
		case bpf.Jump:
			if skip < 0 {
				return nil, fmt.Errorf("seccomp filter: backward jump to %s", f.label)
			}
			in.Skip = uint32(skip)
			a.prog[f.at] = in
		}
	}
	if len(a.prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp filter: %d instructions, more than the kernel's %d", len(a.prog), unix.BPF_MAXINSNS)
	}
	return bpf.Assemble(a.prog)
}

// installFilter loads the sandbox's filter on every thread of the process
// (no_new_privs must already be set on the calling thread).
func installFilter(hostRoot bool) error {
	raw, err := sandboxFilter(runtime.GOARCH, hostRoot)
	if err != nil {
		return err
	}
	return loadFilter(raw)
}
