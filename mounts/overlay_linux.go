package mounts

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// overlay shows the host directory op.Src at op.Dst through an overlayfs
// whose upper layer lives in the scratch tmpfs: writes are copied up there
// and vanish with the sandbox's mount namespace, the host directory is
// never written. The scratch is detached at the end, but the overlay keeps
// its layers alive.
//
// Overlayfs is mountable inside a user namespace since Linux 5.11. Where
// the kernel refuses it, the directory is bound read-only instead: the
// host stays as safe, only in-session writes there fail.
func (b *builder) overlay(op Op) error {
	if op.Exact {
		return b.overlayExact(op)
	}
	hostSrc := oldRoot + op.Src
	fi, err := os.Stat(hostSrc)
	if err != nil {
		if op.Optional && errors.Is(err, os.ErrNotExist) {
			b.warnf("skipped %s: the source disappeared", op)
			return nil
		}
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: unwrap(err)}
	}
	ro := op
	ro.Kind = ROBind
	if !fi.IsDir() {
		// A single file has no layer to put writes in: read-only.
		return b.bind(ro)
	}
	if err := b.ensure(op.Dst, true); err != nil {
		return &Error{Op: "create mount point for overlay", Src: op.Src, Dst: op.Dst, Err: err}
	}
	fd, err := b.newOverlay(hostSrc, fi, op.Size)
	return b.attachOverlay(op, fd, err)
}

// attachOverlay mounts the overlay fd (made for op) at op.Dst, or, where
// the kernel refused to make one (err), binds op's source read-only
// instead: the host stays as safe, only in-session writes there fail.
func (b *builder) attachOverlay(op Op, fd int, err error) error {
	if err != nil {
		b.warnf("%s: the kernel refused an overlay (%v); bound it read-only instead, so writes there fail for this session", op, err)
		ro := op
		ro.Kind = ROBind
		return b.bind(ro)
	}
	defer unix.Close(fd)
	if err := b.attach(fd, op.Dst); err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	return nil
}

// overlayExact is overlay for an Exact op: the source is opened with no
// symlink in any component (a link put there since the plan fails the
// launch, as for an exact bind), and the overlay's lower layer is that
// open directory itself (the working directory while the overlay is
// created, named "."), so nothing is looked up by name twice.
func (b *builder) overlayExact(op Op) error {
	src, err := resolveInHow(b.old, op.Src, unix.O_PATH, unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		if op.Optional && errors.Is(err, unix.ENOENT) {
			b.warnf("skipped %s: the source disappeared", op)
			return nil
		}
		if errors.Is(err, unix.ELOOP) {
			err = fmt.Errorf("a symlink appeared in the path since the launch was planned (something changed it meanwhile); nothing was mounted: start again, and look at what replaced a directory with a link: %w", err)
		}
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	defer unix.Close(src)
	ro := op
	ro.Kind = ROBind
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return b.bind(ro)
	}
	if err := b.ensure(op.Dst, true); err != nil {
		return &Error{Op: "create mount point for overlay", Src: op.Src, Dst: op.Dst, Err: err}
	}
	if err := unix.Fchdir(src); err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	fi, err := os.Stat(".")
	var fd int
	if err == nil {
		fd, err = b.newOverlay(".", fi, op.Size)
	}
	if cerr := unix.Chdir("/"); cerr != nil {
		if err == nil {
			unix.Close(fd)
		}
		return &Error{Op: "chdir", Dst: "/", Err: cerr}
	}
	return b.attachOverlay(op, fd, err)
}

// newOverlay creates the detached overlay mount of lower, with a fresh
// upper and work directory in a tmpfs of its own of size bytes (0: the
// kernel's default), mounted in the scratch tmpfs.
func (b *builder) newOverlay(lower string, fi os.FileInfo, size int64) (int, error) {
	b.overlays++
	dir := fmt.Sprintf("/overlay-%d", b.overlays)
	upper, work := dir+"/upper", dir+"/work"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return -1, err
	}
	data := "mode=0700"
	if size > 0 {
		data += fmt.Sprintf(",size=%d", size)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return -1, fmt.Errorf("mount the layer's tmpfs: %w", err)
	}
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return -1, err
		}
	}
	// The overlay's root takes the upper directory's owner and mode: give
	// it the host directory's, so the session sees what the host has.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		_ = os.Lchown(upper, int(st.Uid), int(st.Gid)) // unmapped ids stay ours
	}
	if err := os.Chmod(upper, fi.Mode().Perm()); err != nil {
		return -1, err
	}
	return newFS("overlay", map[string]string{
		"lowerdir": overlayEscape(lower),
		"upperdir": upper,
		"workdir":  work,
	}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// overlayEscape protects the characters overlayfs gives a meaning to in a
// lowerdir value (':' separates layers, ',' options, '\' escapes).
func overlayEscape(p string) string {
	return strings.NewReplacer(`\`, `\\`, `:`, `\:`, `,`, `\,`).Replace(p)
}
