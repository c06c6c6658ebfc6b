package mounts

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Error is a failed mount step, readable on its own:
// "bind /home/u/.cache -> /home/u/.cache: permission denied".
type Error struct {
	Op  string // what was being done, e.g. "bind", "create mount point"
	Src string
	Dst string
	Err error
}

func (e *Error) Error() string {
	switch {
	case e.Src != "" && e.Dst != "":
		return fmt.Sprintf("%s %s -> %s: %v", e.Op, e.Src, e.Dst, e.Err)
	case e.Dst != "":
		return fmt.Sprintf("%s %s: %v", e.Op, e.Dst, e.Err)
	default:
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
}

func (e *Error) Unwrap() error { return e.Err }

// Where the host root and the view under construction live while Setup
// works: it first pivots into a scratch tmpfs so both are reachable by
// plain paths, and the last pivot drops the scratch and the host root.
const (
	oldRoot = "/oldroot"
	newRoot = "/newroot"
)

// stagingDirs are tried in order as the mount point of the scratch tmpfs.
// The mount exists only in the sandbox's own mount namespace.
var stagingDirs = []string{"/tmp", "/run", "/mnt", "/var/tmp", "/media", "/opt", "/srv"}

// Setup applies ops in the current (private) mount namespace and makes the
// result the process's root. Warnings are things that were degraded but not
// refused (the /proc fallback, a -try bind whose source vanished).
func Setup(ops []Op) (warnings []string, err error) {
	if len(ops) == 0 || ops[0].Kind != RootRO {
		return nil, &Error{Op: "setup", Err: errors.New("the first operation must be root-ro")}
	}
	// Nothing we do may propagate back to the host's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return nil, &Error{Op: "make mounts private", Dst: "/", Err: err}
	}
	if err := enterStaging(); err != nil {
		return nil, err
	}
	b := &builder{}
	defer b.close()
	// Host paths (bind sources) resolve from this descriptor as if the
	// host root were "/": an absolute symlink on the host (a ~/.claude
	// linked to a shared directory) leads where it does on the host, not
	// into the staging tmpfs.
	if b.old, err = unix.Open(oldRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, &Error{Op: "open host root", Dst: oldRoot, Err: err}
	}
	b.walkLeft = PrivateWalkBudget
	b.keep = placedDsts(ops)
	for _, op := range ops {
		if err := b.apply(op); err != nil {
			return b.warnings, err
		}
	}
	if err := b.pivot(); err != nil {
		return b.warnings, err
	}
	return b.warnings, nil
}

// placedDsts are the destinations a HidePrivate walk leaves alone: what
// an operation placed there (a tmpfs over the home, a bind made on
// purpose) is the sandbox's own, not the host's view, and a later
// operation's mount point must stay reachable. Masks, socket masks and
// read-only covers are not among them: they find nothing to do under a
// masked directory, which is as good.
func placedDsts(ops []Op) map[string]bool {
	m := map[string]bool{}
	for _, op := range ops {
		switch op.Kind {
		case RootRO, Mask, MaskSocket, ReadOnly, HidePrivate, SocketDir:
		default:
			m[op.Dst] = true
		}
	}
	return m
}

// enterStaging mounts a scratch tmpfs and pivots into it, leaving the host
// root at /oldroot and an empty /newroot to build on.
func enterStaging() error {
	var lastErr error
	for _, dir := range stagingDirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
			lastErr = &Error{Op: "mount scratch tmpfs", Dst: dir, Err: err}
			continue
		}
		for _, d := range []string{oldRoot, newRoot} {
			if err := os.Mkdir(dir+d, 0o700); err != nil {
				return &Error{Op: "create", Dst: dir + d, Err: err}
			}
		}
		if err := unix.Chdir(dir); err != nil {
			return &Error{Op: "chdir", Dst: dir, Err: err}
		}
		if err := unix.PivotRoot(".", "."+oldRoot); err != nil {
			return &Error{Op: "pivot_root into scratch", Dst: dir, Err: err}
		}
		if err := unix.Chdir("/"); err != nil {
			return &Error{Op: "chdir", Dst: "/", Err: err}
		}
		return nil
	}
	if lastErr == nil {
		lastErr = &Error{Op: "setup", Err: fmt.Errorf("none of %s exists to hold a scratch tmpfs", strings.Join(stagingDirs, ", "))}
	}
	return lastErr
}

