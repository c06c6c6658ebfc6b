package mounts

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hidePrivate applies a HidePrivate operation: the walk described there.
// It runs in every root caller's launch over trees of tens of thousands of
// entries, so the walk allocates nothing per entry: each depth reads its
// listing into a buffer of its own, reused, and judges the records in
// place; names go to the kernel as the listing holds them (NUL-ended);
// the path of an entry is built in one reused buffer and made a string
// only for an error.
func (b *builder) hidePrivate(dst string) error {
	if !b.keepResolved {
		b.keepResolved = true
		b.resolveKeep()
		b.keepAbove = ancestors(b.keep)
	}
	kernel := slices.Contains(KernelTrees, dst)
	if b.keep[dst] && !kernel {
		return nil // a later operation replaces the whole tree
	}
	if kernel {
		// A budget of its own: a large /var spent first must not leave
		// /sys hidden whole (nproc and friends read it).
		left := b.walkLeft
		b.walkLeft = PrivateWalkBudget
		defer func() { b.walkLeft = left }()
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
	if b.private(&st) && !b.keepAbove[dst] {
		err = b.maskDirAt(fd)
		unix.Close(fd)
		if err != nil {
			return &Error{Op: "hide private directory", Dst: dst, Err: err}
		}
		return nil
	}
	if b.walk == nil {
		b.walk = &privateWalk{b: b} // its buffers serve every tree of the plan
	}
	w := b.walk
	w.path, w.unread, w.proc, w.top = append(w.path[:0], dst...), 0, dst == "/proc", dst == "/"
	err = w.dir(fd, 0)
	if w.unread > 0 {
		b.warnf("the walk for files only root may read stopped at its bound (%d entries): %d directories below %s it did not read are hidden whole", PrivateWalkBudget, w.unread, dst)
	}
	return err
}

type privateWalk struct {
	b      *builder
	bufs   [][]byte // getdents buffers, one per depth, reused
	path   []byte   // the view's path of the entry at hand
	unread int      // directories masked whole because the budget was spent
	proc   bool     // the walk is the sandbox's /proc: its processes' directories are left alone
	top    bool     // the walk is "/": SkipAtRoot's names are left alone
}

// walkBuf is the size of a depth's getdents buffer: one page. A directory
// whose listing does not fit is read again in page-sized pieces while its
// entries are judged (see list), so the walk touches about a page of
// memory per depth, whatever the size of the directories: a fresh page is
// a page fault, and on some machines a page fault costs as much CPU as
// dozens of system calls (docs/performance.md, issue 33).
const walkBuf = 4096

// buf returns depth's getdents buffer.
func (w *privateWalk) buf(depth int) []byte {
	for len(w.bufs) <= depth {
		w.bufs = append(w.bufs, nil)
	}
	if w.bufs[depth] == nil {
		w.bufs[depth] = make([]byte, walkBuf)
	}
	return w.bufs[depth]
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

// ancestors returns the directories strictly above the paths of keep (the
// directories that lead to a later operation's destination), computed once
// so the walk asks a map, not every destination, for each directory.
func ancestors(keep map[string]bool) map[string]bool {
	above := map[string]bool{}
	for k := range keep {
		for p := k; p != "/"; {
			p, _ = splitParent(p)
			if above[p] {
				break // and every directory above it
			}
			above[p] = true
		}
	}
	return above
}

// dir walks the directory open at dfd (the view's w.path, depth levels
// below the walk's start); it closes dfd.
func (w *privateWalk) dir(dfd int, depth int) error {
	defer unix.Close(dfd)
	buf, n, more, err := w.list(dfd, depth)
	if err != nil || n < 0 {
		return err
	}
	base := len(w.path)
	defer func() { w.path = w.path[:base] }()
	for {
		if err := w.judge(dfd, buf[:n], base, depth); err != nil {
			return err
		}
		if !more {
			return nil
		}
		// The next piece of a listing longer than the buffer: what the
		// entries judged so far did below (deeper buffers only) left this
		// one and dfd's position alone.
		if n, err = unix.Getdents(dfd, buf); err != nil || n <= 0 {
			return nil // an error: gone meanwhile; what was read is judged
		}
	}
}

// judge judges the entries of list, a piece of the listing of the
// directory dfd, the view's w.path[:base].
func (w *privateWalk) judge(dfd int, list []byte, base, depth int) error {
	for len(list) > 0 {
		name, typ, reclen := direntAt(list)
		if reclen == 0 {
			break
		}
		rec := list[:reclen]
		list = list[reclen:]
		if name < 0 {
			continue // "." and ".."
		}
		if w.proc && depth == 0 && allDigits(rec[direntName:name]) {
			continue // the sandbox's own processes, not the host's
		}
		if w.top && depth == 0 && SkipAtRoot(string(rec[direntName:name])) {
			continue // walked on its own, or world-readable by design
		}
		switch typ {
		case unix.DT_LNK, unix.DT_SOCK, unix.DT_CHR, unix.DT_BLK:
			continue // see entry: never masked by the walk
		}
		w.path = w.path[:base]
		if base > 1 { // below "/"
			w.path = append(w.path, '/')
		}
		w.path = append(w.path, rec[direntName:name]...)
		if w.b.keep[string(w.path)] {
			continue
		}
		if err := w.entry(dfd, &rec[direntName], typ, depth); err != nil {
			return err
		}
	}
	return nil
}

// allDigits reports whether name is a process's directory name in /proc.
func allDigits(name []byte) bool {
	for _, c := range name {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(name) > 0
}

// list starts reading the directory open at dfd into the buffer of its
// depth, or masks it whole (and returns n < 0) when the budget left cannot
// cover its entries. A directory on the way to a later operation's
// destination is always read. It returns the buffer with the listing's
// first n bytes, and whether more is to be read from dfd (a listing
// longer than the buffer: it was counted piece by piece, then dfd
// rewound, so the pieces come again, one at a time, to be judged).
func (w *privateWalk) list(dfd int, depth int) (buf []byte, n int, more bool, err error) {
	keepPath := w.b.keepAbove[string(w.path)]
	buf = w.buf(depth)
	n, err = unix.Getdents(dfd, buf)
	if err != nil || n <= 0 {
		return buf, 0, false, nil // empty, or an error: gone meanwhile
	}
	count := countDirents(buf[:n])
	for {
		if !keepPath && count > w.b.walkLeft {
			if err := w.b.maskDirAt(dfd); err != nil {
				return nil, -1, false, &Error{Op: "hide unread directory", Dst: string(w.path), Err: err}
			}
			w.unread++
			return nil, -1, false, nil
		}
		// Past the first piece the buffer only counts; a read that
		// returns nothing leaves the first piece in it.
		m, err := unix.Getdents(dfd, buf)
		if err != nil || m <= 0 {
			break // the end (an error: gone meanwhile; what was read is judged)
		}
		more = true
		count += countDirents(buf[:m])
	}
	w.b.walkLeft -= count
	if !more {
		return buf, n, false, nil
	}
	if _, err := unix.Seek(dfd, 0, 0); err != nil {
		return nil, -1, false, &Error{Op: "hide private files: rewind", Dst: string(w.path), Err: err}
	}
	if n, err = unix.Getdents(dfd, buf); err != nil || n <= 0 {
		return buf, 0, false, nil
	}
	return buf, n, true, nil
}

// direntName is where a linux_dirent64 record's name starts (after d_ino,
// d_off, d_reclen and d_type).
const direntName = 19

// direntAt reads the linux_dirent64 record at the start of buf: the end of
// its name (the offset of the NUL that ends it; -1 for "." and ".."), its
// type as the directory records it (unix.DT_*; DT_UNKNOWN on filesystems
// that do not say) and its length (0 when buf holds no whole record, or
// one whose name is not NUL-ended).
func direntAt(buf []byte) (nameEnd int, typ uint8, reclen int) {
	if len(buf) < direntName {
		return 0, 0, 0
	}
	reclen = int(buf[16]) | int(buf[17])<<8
	if reclen <= direntName || reclen > len(buf) {
		return 0, 0, 0
	}
	i := bytes.IndexByte(buf[direntName:reclen], 0)
	if i < 0 {
		return 0, 0, 0
	}
	if name := buf[direntName : direntName+i]; i == 0 || string(name) == "." || string(name) == ".." {
		return -1, buf[18], reclen
	}
	return direntName + i, buf[18], reclen
}

// countDirents counts the records in buf, but "." and "..".
func countDirents(buf []byte) int {
	n := 0
	for {
		name, _, reclen := direntAt(buf)
		if reclen == 0 {
			return n
		}
		if name >= 0 {
			n++
		}
		buf = buf[reclen:]
	}
}

// dot is "." for openat, NUL-ended.
var dot = [2]byte{'.', 0}

// fstatatName and openatName are fstatat(2) and openat(2) on a NUL-ended
// name the caller holds (a listing's record), without the copy unix's
// string forms make on every call.
func fstatatName(dfd int, name *byte, st *unix.Stat_t, flags int) error {
	_, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dfd), uintptr(unsafe.Pointer(name)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func openatName(dfd int, name *byte, flags int) (int, error) {
	fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dfd), uintptr(unsafe.Pointer(name)), uintptr(flags), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// entry judges the entry name (NUL-ended) of the directory dfd, the view's
// w.path, by what it is when opened (never following a symlink) and masks
// it, walks it, or leaves it.
func (w *privateWalk) entry(dfd int, name *byte, typ uint8, depth int) error {
	// One fstatat for most entries; an entry is opened only when it is to
	// be masked or entered (a directory, as its listing says, is opened at
	// once), and is then judged again by what was opened (it may have been
	// replaced meanwhile).
	var st unix.Stat_t
	if typ != unix.DT_DIR {
		if err := fstatatName(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
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
	}
	fd, err := openatName(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil // vanished meanwhile
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		lead := w.b.keepAbove[string(w.path)]
		if !lead && w.b.private(&st) {
			return w.vanishedOK(w.b.maskDirAt(fd), "hide private directory")
		}
		if !lead && w.b.walkLeft <= 0 {
			w.unread++
			return w.vanishedOK(w.b.maskDirAt(fd), "hide unread directory")
		}
		rfd, err := openatName(fd, &dot[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
		if err != nil {
			return nil
		}
		return w.dir(rfd, depth+1)
	case unix.S_IFREG, unix.S_IFIFO:
		if w.b.private(&st) {
			return w.vanishedOK(w.b.maskFileAt(fd), "hide private file")
		}
	}
	return nil
}

// vanishedOK turns a mask's failure into the launch's error (naming the
// entry at hand), unless the entry was removed meanwhile (nothing is left
// to hide).
func (w *privateWalk) vanishedOK(err error, op string) error {
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE) {
		return nil
	}
	return &Error{Op: op, Dst: string(w.path), Err: err}
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
