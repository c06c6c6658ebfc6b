package install

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// linkShared points ~/.claude and ~/.claude.json of the invoking user
// at a shared, host-mounted directory (I6), so Claude's state (login,
// memories, history) survives container rebuilds. For each of the two:
//   - already a link to the shared copy: nothing to do;
//   - only the home copy exists: it is adopted (moved into the shared dir);
//   - both exist: the home copy is backed up next to itself (.bak-TIME),
//     then replaced by a link to the shared one;
//   - neither exists: the shared one is seeded (an empty directory, or
//     an empty JSON object);
//   - a link elsewhere: re-pointed.
//
// The links' target is the shared path as the system sees it; the
// directory itself is found under the layout's root.
func (r *run) linkShared() error {
	l, o, j := r.l, r.o, r.j
	shared := filepath.Clean(o.Shared)
	sharedAt := l.P(shared)
	home := l.UserHome()
	uid, gid := o.UID, o.GID
	// Root works in two trees the user can change (safefs.go): the shared
	// directory, reached from the root (checkShared refused a symlink
	// above it) refusing every symlink (its missing
	// parents are made root's, itself the user's), and the home, whose
	// own path is the password database's; below both nothing is followed.
	parent := filepath.Dir(sharedAt)
	rel, err := filepath.Rel(l.Root, parent)
	if err != nil || !within(l.Root, parent) {
		return fmt.Errorf("--shared-config %s: not below %s", shared, l.Root)
	}
	pd, err := j.mkdirBeneath(l.Root, rel, 0o755, -1, -1) // the installer's own (root's)
	if err != nil {
		return fmt.Errorf("--shared-config %s: %w; give the real path of the directory", shared, err)
	}
	if pd != nil {
		pd.Close()
	}
	sd, err := j.mkdirBeneath(parent, filepath.Base(sharedAt), 0o700, uid, gid)
	if err != nil {
		return fmt.Errorf("--shared-config %s: %w; give the real path of the directory", shared, err)
	}
	if sd != nil {
		defer sd.Close()
		var st unix.Stat_t
		if err := unix.Fstat(sd.fd, &st); err != nil {
			return &fs.PathError{Op: "stat", Path: sharedAt, Err: err}
		}
		if int(st.Uid) != uid || int(st.Gid) != gid {
			if !j.Dry {
				if err := unix.Fchown(sd.fd, uid, gid); err != nil {
					return &fs.PathError{Op: "chown", Path: sharedAt, Err: err}
				}
			}
			j.add(Change{Kind: Chowned, Path: sharedAt, UID: uid, GID: gid, OldUID: int(st.Uid), OldGID: int(st.Gid), Base: parent, Note: "the shared directory, the user's"})
		}
	}
	hd, err := OpenTrusted(home)
	if err != nil {
		return err
	}
	defer hd.Close()
	lstat := func(d *Dir, name string) (unix.Stat_t, error) {
		if d == nil {
			return unix.Stat_t{}, unix.ENOENT
		}
		return d.Lstat(name)
	}
	for _, name := range []string{".claude", ".claude.json"} {
		h, s := filepath.Join(home, name), filepath.Join(shared, name)
		sp := filepath.Join(sharedAt, name)
		if t, err := readlinkAt(hd.fd, name); err == nil && t == s {
			continue
		}
		sst, serr := lstat(sd, name)
		if serr == nil && sst.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s %w: replace it with the real file or directory", sp, ErrSymlinkRefused)
		}
		hst, herr := hd.Lstat(name)
		if herr != nil && j.dryDirs[h] {
			// A dry run's earlier step (the command) made it.
			hst, herr = unix.Stat_t{Mode: unix.S_IFDIR}, nil
		}
		switch {
		case herr == nil && hst.Mode&unix.S_IFMT == unix.S_IFLNK:
			bak := backupName(h)
			if !j.Dry {
				if err := unix.Renameat(hd.fd, name, hd.fd, filepath.Base(bak)); err != nil {
					return &fs.PathError{Op: "remove", Path: h, Err: err}
				}
			}
			j.add(Change{Kind: Removed, Path: h, Backup: bak, Base: home, Note: "a link elsewhere, re-pointed"})
			if serr != nil {
				if err := r.seed(sd, sharedAt, name); err != nil {
					return err
				}
			}
			r.say("re-pointed %s to %s", h, s)
		case herr == nil && serr == nil:
			bak := name + ".bak-" + strconv.FormatInt(time.Now().Unix(), 10)
			if !j.Dry {
				if err := renameNoReplace(hd.fd, name, hd.fd, bak); err != nil {
					return &fs.PathError{Op: "back up", Path: h, Err: err}
				}
			}
			j.add(Change{Kind: Moved, Path: filepath.Join(home, bak), From: h, Base: home, FromBase: home, Note: "the home copy, backed up: the shared one is used"})
			r.say("backed up %s to %s; using the shared %s", h, filepath.Join(home, bak), s)
		case herr == nil:
			if err := r.adopt(hd, sd, sharedAt, name); err != nil {
				return err
			}
			r.say("adopted %s into %s", h, s)
		default:
			if serr != nil {
				if err := r.seed(sd, sharedAt, name); err != nil {
					return err
				}
				r.say("seeded %s", s)
			}
		}
		if !j.Dry {
			if err := unix.Symlinkat(s, hd.fd, name); err != nil {
				return &fs.PathError{Op: "link", Path: h, Err: err}
			}
		}
		j.add(Change{Kind: CreatedLink, Path: h, Target: s, Base: home, Note: "to the shared state"})
		if !j.Dry {
			if err := unix.Fchownat(hd.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return &fs.PathError{Op: "chown", Path: h, Err: err}
			}
		}
	}
	return nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// seed creates name in the shared directory sd (at sharedAt; nil in a
