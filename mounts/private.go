package mounts

import "slices"

// HidePrivate hides, below the directory Dst of the view, every file and
// directory that the sandbox's own uid and groups may read but the host's
// other users may not (see [Private]). It is not a user operation: plans
// add it for a caller that is root on the host (see [PrivateTrees]), whose
// uid 0 inside reads every root-owned file as its owner.
//
// The rule is applied when the sandbox is built, by a walk of the view as
// it then is; what another operation of the plan places (a tmpfs over the
// home, a bind made on purpose) is the sandbox's own and is neither walked
// nor masked. A private directory is masked whole and not entered, a private
// file gets /dev/null. A directory that leads to a later operation's
// destination (a workspace bound on purpose below a private directory) is
// entered instead of masked, so the bind still has its mount point; its
// private entries are masked one by one. An entry that vanishes or changes
// type while the walk looks at it is skipped or judged by what it is when
// opened: the walk never fails a launch for the host's own churn.
//
// The walk is bounded: it looks at no more than [PrivateWalkBudget]
// entries in all (a directory whose listing would go past what is left is
// not read). A directory it has no budget left to read is masked whole,
// unread, with a warning: what the walk did not look at is hidden, never
// shown.
const HidePrivate Kind = "hide-private"

// PrivateWalkBudget is how many directory entries one sandbox's walks
// (every HidePrivate of its plan together) look at before they mask the
// directories left unread; each of [KernelTrees] has a budget of this
// size of its own. A variable for tests.
var PrivateWalkBudget = 200000

// PrivateTrees are the host trees a root caller's plan walks with
// HidePrivate: where packages, services and administrators keep
// configuration, state, keys and users' files. /usr (packages' files,
// world-readable by design), /dev and /run (covered elsewhere) and /tmp
// (a tmpfs) are not walked; /proc and /sys are walked after the kernel
// covers ([KernelTrees]).
var PrivateTrees = []string{"/etc", "/root", "/var", "/srv", "/opt", "/home", "/boot", "/usr/local/etc", "/mnt", "/media"}

// rootTreeSkip are the top-level names a HidePrivate of "/" leaves alone
// besides the trees walked on their own (PrivateTrees, KernelTrees):
// package stores and system directories world-readable by design (and
// too large to walk at every launch), and the sandbox's own trees.
var rootTreeSkip = []string{"usr", "nix", "gnu", "snap", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
	"dev", "run", "tmp"}

// SkipAtRoot reports whether the walk of "/" (which plans add after
// PrivateTrees: deny by default, for whatever else the host keeps at its
// top, a /swapfile, /lost+found, /data, /backup) leaves the top-level
// entry name alone: a tree walked on its own (PrivateTrees' and
// KernelTrees' top-level ones, so that none is walked twice against the
// budget) or one of rootTreeSkip.
func SkipAtRoot(name string) bool {
	if slices.Contains(rootTreeSkip, name) {
		return true
	}
	for _, lists := range [][]string{PrivateTrees, KernelTrees} {
		for _, t := range lists {
			if t == "/"+name {
				return true
			}
		}
	}
	return false
}

// Private reports whether an entry of mode mode (the st_mode bits), owned
// by uid:gid, is readable by a process of uid me and groups groups (without
// capabilities: the sandbox has none) but not by the host's other users.
// For a directory, reading is listing it (r) or entering it (x).
func Private(mode, uid, gid uint32, me uint32, groups []uint32) bool {
	var ours uint32
	switch {
	case uid == me:
		ours = mode >> 6 & 7
	case inGroups(gid, groups):
		ours = mode >> 3 & 7
	default:
		return false // we read it as any other user does
	}
	other := mode & 7
	want := uint32(4) // read
	if mode&0o170000 == 0o040000 {
		want = 5 // read and enter
	}
	return ours&want&^other != 0
}

func inGroups(g uint32, groups []uint32) bool {
	for _, x := range groups {
		if x == g {
			return true
		}
	}
	return false
}
