// Package beneath reads files and trees that a sandboxed session could
// have written (its home's bind-backs, the workspace) as hostile input:
// every path is resolved from a descriptor of a trusted root directory
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS), so no symlink,
// "..", or absolute link leads out of that root; nothing but a regular
// file (or, for Walk, a directory) is read; opens never block (a FIFO);
// and everything is bounded: a file by a byte limit checked before it is
// read, a tree by its number of entries, its depth and the bytes of its
// names.
//
// Symlinks that stay inside the root are followed by ReadFile (a
// ~/.claude/settings.json linked to a file next to it is read where it
// leads, so its content is compared); Walk never follows one and records
// the link and its target instead.
//
// internal/install's safefs.go walks with openat2 too, on purpose apart:
// it serves root's writes into a user's tree (create, fchown, rename),
// where every symlink is refused, one component at a time
// (RESOLVE_NO_SYMLINKS); this package serves the user's own launcher
// reading what a session left, where a link inside the tree is the
// user's setup (a settings.json linked to one beside it) and is followed,
// and only leaving the tree is refused. What they share is the openat2
// call and its EAGAIN retry, not worth a package between them.
package beneath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped when the path is not a regular file (a FIFO,
// a device, a socket, a directory).
var ErrNotRegular = errors.New("not a regular file")

// ErrOutside is wrapped when resolving the path would leave the root (a
// symlink leading out of it, an absolute symlink, "..").
var ErrOutside = errors.New("leads out of its tree")

// TooLargeError is returned for a file above the limit; it is not read.
type TooLargeError struct {
	Path        string
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: too large to check (%d bytes, the limit is %d)", e.Path, e.Size, e.Limit)
}

// openRoot opens the trusted root (its own symlinks are the caller's).
func openRoot(root string) (int, error) {
	fd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: root, Err: err}
	}
	return fd, nil
}

// open resolves rel beneath dirfd. nofollow opens a last symlink itself
// (with O_PATH) instead of following it; noSymlinks refuses every one.
func open(dirfd int, rel string, flags int, noSymlinks bool) (int, error) {
	res := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS)
	if noSymlinks {
		res |= unix.RESOLVE_NO_SYMLINKS
	}
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: res}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, rel, how)
		if err == unix.EAGAIN && i < 64 {
			continue
		}
		if err == unix.EXDEV {
			err = ErrOutside
		}
		return fd, err
	}
}