// dry run that only recorded it), owned by the user: an empty directory,
// or an empty JSON object.
func (r *run) seed(sd *Dir, sharedAt, name string) error {
	if strings.HasSuffix(name, ".json") {
		return r.j.createBeneath(sd, sharedAt, sharedAt, name, []byte("{}\n"), 0o600, r.o.UID, r.o.GID, "seeded")
	}
	if !r.j.Dry {
		if err := sd.Mkdir(name, 0o700, r.o.UID, r.o.GID); err != nil {
			return err
		}
	}
	r.j.add(Change{Kind: CreatedDir, Path: filepath.Join(sharedAt, name), Mode: 0o700, Base: sharedAt, Note: "seeded"})
	return nil
}

// adopt moves name from the home into the shared directory: a rename, or,
// across filesystems (the shared dir is often a host mount), a copy that
// keeps symlinks as symlinks, then the home copy renamed away until the
// end.
func (r *run) adopt(hd, sd *Dir, sharedAt, name string) error {
	j := r.j
	from, to := filepath.Join(hd.path, name), filepath.Join(sharedAt, name)
	if j.Dry {
		j.add(Change{Kind: Moved, Path: to, From: from, Base: sharedAt, FromBase: hd.path, Note: "adopted into the shared directory"})
		return nil
	}
	err := adoptRename(hd.fd, name, sd.fd, name)
	if err == nil {
		j.add(Change{Kind: Moved, Path: to, From: from, Base: sharedAt, FromBase: hd.path, Note: "adopted into the shared directory"})
		return nil
	}
	if !errors.Is(err, unix.EXDEV) {
		return &fs.PathError{Op: "move", Path: from, Err: err}
	}
	if testHookBeforeCopy != nil {
		testHookBeforeCopy(from, to)
	}
	// Root copies between two trees the user can change while it runs:
	// descriptors only, nothing followed (copyAt).
	if err := copyAt(hd.fd, sd.fd, name, from, to, 0, r.warn); err != nil {
		if rerr := removeAllAt(sd.fd, name); rerr != nil && !errors.Is(rerr, unix.ENOENT) {
			err = fmt.Errorf("%w; and removing the partial copy failed: %v", err, rerr)
		}
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	j.add(Change{Kind: CopiedTree, Path: to, Base: sharedAt, Note: "adopted into the shared directory (a copy: another filesystem)"})
	bak := backupName(from)
	if err := unix.Renameat(hd.fd, name, hd.fd, filepath.Base(bak)); err != nil {
		return &fs.PathError{Op: "remove", Path: from, Err: err}
	}
	j.add(Change{Kind: Removed, Path: from, Backup: bak, Base: hd.path, Note: "the adopted home copy"})
	return nil
}

// copyAt copies name from the directory src into the directory dst, as
// cp -a did but through descriptors only: the user can change both trees
// while root copies (the home, the shared directory they own), so every
// entry is looked at and opened from its directory's descriptor without
// following a symlink (openat2 beneath, no symlinks, non-blocking), every
// new entry is made with O_EXCL (mkdirat, symlinkat, O_CREAT|O_EXCL|
// O_NOFOLLOW: a name planted there fails the copy, it is never written
// through), and owner, mode and times are set on the descriptor of what
// was just made (a symlink's by fchownat/utimensat without following).
// Owners are kept (a file root owns stays root's), set-user/group-ID bits
// are not. Anything but a file, directory or symlink (a FIFO, a socket)
// is left out with a warning. from and to name the two for messages.
func copyAt(src, dst int, name, from, to string, depth int, warn func(string, ...any)) error {
	if depth > 256 {
		return fmt.Errorf("%s: more than 256 directories deep", from)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: from, Err: err}
	}
	if testHookCopyEntry != nil {
		testHookCopyEntry(from, to)
	}
	times := func(st *unix.Stat_t) []unix.Timespec { return []unix.Timespec{st.Atim, st.Mtim} }
	perm := func(st *unix.Stat_t) uint32 { return st.Mode & 0o1777 }
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := readlinkAt(src, name)
		if err != nil {
			return &fs.PathError{Op: "readlink", Path: from, Err: err}
		}
		if err := unix.Symlinkat(target, dst, name); err != nil {
			return &fs.PathError{Op: "link", Path: to, Err: err}
		}
		if err := unix.Fchownat(dst, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "chown", Path: to, Err: err}
		}
		_ = unix.UtimesNanoAt(dst, name, times(&st), unix.AT_SYMLINK_NOFOLLOW)
		return nil
	case unix.S_IFREG:
		in, err := openStat(src, name, unix.O_RDONLY, &st, true)
		if err != nil {
			return describe(src, name, from, err)
		}
		inf := os.NewFile(uintptr(in), from)
		defer inf.Close()
		out, err := unix.Openat(dst, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return describe(dst, name, to, err)
		}
		outf := os.NewFile(uintptr(out), to)
		defer outf.Close()
		// (copy_file_range between the two descriptors, where it can.)
		if _, err := io.Copy(outf, inf); err != nil {
			return err
		}
		return setMeta(out, &st, perm(&st), times(&st), to)
	case unix.S_IFDIR:
		sfd, err := openStat(src, name, unix.O_DIRECTORY|unix.O_RDONLY, &st, false)
		if err != nil {
			return describe(src, name, from, err)
		}
		defer unix.Close(sfd)
		if err := unix.Mkdirat(dst, name, 0o700); err != nil {
			return &fs.PathError{Op: "mkdir", Path: to, Err: err}
		}
		dfd, err := openBeneath(dst, name, unix.O_DIRECTORY|unix.O_RDONLY)
		if err != nil {
			return describe(dst, name, to, err)
		}
		defer unix.Close(dfd)
		names, err := readNames(sfd, from)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := copyAt(sfd, dfd, n, filepath.Join(from, n), filepath.Join(to, n), depth+1, warn); err != nil {
				return err
			}
		}
		return setMeta(dfd, &st, perm(&st), times(&st), to)
	default:
		warn("%s is not a file, directory or symlink: not copied to %s", from, to)
		return nil
	}
}