type builder struct {
	old      int // O_PATH fd of the host root (/oldroot while staging)
	root     int // O_PATH fd of /newroot once the root is attached
	warnings []string
	files    int    // generated files written so far
	overlays int    // overlay layers made so far
	devDst   string // the private /dev's path (read-only once made)
	// For HidePrivate: the destinations of the operations after it, the
	// budget its walks have left, and the sandbox's identity.
	keep         map[string]bool
	keepResolved bool            // keep holds the destinations' resolved paths too
	keepAbove    map[string]bool // the directories above keep's paths
	walk         *privateWalk    // the walker, its buffers reused by every walk
	walkLeft     int
	me           uint32
	groups       []uint32
}

func (b *builder) close() {
	if b.root > 0 {
		unix.Close(b.root)
	}
	if b.old > 0 {
		unix.Close(b.old)
	}
}

// WarnProcFallback begins the warning of a sandbox given the host's /proc
// read-only because a fresh one was refused (claude-sandbox's doctor and
// launch hints look for it).
const WarnProcFallback = "a fresh /proc was refused"

func (b *builder) warnf(format string, a ...any) {
	b.warnings = append(b.warnings, fmt.Sprintf(format, a...))
}

func (b *builder) apply(op Op) error {
	switch op.Kind {
	case RootRO:
		return b.rootRO()
	case Dev:
		return b.dev(op.Dst, op.Size)
	case Cgroup:
		return b.cgroup(op.Dst)
	case Proc:
		return b.proc(op.Dst)
	case Tmpfs:
		return b.tmpfs(op.Dst, uint32(op.Mode), op.Size, 0, "tmpfs")
	case Bind, ROBind:
		return b.bind(op)
	case DevBind:
		return b.devBind(op)
	case Mask:
		return b.mask(op.Dst)
	case File:
		return b.file(op)
	case ReadOnly:
		return b.readOnly(op.Dst)
	case Overlay:
		return b.overlay(op)
	case Symlink, MaskSocket, SocketDir:
		return b.applyMore(op)
	case HidePrivate:
		return b.hidePrivate(op.Dst)
	}
	return &Error{Op: "setup", Err: fmt.Errorf("unknown operation %q", op.Kind)}
}

func (b *builder) rootRO() error {
	// No device node of the host's tree opens through the clone: the
	// sandbox's /dev is its own, and /dev/null masks are binds of their own.
	fd, err := cloneAt(b.old, true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return &Error{Op: "bind read-only", Src: "/", Dst: "/", Err: err}
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return &Error{Op: "attach read-only root", Dst: "/", Err: err}
	}
	b.root, err = unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &Error{Op: "open new root", Err: err}
	}
	return nil
}

// cloneTree makes a detached copy of the mount at path (and, when
// recursive, every mount below it), optionally read-only throughout.
func cloneTree(path string, recursive, readOnly bool) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC)
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, flags)
	if err != nil {
		return -1, err
	}
	if readOnly {
		attrFlags := unix.AT_EMPTY_PATH
		if recursive {
			attrFlags |= unix.AT_RECURSIVE
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}
		if err := unix.MountSetattr(fd, "", uint(attrFlags), attr); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("make read-only: %w", err)
		}
	}
	return fd, nil
}