func clean(rel string) (string, error) {
	rel = path.Clean(strings.TrimLeft(rel, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", ErrOutside
	}
	return rel, nil
}

// ReadFile reads the regular file rel below root ("." or "": root itself,
// following its links), at most limit bytes: a
// larger one is refused by its size before any byte is read (a
// *TooLargeError), as is one that grows past the limit while it is read.
func ReadFile(root, rel string, limit int64) ([]byte, error) {
	name := path.Join(root, rel)
	rel, err := clean(rel)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var fd int
	if rel == "." {
		// The root itself (a file whose own entry the session cannot
		// replace, such as a bind-mount target): its links are trusted.
		fd, err = unix.Open(root, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	} else {
		var rfd int
		if rfd, err = openRoot(root); err != nil {
			return nil, err
		}
		fd, err = open(rfd, rel, unix.O_RDONLY|unix.O_NONBLOCK, false)
		unix.Close(rfd)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &os.PathError{Op: "read", Path: name, Err: ErrNotRegular}
	}
	if st.Size > limit {
		return nil, &TooLargeError{Path: name, Size: st.Size, Limit: limit}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Path: name, Size: int64(len(b)), Limit: limit}
	}
	return b, nil
}

// Lstat reports what rel below root is, a last symlink not followed.
func Lstat(root, rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	name := path.Join(root, rel)
	rel, err := clean(rel)
	if err != nil {
		return st, &os.PathError{Op: "lstat", Path: name, Err: err}
	}
	rfd, err := openRoot(root)
	if err != nil {
		return st, err
	}
	defer unix.Close(rfd)
	if rel == "." {
		err = unix.Fstat(rfd, &st)
		return st, err
	}
	fd, err := open(rfd, rel, unix.O_PATH|unix.O_NOFOLLOW, false)
	if err != nil {
		return st, &os.PathError{Op: "lstat", Path: name, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, &os.PathError{Op: "lstat", Path: name, Err: err}
	}
	return st, nil
}

// Readlink reads the symlink rel below root (its parent directories are
// resolved beneath root).
func Readlink(root, rel string) (string, error) {
	name := path.Join(root, rel)
	rel, err := clean(rel)
	if err != nil || rel == "." {
		return "", &os.PathError{Op: "readlink", Path: name, Err: unix.EINVAL}
	}
	rfd, err := openRoot(root)
	if err != nil {
		return "", err
	}
	defer unix.Close(rfd)
	fd, err := open(rfd, rel, unix.O_PATH|unix.O_NOFOLLOW, false)
	if err != nil {
		return "", &os.PathError{Op: "readlink", Path: name, Err: err}
	}
	defer unix.Close(fd)
	return readlinkFD(fd, "")
}

func readlinkFD(fd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Limits bound a Walk.
type Limits struct {
	Entries   int // entries recorded
	Depth     int // directories below the walked one
	NameBytes int // bytes of the recorded names, together
}

// DefaultLimits are what the shadow's watch walks with.
var DefaultLimits = Limits{Entries: 20000, Depth: 32, NameBytes: 4 << 20}

// Walk lists the tree rel below root: every file, symlink and other
// non-directory, by its path relative to the tree, with a string that
// changes when it does (type, size, mode, mtime; a symlink's target).
// Symlinks are never followed, the tree's own path included (a tree that
// is a symlink is an error wrapping ErrOutside or ELOOP), and no
// directory on another filesystem is entered. truncated is set when a
// limit stopped the walk.
func Walk(root, rel string, lim Limits) (entries map[string]string, truncated bool, err error) {
	name := path.Join(root, rel)
	rel, err = clean(rel)
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: name, Err: err}
	}
	rfd, err := openRoot(root)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(rfd)
	fd, err := open(rfd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_NOFOLLOW, true)
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var top unix.Stat_t
	if err := unix.Fstat(fd, &top); err != nil {
		unix.Close(fd)
		return nil, false, err
	}
	w := &walker{lim: lim, out: map[string]string{}, dev: top.Dev}
	w.dir(fd, "", 0)
	return w.out, w.truncated, nil
}

type walker struct {
	lim       Limits
	out       map[string]string
	bytes     int
	dev       uint64
	truncated bool
}

func (w *walker) full() bool {
	if len(w.out) >= w.lim.Entries || w.bytes >= w.lim.NameBytes {
		w.truncated = true
	}
	return w.truncated
}

// dir records the directory fd (closed here), at prefix.
func (w *walker) dir(fd int, prefix string, depth int) {
	f := os.NewFile(uintptr(fd), prefix)
	defer f.Close()
	for !w.full() {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if w.full() {
				return
			}
			p := n
			if prefix != "" {
				p = prefix + "/" + n
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if depth+1 > w.lim.Depth || st.Dev != w.dev {
					w.record(p+"/", "a directory not entered")
					w.truncated = w.truncated || depth+1 > w.lim.Depth
					continue
				}
				sub, err := open(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_NOFOLLOW, true)
				if err == nil {
					w.dir(sub, p, depth+1)
				}
				continue
			}
			v := fmt.Sprintf("%o %d %d.%09d", st.Mode, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				if t, err := readlinkFD(fd, n); err == nil {
					v += " -> " + t
				}
			}
			w.record(p, v)
		}
		if err != nil {
			return
		}
	}
}

func (w *walker) record(p, v string) {
	w.out[p] = v
	w.bytes += len(p) + len(v)
}