// setMeta gives the descriptor fd (of to) st's owner, perm and times.
func setMeta(fd int, st *unix.Stat_t, perm uint32, times []unix.Timespec, to string) error {
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return &fs.PathError{Op: "chown", Path: to, Err: err}
	}
	if err := unix.Fchmod(fd, perm); err != nil {
		return &fs.PathError{Op: "chmod", Path: to, Err: err}
	}
	if unix.UtimesNanoAt(fd, "", times, unix.AT_EMPTY_PATH) != nil {
		// Kernels whose utimensat takes no AT_EMPTY_PATH: the descriptor's
		// own magic link, which names exactly this file.
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), times, 0)
	}
	return nil
}

// readNames lists the directory open at fd (path for messages).
func readNames(fd int, path string) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return names, nil
}

// removeAllAt removes name in the directory dirfd and everything below
// it, through descriptors, following no symlink.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return err
	}
	fd, oerr := openBeneath(dirfd, name, unix.O_DIRECTORY|unix.O_RDONLY)
	if oerr != nil {
		return err
	}
	names, rerr := readNames(fd, name)
	for _, n := range names {
		if e := removeAllAt(fd, n); e != nil && rerr == nil {
			rerr = e
		}
	}
	unix.Close(fd)
	if rerr != nil {
		return rerr
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// Test seams: adoptRename is the rename adopt tries first (a test makes it
// fail with EXDEV, as across filesystems); testHookBeforeCopy runs between
// the checks and the copy (a test plants a link there, winning the race).
var (
	adoptRename        = renameNoReplace
	testHookBeforeCopy func(from, to string)
	testHookCopyEntry  func(from, to string)
)
