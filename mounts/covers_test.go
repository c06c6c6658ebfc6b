package mounts

import (
	"path"
	"slices"
	"testing"
)

func TestKernelCovers(t *testing.T) {
	want := map[string]Kind{
		"/proc/sys": ReadOnly, "/proc/sysrq-trigger": ReadOnly, "/proc/irq": ReadOnly, "/proc/bus": ReadOnly, "/proc/fs": ReadOnly,
		"/proc/kcore": Mask, "/proc/keys": Mask, "/proc/timer_list": Mask, "/proc/sched_debug": Mask,
		"/proc/latency_stats": Mask, "/proc/acpi": Mask, "/proc/scsi": Mask,
		"/sys/firmware": Mask, "/sys/devices/virtual/powercap": Mask,
		"/sys/kernel/debug": Mask, "/sys/kernel/tracing": Mask, "/sys/fs/pstore": Mask,
		"/proc/kpageflags": Mask, "/proc/kpagecount": Mask, "/proc/kpagecgroup": Mask, "/sys/kernel/mm/page_idle": Mask,
		"/proc/slabinfo": Mask, "/proc/pagetypeinfo": Mask, "/proc/zoneinfo": Mask, "/proc/buddyinfo": Mask,
		"/proc/vmallocinfo": Mask, "/proc/iomem": Mask, "/proc/kallsyms": Mask, "/proc/interrupts": Mask,
		"/sys/dev/block": Mask, "/sys/fs/selinux": Mask, "/sys/kernel/security": Mask,
		// Deny by default after the lists: every root-only entry of both.
		"/proc": HidePrivate, "/sys": HidePrivate,
	}
	got := map[string]Kind{}
	for _, op := range KernelCovers() {
		if c, err := CleanAbs(op.Dst); err != nil || c != op.Dst {
			t.Errorf("%s: destination not absolute and clean", op)
		}
		if op.Kind != ReadOnly && op.Kind != Mask && op.Kind != HidePrivate {
			t.Errorf("%s: unexpected kind", op)
		}
		got[op.Dst] = op.Kind
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: %q, want %q", p, got[p], k)
		}
	}
}

func TestPrivate(t *testing.T) {
	const dir, reg = 0o040000, 0o100000
	root := []uint32{0}
	cases := []struct {
		name           string
		mode, uid, gid uint32
		want           bool
	}{
		{"root-only file", reg | 0o600, 0, 0, true},
		{"group-root file", reg | 0o640, 5, 0, true},
		{"world-readable file", reg | 0o644, 0, 0, false},
		{"another user's private file", reg | 0o600, 1000, 1000, false},
		{"another user's group-root file, group unreadable", reg | 0o604, 1000, 0, false},
		{"root dir others may enter but not list", dir | 0o711, 0, 0, true},
		{"root dir others may list but not enter", dir | 0o744, 0, 0, true},
		{"root dir open to all", dir | 0o755, 0, 0, false},
		{"root dir closed to root too", dir, 0, 0, false},
		{"write-only for others does not matter", reg | 0o602, 0, 0, true},
	}
	for _, c := range cases {
		if got := Private(c.mode, c.uid, c.gid, 0, root); got != c.want {
			t.Errorf("%s (%o %d:%d): %v, want %v", c.name, c.mode, c.uid, c.gid, got, c.want)
		}
	}
}

// The walk of "/" leaves alone what is walked on its own: every
// top-level tree of PrivateTrees and KernelTrees is skipped by the walk of "/" (SkipAtRoot: a
// tree added to one list and not the other would be walked twice, its
// entries counted twice against the budget).
func TestRootTreeSkipCoversWalkedTrees(t *testing.T) {
	for _, tree := range append(slices.Clone(PrivateTrees), KernelTrees...) {
		if path.Dir(tree) == "/" && !SkipAtRoot(path.Base(tree)) {
			t.Errorf("%s is walked on its own but the walk of / enters it", tree)
		}
	}
}
