package mounts

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// hidePrivate applies a HidePrivate operation: the walk described there.
func (b *builder) hidePrivate(dst string) error {
	if !b.keepResolved {
		b.keepResolved = true
		b.resolveKeep()
	}
	if b.keep[dst] {
		return nil // a later operation replaces the whole tree
	}
	fd, err := resolveIn(b.root, dst, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return &Error{Op: "hide private files", Dst: dst, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &Error{Op: "hide private files", Dst: dst, Err: err}
	}
	if b.private(&st) && !b.leadsToKeep(dst) {
		err = b.maskDirAt(fd)
		unix.Close(fd)
		if err != nil {
			return &Error{Op: "hide private directory", Dst: dst, Err: err}
		}
		return nil
	}
	w := &privateWalk{b: b}
	err = w.dir(fd, dst)
	if w.unread > 0 {
		b.warnf("the walk for files only root may read stopped at its bound (%d entries): %d directories below %s it did not read are hidden whole", PrivateWalkBudget, w.unread, dst)
	}
	return err
}

type privateWalk struct {
	b      *builder
	buf    []byte // getdents buffer
	unread int    // directories masked whole because the budget was spent
}

// private reports whether the entry st describes is private to the
// sandbox's identity (see Private).
func (b *builder) private(st *unix.Stat_t) bool {
	if b.groups == nil {
		b.me = uint32(os.Getuid())
		b.groups = []uint32{uint32(os.Getgid())}
		gs, _ := unix.Getgroups()
		for _, g := range gs {
			b.groups = append(b.groups, uint32(g))
		}
	}
	return Private(st.Mode, st.Uid, st.Gid, b.me, b.groups)
}

// resolveKeep adds to the kept destinations the paths they have in the
// view once symlinks are resolved (Fedora Atomic's /root is a link to
// /var/roothome): the walk meets them by their real paths. A destination
// that does not exist yet resolves through its deepest existing parent.
// (The host's /proc, under the old root while staging, names the fds.)
func (b *builder) resolveKeep() {
	var extra []string
	for k := range b.keep {
		p, rest := k, ""
		for {
			fd, err := b.openIn(p)
			if err == nil {
				real, err := os.Readlink(fmt.Sprintf("%s/proc/self/fd/%d", oldRoot, fd))
				unix.Close(fd)
				if err == nil && strings.HasPrefix(real, newRoot) {
					r := strings.TrimPrefix(real, newRoot)
					if r == "" {
						r = "/"
					}
					if rest != "" {
						r = path.Join(r, rest)
					}
					if r != k {
						extra = append(extra, r)
					}
				}
				break
			}
			if p == "/" {
				break
			}
			parent, name := splitParent(p)
			rest = path.Join(name, rest)
			p = parent
		}
	}
	for _, r := range extra {
		b.keep[r] = true
	}
}

// leadsToKeep reports whether p is above a later operation's destination.
func (b *builder) leadsToKeep(p string) bool {
	for k := range b.keep {
		if k != p && Within(k, p) {
			return true
		}
	}
	return false
}

// dir walks the directory open at dfd (the view's p); it closes dfd.
func (w *privateWalk) dir(dfd int, p string) error {
	defer unix.Close(dfd)
	names, err := w.list(dfd, p)
	if err != nil || names == nil {
		return err
	}
	for _, e := range names {
		child := p + "/" + e.name
		if p == "/" {
			child = "/" + e.name
		}
		if w.b.keep[child] {
			continue
		}
		switch e.typ {
		case unix.DT_LNK, unix.DT_SOCK, unix.DT_CHR, unix.DT_BLK:
			continue // see entry: never masked by the walk
		}
		if err := w.entry(dfd, e.name, child); err != nil {
			return err
		}
	}
	return nil
}

// list reads the entries in the directory open at dfd, or masks it whole
// (and returns nil) when the budget left cannot cover them. A directory
// on the way to a later operation's destination is always read.
func (w *privateWalk) list(dfd int, p string) ([]dirent, error) {
	keepPath := w.b.leadsToKeep(p)
	var out []dirent
	if w.buf == nil {
		w.buf = make([]byte, 64<<10)
	}
	for {
		n, err := unix.Getdents(dfd, w.buf)
		if err != nil || n <= 0 {
			break // an error: gone meanwhile; what was read is judged
		}
		out = parseDirents(w.buf[:n], out)
		if !keepPath && len(out) > w.b.walkLeft {
			if err := w.b.maskDirAt(dfd); err != nil {
				return nil, &Error{Op: "hide unread directory", Dst: p, Err: err}
			}
			w.unread++
			return nil, nil
		}
	}
	w.b.walkLeft -= len(out)
	return out, nil
}

// dirent is one directory entry: its name and its type as the directory
// records it (unix.DT_*; DT_UNKNOWN on filesystems that do not say).
type dirent struct {
	name string
	typ  uint8
}

// parseDirents appends the linux_dirent64 records in buf, but "." and "..".
func parseDirents(buf []byte, out []dirent) []dirent {
	for len(buf) >= 19 {
		reclen := int(buf[16]) | int(buf[17])<<8
		if reclen < 19 || reclen > len(buf) {
			break
		}
		typ := buf[18]
		name := buf[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if s := string(name); s != "." && s != ".." {
			out = append(out, dirent{name: s, typ: typ})
		}
		buf = buf[reclen:]
	}
	return out
}

// entry judges one entry of the directory dfd by what it is when opened
// (never following a symlink) and masks it, walks it, or leaves it.
func (w *privateWalk) entry(dfd int, name, child string) error {
	// One fstatat for most entries; an entry is opened only when it is to
	// be masked or entered, and is then judged again by what was opened
	// (it may have been replaced meanwhile).
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil // vanished meanwhile
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFREG, unix.S_IFIFO:
	default:
		return nil // symlinks are judged where they lead; devices and sockets are covered elsewhere
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && !w.b.private(&st) {
		return nil
	}
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // vanished meanwhile
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		lead := w.b.leadsToKeep(child)
		if !lead && w.b.private(&st) {
			return vanishedOK(w.b.maskDirAt(fd), "hide private directory", child)
		}
		if !lead && w.b.walkLeft <= 0 {
			w.unread++
			return vanishedOK(w.b.maskDirAt(fd), "hide unread directory", child)
		}
		rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil
		}
		return w.dir(rfd, child)
	case unix.S_IFREG, unix.S_IFIFO:
		if w.b.private(&st) {
			return vanishedOK(w.b.maskFileAt(fd), "hide private file", child)
		}
	}
	return nil
}

// vanishedOK turns a mask's failure into the launch's error, unless the
// entry was removed meanwhile (nothing is left to hide).
func vanishedOK(err error, op, dst string) error {
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE) {
		return nil
	}
	return &Error{Op: op, Dst: dst, Err: err}
}

// maskDirAt covers the directory at fd with an empty read-only tmpfs.
func (b *builder) maskDirAt(fd int) error {
	t, err := newFS("tmpfs", map[string]string{"mode": "0755", "size": "4k"}, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("mount empty tmpfs: %w", err)
	}
	defer unix.Close(t)
	return unix.MoveMount(t, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// maskFileAt binds /dev/null, read-only, over the file at fd.
func (b *builder) maskFileAt(fd int) error {
	t, err := cloneTree(oldRoot+"/dev/null", false, true)
	if err != nil {
		return fmt.Errorf("clone /dev/null: %w", err)
	}
	defer unix.Close(t)
	return unix.MoveMount(t, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}
