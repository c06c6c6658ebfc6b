package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The installer runs as root but writes into trees that someone else can
// change: the invoking user's home directory (and, through its bind-backs,
// the sandbox: ~/.claude is writable inside) and the --shared-config
// directory. A symlink planted there would redirect a root write or chown
// anywhere (a ~/.claude/commands pointing at /etc/cron.d). So every step in
// such a tree goes from a directory descriptor, one component at a time,
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a symlink on the way is
// refused, never followed; a file is created under a fresh name (O_EXCL)
// and renamed into place without replacing anything; ownership is set with
// fchown on the descriptor of what was just made. The same refusal of
// symlinked targets as moby/sys's atomicwriter, for the same reason.

// ErrSymlinkRefused is wrapped by every refusal of a symlink.
var ErrSymlinkRefused = errors.New("is a symlink, which install (running as root) does not follow there")

// Dir is an open directory in such a tree.
type Dir struct {
	fd   int
	path string // for messages
}

func (d *Dir) Close() { unix.Close(d.fd) }

// Path is the directory's path, for messages.
func (d *Dir) Path() string { return d.path }

// openTrusted opens a directory whose path root decided (the home from the
// password database): symlinks in it are the administrator's.
func OpenTrusted(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: path}, nil
}

// openNoSymlinks opens the absolute directory path refusing a symlink in
// any component (for a path that may lie in a user's tree, such as
// --shared-config), creating missing components owned uid:gid when create
// is set. created lists the directories made.
func OpenNoSymlinks(path string, mode uint32, uid, gid int, create bool) (*Dir, []string, error) {
	root, err := OpenTrusted("/")
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	return root.Walk(strings.TrimPrefix(filepath.Clean(path), "/"), mode, uid, gid, create)
}

// walk opens the directory rel below d, one component at a time, refusing
// symlinks, and (when create is set) making missing components with mode,
// owned uid:gid. created lists the directories made, as paths.
func (d *Dir) Walk(rel string, mode uint32, uid, gid int, create bool) (*Dir, []string, error) {
	cur, err := unix.Dup(d.fd)
	if err != nil {
		return nil, nil, err
	}
	unix.CloseOnExec(cur)
	path := d.path
	var created []string
	for _, name := range strings.Split(rel, "/") {
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			unix.Close(cur)
			return nil, created, fmt.Errorf("%s: a path with \"..\"", filepath.Join(path, rel))
		}
		path = filepath.Join(path, name)
		next, err := openBeneath(cur, name, unix.O_DIRECTORY|unix.O_RDONLY)
		if errors.Is(err, unix.ENOENT) && create {
			made := false
			if err = unix.Mkdirat(cur, name, mode); err == nil {
				made = true
				created = append(created, path)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openBeneath(cur, name, unix.O_DIRECTORY|unix.O_RDONLY)
				if err == nil && made {
					if err = unix.Fchown(next, uid, gid); err != nil {
						unix.Close(next)
					}
				}
			}
		}
		if err != nil {
			err = describe(cur, name, path, err)
			unix.Close(cur)
			return nil, created, err
		}
		unix.Close(cur)
		cur = next
	}
	return &Dir{fd: cur, path: path}, created, nil
}

// openBeneath opens the single name in dirfd, refusing a symlink. The
// open never blocks (O_NONBLOCK: a FIFO planted where a file was expected
// would hold root's open, or its read, for ever) and what it opened is
// looked at before it is returned: anything but a regular file or a
// directory is refused (errNotRegular), so no caller reads a FIFO or a
// device. The descriptor stays non-blocking, which a regular file or a
// directory ignores.
func openBeneath(dirfd int, name string, flags int) (int, error) {
	var st unix.Stat_t
	return openStat(dirfd, name, flags, &st, false)
}

// openRegular opens the regular file name in dirfd as openBeneath does,
// refusing a directory too.
func openRegular(dirfd int, name string, flags int) (int, error) {
	var st unix.Stat_t
	return openStat(dirfd, name, flags, &st, true)
}

// openStat is openBeneath (openRegular when regular is set), leaving in st
// what it opened.
func openStat(dirfd int, name string, flags int, st *unix.Stat_t, regular bool) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, name, how)
		if err == unix.EAGAIN && i < 64 {
			continue
		}
		if err != nil {
			return fd, err
		}
		if err := unix.Fstat(fd, st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && (regular || t != unix.S_IFDIR) {
			unix.Close(fd)
			return -1, errNotRegular
		}
		return fd, nil
	}
}

// errNotRegular is openBeneath's refusal of a FIFO, socket or device.
var errNotRegular = errors.New("is not a regular file or directory (a FIFO, a socket or a device), which install (running as root) does not open")

