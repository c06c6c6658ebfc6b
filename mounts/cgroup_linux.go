package mounts

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroup applies a Cgroup operation: over dst, a fresh read-only cgroup2
// mount when this process sits at the root of its own cgroup namespace
// (its /proc/self/cgroup reads "0::/"), else an empty read-only tmpfs.
// Either way the host's hierarchy that the read-only root carried there is
// covered. Read-only: a root caller's uid 0 owns the files of the cgroup
// it was started in (the namespace's root), and writing them would change
// the launcher's own limits.
func (b *builder) cgroup(dst string) error {
	st, ok, err := b.statIn(dst)
	if err != nil || !ok || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil // no such directory in the view: nothing is shown there
	}
	if ownCgroupRoot() {
		fd, err := newFS("cgroup2", nil, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
		switch {
		case err != nil:
			b.warnf("a fresh cgroup2 mount at %s was refused (%v); an empty directory stands there instead", dst, err)
		case unix.Faccessat(fd, "cgroup.type", unix.F_OK, 0) != nil:
			// Only the hierarchy's root cgroup lacks cgroup.type: the
			// sandbox's namespace is rooted there (the launcher runs in
			// the root cgroup), and the mount would show the whole
			// host tree.
			unix.Close(fd)
		default:
			err = b.attach(fd, dst)
			unix.Close(fd)
			if err == nil {
				return nil
			}
			return &Error{Op: "mount cgroup2", Dst: dst, Err: err}
		}
	} else {
		b.warnf("the sandbox has no cgroup namespace of its own: %s is an empty directory inside", dst)
	}
	return b.tmpfs(dst, 0o755, maskSize, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOEXEC, "cgroup cover")
}

// ownCgroupRoot reports whether this process is at the root of its cgroup
// namespace's unified hierarchy: a cgroup2 mount made now shows that
// namespace's subtree only. Read through the host's /proc (the view's is
// not attached yet), which names the calling task.
func ownCgroupRoot() bool {
	b, err := os.ReadFile(oldRoot + "/proc/self/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest == "/"
		}
	}
	return false
}