// cloneAt makes a detached copy of the mount at the O_PATH descriptor fd
// (and, when recursive, every mount below it) and sets the attributes set
// on all of it.
func cloneAt(fd int, recursive bool, set uint64) (int, error) {
	flags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	attrFlags := uint(unix.AT_EMPTY_PATH)
	if recursive {
		flags |= unix.AT_RECURSIVE
		attrFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(fd, "", flags)
	if err != nil {
		return -1, err
	}
	if set != 0 {
		if err := unix.MountSetattr(tree, "", attrFlags, &unix.MountAttr{Attr_set: set}); err != nil {
			unix.Close(tree)
			return -1, fmt.Errorf("set mount attributes: %w", err)
		}
	}
	return tree, nil
}

// newFS creates a detached mount of a fresh filesystem.
func newFS(fstype string, opts map[string]string, attrs int) (int, error) {
	fsfd, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fsfd)
	for k, v := range opts {
		if v == "" {
			err = unix.FsconfigSetFlag(fsfd, k)
		} else {
			err = unix.FsconfigSetString(fsfd, k, v)
		}
		if err != nil {
			return -1, fmt.Errorf("option %s=%s: %w", k, v, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, err
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attrs)
}

// attach moves the detached mount fd onto dst inside the new root.
func (b *builder) attach(fd int, dst string) error {
	t, err := b.openIn(dst)
	if err != nil {
		return err
	}
	defer unix.Close(t)
	return unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// openIn opens dst as an O_PATH fd, resolving every component (symlinks
// included) as if the new root were "/": nothing can point outside it.
func (b *builder) openIn(dst string) (int, error) {
	return resolveIn(b.root, dst, unix.O_PATH)
}

// resolveIn is the one resolver for both trees: it opens the absolute path
// p below the directory root (the host root for sources, the new root for
// destinations) with openat2(RESOLVE_IN_ROOT), so every symlink, absolute
// or "..", is resolved as if root were "/" and never leaves it, and a
// magic link (/proc/self/root and the like) is refused.
func resolveIn(root int, p string, flags int) (int, error) {
	return resolveInHow(root, p, flags, 0)
}

// resolveInHow is resolveIn with more RESOLVE_ flags (RESOLVE_NO_SYMLINKS).
func resolveInHow(root int, p string, flags int, resolve uint64) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | resolve,
	}
	// EAGAIN: a rename or mount anywhere raced a ".." step; the kernel
	// asks for a retry rather than risk an escape.
	for i := 0; ; i++ {
		fd, err := unix.Openat2(root, rel, how)
		if err != unix.EAGAIN || i == 64 {
			return fd, err
		}
	}
}

// statIn reports what dst is inside the new root; ok is false when it does
// not exist.
func (b *builder) statIn(dst string) (st unix.Stat_t, ok bool, err error) {
	fd, err := b.openIn(dst)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, false, err
	}
	return st, true, nil
}