// describe turns an errno from a step on name in dirfd into a message
// naming the path (a symlink gives ELOOP or, asked for a directory,
// ENOTDIR: both say "symlink").
func describe(dirfd int, name, path string, err error) error {
	var st unix.Stat_t
	if errors.Is(err, unix.ELOOP) || (unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK) {
		return fmt.Errorf("%s %w", path, ErrSymlinkRefused)
	}
	if errors.Is(err, errNotRegular) || (errors.Is(err, unix.ENXIO) && unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFDIR) {
		// (ENXIO: a FIFO opened to write without a reader.)
		return fmt.Errorf("%s %w", path, errNotRegular)
	}
	if errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("%s is not a directory", path)
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

// lstat reports what name in d is, without following it.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// Create writes data as a new file name in d, atomically, owned uid:gid
// with mode. An existing name (a symlink included) is left alone: the
// error is fs.ErrExist.
func (d *Dir) Create(name string, data []byte, mode uint32, uid, gid int) error {
	return d.WriteAtomic(name, bytes.NewReader(data), mode, uid, gid, false)
}

// tmpSeq numbers WriteAtomic's temporary files within the process.
var tmpSeq atomic.Uint64

// WriteAtomic is the installer's one file writer: it writes what r holds
// to a fresh temporary name in d (O_CREAT|O_EXCL|O_NOFOLLOW, so nothing
// planted there is opened), sets mode and, when uid >= 0, the owner on
// that descriptor, syncs it, and renames it to name, then syncs d. With
// replace unset an existing name (a symlink too) is kept and the error
// is fs.ErrExist; with replace set an existing name is replaced, never
// written through: a symlink there is replaced by the file (its target
// is untouched). A failure leaves no temporary file.
func (d *Dir) WriteAtomic(name string, r io.Reader, mode uint32, uid, gid int, replace bool) error {
	path := filepath.Join(d.path, name)
	// Unique within the process too: two writers of one name must not
	// share (and unlink) each other's temporary file.
	tmp := fmt.Sprintf(".%s.new-%d-%d", name, os.Getpid(), tmpSeq.Add(1))
	_ = unix.Unlinkat(d.fd, tmp, 0) // a stale one from a killed run of ours
	fd, err := unix.Openat(d.fd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return describe(d.fd, tmp, filepath.Join(d.path, tmp), err)
	}
	f := os.NewFile(uintptr(fd), path)
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(os.FileMode(mode))
	}
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if replace {
			err = unix.Renameat(d.fd, tmp, d.fd, name)
		} else {
			err = unix.Renameat2(d.fd, tmp, d.fd, name, unix.RENAME_NOREPLACE)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
				// A filesystem without RENAME_NOREPLACE: a hard link also
				// refuses an existing name.
				if err = unix.Linkat(d.fd, tmp, d.fd, name, 0); err == nil {
					_ = unix.Unlinkat(d.fd, tmp, 0)
				}
			}
		}
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
		return &fs.PathError{Op: "write", Path: path, Err: err}
	}
	_ = unix.Fsync(d.fd)
	return nil
}

// WriteFile writes what r holds to path with mode, atomically, by
// [Dir.WriteAtomic] in path's directory: an existing file is replaced
// (a symlink at path too, never written through), and a failure leaves
// the old file and no temporary one. The directory is opened as path
// names it, symlinks followed: for a tree the caller trusts (an
// administrator's path, the caller's own workspace). The directory must
// exist.
func WriteFile(path string, r io.Reader, mode uint32) error {
	d, err := OpenTrusted(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteAtomic(filepath.Base(path), r, mode, -1, -1, true)
}

// mkdir makes the directory name in d, owned uid:gid.
func (d *Dir) Mkdir(name string, mode uint32, uid, gid int) error {
	sub, _, err := d.Walk(name, mode, uid, gid, true)
	if err != nil {
		return err
	}
	sub.Close()
	return nil
}

// seedEmpty writes data into the existing regular file name in d when it
// is still empty, refusing a symlink.
func (d *Dir) SeedEmpty(name, data string) error {
	path := filepath.Join(d.path, name)
	fd, err := openRegular(d.fd, name, unix.O_WRONLY)
	if err != nil {
		return describe(d.fd, name, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() != 0 {
		return err
	}
	_, err = f.WriteString(data)
	return err
}

// readFile reads the regular file name in d, refusing a symlink, a FIFO
// and anything else but a regular file.
func (d *Dir) ReadFile(name string) ([]byte, error) {
	fd, err := openRegular(d.fd, name, unix.O_RDONLY)
	if err != nil {
		return nil, describe(d.fd, name, filepath.Join(d.path, name), err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, name))
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// renameNoReplace renames without replacing an existing name, where the
// filesystem can promise that (elsewhere, a plain rename after the
// caller's check).
func renameNoReplace(olddir int, old string, newdir int, new string) error {
	err := unix.Renameat2(olddir, old, newdir, new, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		err = unix.Renameat(olddir, old, newdir, new)
	}
	return err
}
