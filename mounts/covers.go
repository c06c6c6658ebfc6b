package mounts

// ReadOnly makes Dst, a path that already exists in the view (in the
// sandbox's own /proc, say), read-only: Dst is bound onto itself with every
// mount below it read-only. A Dst that does not exist is left alone. It is
// not a user operation: plans add it for a caller that is root on the host
// (see KernelCovers).
const ReadOnly Kind = "read-only"

// KernelCovers returns the operations that keep a caller who is root on
// the host from reaching the kernel through the sandbox's /proc and /sys.
// Such a caller's uid 0 inside is the host's uid 0, and much of /proc/sys
// and sysfs is guarded by file ownership alone: without the covers,
// writing /proc/sys/kernel/core_pattern inside makes the kernel run a
// program of the sandbox's choosing as real root on the host.
//
// The lists follow runc's default read-only and masked paths and
// bubblewrap's covered /proc directories; docs/threat-model.md says why
// each entry is taken or left. The covers are applied to the sandbox's
// new /proc (and its read-only /sys), after every other operation, so no
// user operation can lift them.
//
// A caller that is not root on the host gets none: its uid 0 inside a
// nested user namespace is not host root, and a cover over /proc would make
// the kernel refuse a nested `mount -t proc` (the mount would reveal what
// the cover hides), which breaks sandboxes started inside the sandbox.
func KernelCovers() []Op {
	var ops []Op
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		ops = append(ops, Op{Kind: ReadOnly, Dst: p})
	}
	for _, p := range []string{
		"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/proc/latency_stats", "/proc/acpi", "/proc/asound",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
		// The host's root-only kernel filesystems that the read-only /sys
		// clone carries as submounts (a fresh sysfs would not have them):
		// debugfs and tracefs (kernel internals, every process's traced
		// activity), pstore (earlier crashes' kernel logs).
		"/sys/kernel/debug", "/sys/kernel/tracing", "/sys/fs/pstore",
		// Podman's extra masks: the host's block devices' sysfs links,
		// the SELinux policy interface.
		"/sys/dev/block", "/sys/fs/selinux",
		// Physical memory layout and other tenants' activity (issue 28):
		// page frame flags, map counts and owning cgroups, the idle-page
		// tracker, slab, zone and fragmentation state, the kernel's
		// virtual and physical address maps, symbol and module addresses,
		// interrupt and softirq counters (a keystroke-timing side
		// channel), the crash kernel's symbol addresses, securityfs.
		"/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup", "/sys/kernel/mm/page_idle",
		"/proc/slabinfo", "/proc/pagetypeinfo", "/proc/zoneinfo", "/proc/buddyinfo", "/sys/kernel/slab",
		"/proc/vmallocinfo", "/proc/iomem", "/proc/ioports", "/proc/kallsyms", "/proc/modules", "/proc/mtrr",
		"/proc/interrupts", "/proc/softirqs", "/proc/kmsg", "/sys/kernel/vmcoreinfo", "/sys/kernel/security",
	} {
		ops = append(ops, Op{Kind: Mask, Dst: p})
	}
	// Deny by default: the lists above name what is known; every other
	// file or directory of /proc (its processes' directories aside) and
	// /sys that host root may read and the host's other users may not
	// (a tunable's 0600 file such as net.ipv4.tcp_fastopen_key, the
	// host's under --net=host; /proc/tty/driver; a module's root-only
	// parameters; DAMON's admin tree) is hidden as in the host's trees.
	for _, p := range KernelTrees {
		ops = append(ops, Op{Kind: HidePrivate, Dst: p})
	}
	return ops
}

// KernelTrees are the kernel's filesystems a root caller's view walks
// with HidePrivate after the covers: the sandbox's own /proc (its
// processes' directories left alone) and the read-only /sys clone.
var KernelTrees = []string{"/proc", "/sys"}