// ensure makes dst exist inside the new root as a directory (dir) or an
// empty file, creating missing parents as directories.
func (b *builder) ensure(dst string, dir bool) error {
	st, ok, err := b.statIn(dst)
	if err != nil {
		return err
	}
	if ok {
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if isDir != dir {
			if dir {
				return errors.New("destination exists and is not a directory")
			}
			return errors.New("destination is a directory but the source is not")
		}
		return nil
	}
	parent, name := splitParent(dst)
	if err := b.ensure(parent, true); err != nil {
		return err
	}
	pfd, err := b.openDirIn(parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if dir {
		err = unix.Mkdirat(pfd, name, 0o755)
	} else {
		var fd int
		fd, err = unix.Openat(pfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
		if err == nil {
			unix.Close(fd)
		}
	}
	if errors.Is(err, unix.EROFS) {
		return fmt.Errorf("cannot create it: %s is on the read-only host view (mount a --tmpfs over a parent, or create it on the host)", parent)
	}
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

func (b *builder) openDirIn(dst string) (int, error) {
	return resolveIn(b.root, dst, unix.O_RDONLY|unix.O_DIRECTORY)
}

func splitParent(p string) (string, string) {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/", p[i+1:]
	}
	return p[:i], p[i+1:]
}

// tmpfs mounts a tmpfs at dst; size (bytes) bounds its contents, 0 leaves
// the kernel's default.
func (b *builder) tmpfs(dst string, mode uint32, size int64, attrs int, what string) error {
	if err := b.ensure(dst, true); err != nil {
		return &Error{Op: "create mount point for " + what, Dst: dst, Err: err}
	}
	opts := map[string]string{"mode": fmt.Sprintf("%04o", mode)}
	if size > 0 {
		opts["size"] = fmt.Sprint(size)
	}
	fd, err := newFS("tmpfs", opts, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|attrs)
	if err != nil {
		return &Error{Op: "mount " + what, Dst: dst, Err: err}
	}
	defer unix.Close(fd)
	if err := b.attach(fd, dst); err != nil {
		return &Error{Op: "mount " + what, Dst: dst, Err: err}
	}
	return nil
}

func (b *builder) bind(op Op) error {
	var src int
	var err error
	if op.Exact {
		src, err = resolveInHow(b.old, op.Src, unix.O_PATH, unix.RESOLVE_NO_SYMLINKS)
	} else {
		src, err = resolveIn(b.old, op.Src, unix.O_PATH)
	}
	if err != nil {
		if op.Optional && errors.Is(err, unix.ENOENT) {
			b.warnf("skipped %s: the source disappeared", op)
			return nil
		}
		if op.Exact && errors.Is(err, unix.ELOOP) {
			err = fmt.Errorf("a symlink appeared in the path since the launch was planned (something changed it meanwhile); nothing was bound: start again, and look at what replaced a directory with a link: %w", err)
		}
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	if err := b.ensure(op.Dst, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return &Error{Op: "create mount point for " + string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	// A read-only bind keeps device nodes usable (the /dev/null binds over
	// credential files); a writable one opens none.
	set := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if op.Kind == ROBind {
		set = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID
	}
	fd, err := cloneAt(src, true, set)
	if err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	defer unix.Close(fd)
	if err := b.attach(fd, op.Dst); err != nil {
		return &Error{Op: string(op.Kind), Src: op.Src, Dst: op.Dst, Err: err}
	}
	return nil
}

func (b *builder) mask(dst string) error {
	st, ok, err := b.statIn(dst)
	if err != nil {
		return &Error{Op: "mask", Dst: dst, Err: err}
	}
	if !ok {
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return b.tmpfs(dst, 0o755, maskSize, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOEXEC, "mask")
	}
	fd, err := cloneTree(oldRoot+"/dev/null", false, true)
	if err != nil {
		return &Error{Op: "mask", Src: "/dev/null", Dst: dst, Err: err}
	}
	defer unix.Close(fd)
	if err := b.attach(fd, dst); err != nil {
		return &Error{Op: "mask", Src: "/dev/null", Dst: dst, Err: err}
	}
	return nil
}

// devNodes are bound from the host's /dev into the private one. Device
// nodes cannot be created in a user namespace, so bind mounts stand in.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// maskSize is the size of the empty read-only tmpfs a mask is: nothing is
// ever written there.
const maskSize = 4096

// devSize bounds the /dev tmpfs itself (read-only once made; it holds only
// mount points and links).
const devSize = 64 << 10

func (b *builder) dev(dst string, shmSize int64) error {
	if err := b.tmpfs(dst, 0o755, devSize, 0, "/dev tmpfs"); err != nil {
		return err
	}
	for _, n := range devNodes {
		p := dst + "/" + n
		if err := b.ensure(p, false); err != nil {
			return &Error{Op: "create", Dst: p, Err: err}
		}
		// Read-only: the nodes are the host's own inodes, and a root
		// caller's uid 0 owns them (chmod 000 /dev/null would break the
		// host for every user). A read-only mount refuses chmod, chown
		// and utimes; reading and writing the device itself still work.
		fd, err := cloneTree(oldRoot+"/dev/"+n, false, true)
		if err != nil {
			return &Error{Op: "bind device", Src: "/dev/" + n, Dst: p, Err: err}
		}
		err = b.attach(fd, p)
		unix.Close(fd)
		if err != nil {
			return &Error{Op: "bind device", Src: "/dev/" + n, Dst: p, Err: err}
		}
	}
	if err := b.ensure(dst+"/pts", true); err != nil {
		return &Error{Op: "create", Dst: dst + "/pts", Err: err}
	}
	fd, err := newFS("devpts", map[string]string{"newinstance": "", "ptmxmode": "0666", "mode": "0620"}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return &Error{Op: "mount devpts", Dst: dst + "/pts", Err: err}
	}
	err = b.attach(fd, dst+"/pts")
	unix.Close(fd)
	if err != nil {
		return &Error{Op: "mount devpts", Dst: dst + "/pts", Err: err}
	}
	if err := b.tmpfs(dst+"/shm", 0o1777, shmSize, 0, "/dev/shm"); err != nil {
		return err
	}
	dfd, err := b.openDirIn(dst)
	if err != nil {
		return &Error{Op: "open", Dst: dst, Err: err}
	}
	defer unix.Close(dfd)
	links := [][2]string{{"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}}
	for _, l := range links {
		if err := unix.Symlinkat(l[1], dfd, l[0]); err != nil {
			return &Error{Op: "symlink", Dst: dst + "/" + l[0], Err: err}
		}
	}
	// The tmpfs itself is read-only from here on; pts and shm are separate
	// mounts and stay writable.
	t, err := b.openIn(dst)
	if err != nil {
		return &Error{Op: "open", Dst: dst, Err: err}
	}
	defer unix.Close(t)
	if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return &Error{Op: "make read-only", Dst: dst, Err: err}
	}
	b.devDst = dst
	return nil
}

func (b *builder) proc(dst string) error {
	fd, err := newFS("proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err == nil {
		err = b.attach(fd, dst)
		unix.Close(fd)
		if err == nil {
			return nil
		}
	}
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EBUSY) {
		return &Error{Op: "mount proc", Dst: dst, Err: err}
	}
	// A container that over-mounts parts of its /proc makes the kernel
	// refuse a new procfs in a user namespace. Fall back to the host's,
	// read-only: host processes become visible, which is worth a warning.
	b.warnf(WarnProcFallback+" (%v); bound the host's /proc read-only instead: host processes are visible inside", err)
	rfd, cerr := cloneTree(oldRoot+"/proc", true, true)
	if cerr != nil {
		return &Error{Op: "bind /proc read-only", Src: "/proc", Dst: dst, Err: cerr}
	}
	defer unix.Close(rfd)
	if err := b.attach(rfd, dst); err != nil {
		return &Error{Op: "bind /proc read-only", Src: "/proc", Dst: dst, Err: err}
	}
	return nil
}

// pivot makes the new root "/" and detaches the scratch tmpfs together with
// the host root under it, so no path leads back to the host.
func (b *builder) pivot() error {
	// The staging root, held open so that after pivot_root(".", ".") the
	// unmount below names it for certain: the kernel does not promise
	// where the working directory is left (runc does the same).
	staging, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &Error{Op: "open staging root", Err: err}
	}
	defer unix.Close(staging)
	if err := unix.Fchdir(b.root); err != nil {
		return &Error{Op: "chdir", Dst: newRoot, Err: err}
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return &Error{Op: "pivot_root", Dst: newRoot, Err: err}
	}
	if err := unix.Fchdir(staging); err != nil {
		return &Error{Op: "chdir to the old root", Err: err}
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return &Error{Op: "detach old root", Err: err}
	}
	if err := unix.Chdir("/"); err != nil {
		return &Error{Op: "chdir", Dst: "/", Err: err}
	}
	return nil
}

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// file writes op.Data into the scratch tmpfs (which lives only in this
// mount namespace) and binds it read-only at op.Dst. The scratch is
// detached at the end, but a bind keeps its file alive.
func (b *builder) file(op Op) error {
	b.files++
	scratch := fmt.Sprintf("/file-%d", b.files)
	mode := os.FileMode(op.Mode)
	if mode == 0 {
		mode = 0o644
	}
	if err := os.WriteFile(scratch, []byte(op.Data), mode); err != nil {
		return &Error{Op: "write generated file", Dst: op.Dst, Err: unwrap(err)}
	}
	if err := os.Chmod(scratch, mode); err != nil {
		return &Error{Op: "write generated file", Dst: op.Dst, Err: unwrap(err)}
	}
	if err := b.ensure(op.Dst, false); err != nil {
		return &Error{Op: "create mount point for file", Dst: op.Dst, Err: err}
	}
	fd, err := cloneTree(scratch, false, true)
	if err != nil {
		return &Error{Op: "file", Dst: op.Dst, Err: err}
	}
	defer unix.Close(fd)
	if err := b.attach(fd, op.Dst); err != nil {
		return &Error{Op: "file", Dst: op.Dst, Err: err}
	}
	return nil
}
