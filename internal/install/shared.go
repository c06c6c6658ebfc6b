package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
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
	err := renameNoReplace(hd.fd, name, sd.fd, name)
	if err == nil {
		j.add(Change{Kind: Moved, Path: to, From: from, Base: sharedAt, FromBase: hd.path, Note: "adopted into the shared directory"})
		return nil
	}
	if !errors.Is(err, unix.EXDEV) {
		return &fs.PathError{Op: "move", Path: from, Err: err}
	}
	if out, err := exec.Command("cp", "-a", "-T", "--", from, to).CombinedOutput(); err != nil {
		_ = os.RemoveAll(to)
		return fmt.Errorf("copy %s to %s: %v: %s", from, to, err, out)
	}
	j.add(Change{Kind: CopiedTree, Path: to, Base: sharedAt, Note: "adopted into the shared directory (a copy: another filesystem)"})
	bak := backupName(from)
	if err := unix.Renameat(hd.fd, name, hd.fd, filepath.Base(bak)); err != nil {
		return &fs.PathError{Op: "remove", Path: from, Err: err}
	}
	j.add(Change{Kind: Removed, Path: from, Backup: bak, Base: hd.path, Note: "the adopted home copy"})
	return nil
}
