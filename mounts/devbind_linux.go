package mounts

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// devBind binds a host device node (or a directory of them) at op.Dst with
// device access on: the one bind without nodev. Read-only and nosuid, as
// the private /dev's own nodes: the device reads and writes, but a root
// caller cannot chmod or chown the host's inode through it. The source
// must be a character or block device or a directory, checked again here
// (the plan checked it on the host path; this is what the mount gets).
func (b *builder) devBind(op Op) error {
	src, err := resolveIn(b.old, op.Src, unix.O_PATH)
	if err != nil {
		if op.Optional && errors.Is(err, unix.ENOENT) {
			b.warnf("skipped %s: the source disappeared", op)
			return nil
		}
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	dir := false
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR, unix.S_IFBLK:
	case unix.S_IFDIR:
		dir = true
	default:
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: fmt.Errorf("not a device node or a directory of them (it changed since the launch was planned)")}
	}
	// A node on a nodev mount (most tmpfs: /tmp, /dev/shm) cannot be
	// opened through any bind of it: the kernel keeps nodev locked in a
	// user namespace. Said now rather than as EACCES inside.
	if dir {
		if err := devDirNoSymlink(b.old, op.Src, &st); err != nil {
			return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
		}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(src, &sfs); err == nil && sfs.Flags&unix.ST_NODEV != 0 {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: fmt.Errorf("the source is on a nodev mount, where no device node opens (the kernel keeps nodev in the sandbox's user namespace): bind the node from /dev, or from a mount without nodev")}
	}
	if err := b.ensureDev(op.Dst, dir); err != nil {
		return &Error{Op: "create mount point for " + string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	fd, err := cloneAt(src, true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	defer unix.Close(fd)
	if err := b.attach(fd, op.Dst); err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	return nil
}

// ensureDev is ensure, where a mount point in the private /dev (read-only
// once built) is made with the tmpfs writable for that moment only.
func (b *builder) ensureDev(dst string, dir bool) error {
	if b.devDst == "" || !Within(dst, b.devDst) || dst == b.devDst {
		return b.ensure(dst, dir)
	}
	t, err := b.openIn(b.devDst)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make %s writable for the mount point: %w", b.devDst, err)
	}
	err = b.ensure(dst, dir)
	if rerr := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); rerr != nil {
		return fmt.Errorf("make %s read-only again: %w", b.devDst, rerr)
	}
	return err
}

// CheckDevDir is the plan's look at a directory --dev-bind source: src,
// resolved from the host root as the mount resolves it, must be reached
// without a symlink on the way (devDirNoSymlink, the check the mount makes
// again on the path it binds). plan.Build calls it, so `plan` and `run`
// refuse such a source alike, before anything is started.
func CheckDevDir(src string) error {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	fd, err := resolveIn(root, src, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	return devDirNoSymlink(root, src, &st)
}

// devDirNoSymlink checks that a directory source reached st without a
// symlink on the way. A directory is admitted for being below /dev, and
// that is a property of the path the kernel walks: a link below /dev
// (anyone can make one in /dev/shm) to a tree elsewhere would otherwise
// open every device node of that tree inside.
func devDirNoSymlink(root int, src string, st *unix.Stat_t) error {
	fd, err := resolveInHow(root, src, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("a directory source is taken only by its real path below /dev, and this one goes through a symlink: give the path the link leads to (a directory outside /dev is --ro-bind's)")
		}
		return err
	}
	defer unix.Close(fd)
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil {
		return err
	}
	if got.Dev != st.Dev || got.Ino != st.Ino {
		return fmt.Errorf("the directory changed while it was being bound: launch again")
	}
	return nil
}
