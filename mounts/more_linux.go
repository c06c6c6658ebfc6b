package mounts

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// applyMore applies the operations that keep host sockets out of the view:
// the links re-created on a tmpfs over /run, and socket masks.
func (b *builder) applyMore(op Op) error {
	switch op.Kind {
	case Symlink:
		return b.symlink(op)
	case MaskSocket:
		return b.maskSocket(op.Dst)
	case SocketDir:
		return b.socketDir(op.Dst)
	}
	return &Error{Op: "setup", Err: fmt.Errorf("unknown operation %q", op.Kind)}
}

// symlink creates op.Dst -> op.Target inside the new root. An existing
// entry at Dst is left alone (the link is only ever re-created where a
// tmpfs has just emptied the directory).
func (b *builder) symlink(op Op) error {
	parent, name := splitParent(op.Dst)
	if err := b.ensure(parent, true); err != nil {
		return &Error{Op: "create parent of symlink", Dst: op.Dst, Err: err}
	}
	pfd, err := b.openDirIn(parent)
	if err != nil {
		return &Error{Op: "symlink", Dst: op.Dst, Err: err}
	}
	defer unix.Close(pfd)
	if err := unix.Symlinkat(op.Target, pfd, name); err != nil && !errors.Is(err, unix.EEXIST) {
		return &Error{Op: "symlink", Dst: op.Dst, Err: err}
	}
	return nil
}

// maskSocket binds an empty read-only regular file over dst. connect() on
// it fails with ECONNREFUSED, as on any path that is not a socket. The
// empty file lives in the scratch tmpfs, which only this mount namespace
// ever sees.
//
// Whether dst needs the mask is decided with the sandbox's own
// credentials: this runs in init, in the sandbox's user namespace, with
// the uid, gid and groups the command gets, and with every capability of
// that namespace, which the command then loses. Those capabilities bypass
// permissions only on files whose owner and group are mapped there, so
// where this lookup is refused (EACCES: another user's 0700 directory on
// the way, such as the one holding git credential-cache's socket) no
// process of the sandbox can walk it either, a nested user namespace
// included (it maps a subset of these ids): there is nothing to mask,
// and the launch goes on. Any other failure on a path the sandbox can
// reach still fails the launch.
//
// The last component is not followed: the plan saw a socket there, and
// a link its owner put in its place since points at a path whose own
// sockets are judged where they are; following it would lay the mask
// over whatever file the link names.
func (b *builder) maskSocket(dst string) error {
	t, err := resolveIn(b.root, dst, unix.O_PATH|unix.O_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EACCES):
		return nil
	case err != nil:
		return &Error{Op: "mask socket", Dst: dst, Err: err}
	}
	defer unix.Close(t)
	var st unix.Stat_t
	if err := unix.Fstat(t, &st); err != nil {
		return &Error{Op: "mask socket", Dst: dst, Err: err}
	}
	if f := st.Mode & unix.S_IFMT; f == unix.S_IFDIR || f == unix.S_IFLNK {
		return nil
	}
	const empty = "/empty-socket-mask"
	if _, err := os.Lstat(empty); err != nil {
		if err := os.WriteFile(empty, nil, 0o444); err != nil {
			return &Error{Op: "mask socket", Dst: dst, Err: unwrap(err)}
		}
	}
	fd, err := cloneTree(empty, false, true)
	if err != nil {
		return &Error{Op: "mask socket", Dst: dst, Err: err}
	}
	defer unix.Close(fd)
	// Onto the inode looked at above, not a fresh lookup of dst.
	if err := unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return &Error{Op: "mask socket", Dst: dst, Err: err}
	}
	return nil
}

// socketDir lays a read-only overlay of the directory dst (as the view
// has it) over itself (see SocketDir). The overlay's lower layers are the
// directory, opened in the new root (the working directory while the
// overlay is made, named "."), and an empty directory of the scratch
// tmpfs (overlayfs wants two lower layers when it has no upper one).
// A dst the sandbox cannot reach, or that is no directory now, is left
// alone, as for maskSocket.
func (b *builder) socketDir(dst string) error {
	t, err := resolveIn(b.root, dst, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EACCES), errors.Is(err, unix.ELOOP):
		return nil
	case err != nil:
		return &Error{Op: "socket directory", Dst: dst, Err: err}
	}
	defer unix.Close(t)
	const empty = "/empty-socket-lower"
	if err := os.Mkdir(empty, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return &Error{Op: "socket directory", Dst: dst, Err: unwrap(err)}
	}
	if err := unix.Fchdir(t); errors.Is(err, unix.EACCES) {
		// An O_PATH open of the last component needs no search
		// permission; entering it does. Another user's 0700 directory
		// (a daemon's socket directory, another container's /tmp) is
		// one the sandbox cannot enter either: none of its sockets is
		// reachable, now or later, and the launch goes on.
		return nil
	} else if err != nil {
		return &Error{Op: "socket directory", Dst: dst, Err: err}
	}
	fd, err := newFS("overlay", map[string]string{"lowerdir": ".:" + empty},
		unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if cerr := unix.Chdir("/"); cerr != nil {
		if err == nil {
			unix.Close(fd)
		}
		return &Error{Op: "chdir", Dst: "/", Err: cerr}
	}
	if err != nil {
		b.warnf("%s: the kernel refused an overlay (%v): a socket the host binds there while the sandbox runs is reachable", dst, err)
		return nil
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return &Error{Op: "socket directory", Dst: dst, Err: err}
	}
	return nil
}
