package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// linkSharedConfig points ~/.claude and ~/.claude.json of the invoking user
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
// home is the home's real path (under root already); shared is the path
// as seen from root (the links' target), found at root+shared.
func linkSharedConfig(root, home, shared string, uid, gid int, stdout io.Writer) error {
	if !filepath.IsAbs(shared) {
		return fmt.Errorf("--shared-config %s: give an absolute path", shared)
	}
	shared = filepath.Clean(shared)
	sharedAt := filepath.Join(root, shared)
	// Root works in two trees the user can change (safefs.go): the shared
	// directory, opened refusing every symlink (its missing parents are
	// made root's, itself the user's), and the home, whose own path is the
	// password database's; below both nothing is followed.
	parent, _, err := openNoSymlinks(filepath.Dir(sharedAt), 0o755, 0, 0, true)
	if err != nil {
		return fmt.Errorf("--shared-config %s: %w; give the real path of the directory", shared, err)
	}
	sd, _, err := parent.walk(filepath.Base(sharedAt), 0o700, uid, gid, true)
	parent.Close()
	if err != nil {
		return fmt.Errorf("--shared-config %s: %w; give the real path of the directory", shared, err)
	}
	defer sd.Close()
	if err := unix.Fchown(sd.fd, uid, gid); err != nil {
		return &fs.PathError{Op: "chown", Path: sharedAt, Err: err}
	}
	hd, err := openTrusted(home)
	if err != nil {
		return err
	}
	defer hd.Close()
	for _, name := range []string{".claude", ".claude.json"} {
		h, s := filepath.Join(home, name), filepath.Join(shared, name)
		if t, err := readlinkAt(hd.fd, name); err == nil && t == s {
			continue
		}
		sst, serr := sd.lstat(name)
		if serr == nil && sst.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s %w: replace it with the real file or directory", filepath.Join(sharedAt, name), errSymlinkRefused)
		}
		hst, herr := hd.lstat(name)
		switch {
		case herr == nil && hst.Mode&unix.S_IFMT == unix.S_IFLNK:
			if err := unix.Unlinkat(hd.fd, name, 0); err != nil {
				return &fs.PathError{Op: "remove", Path: h, Err: err}
			}
			if serr != nil {
				if err := seed(sd, name, uid, gid); err != nil {
					return err
				}
			}
			fmt.Fprintf(stdout, "re-pointed %s to %s\n", h, s)
		case herr == nil && serr == nil:
			bak := name + ".bak-" + strconv.FormatInt(time.Now().Unix(), 10)
			if err := renameNoReplace(hd.fd, name, hd.fd, bak); err != nil {
				return &fs.PathError{Op: "back up", Path: h, Err: err}
			}
			fmt.Fprintf(stdout, "backed up %s to %s; using the shared %s\n", h, filepath.Join(home, bak), s)
		case herr == nil:
			if err := move(hd, sd, name); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "adopted %s into %s\n", h, s)
		default:
			if serr != nil {
				if err := seed(sd, name, uid, gid); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "seeded %s\n", s)
			}
		}
		if err := unix.Symlinkat(s, hd.fd, name); err != nil {
			return &fs.PathError{Op: "link", Path: h, Err: err}
		}
		if err := unix.Fchownat(hd.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "chown", Path: h, Err: err}
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

// seed creates name in the shared directory, owned by the user: an empty
// directory, or an empty JSON object.
func seed(sd *safeDir, name string, uid, gid int) error {
	if strings.HasSuffix(name, ".json") {
		return sd.create(name, []byte("{}\n"), 0o600, uid, gid)
	}
	return sd.mkdir(name, 0o700, uid, gid)
}

// move moves name from the home into the shared directory: a rename, or,
// across filesystems (the shared dir is often a host mount), a copy that
// keeps symlinks as symlinks, then removal of the home copy.
func move(hd, sd *safeDir, name string) error {
	from, to := filepath.Join(hd.path, name), filepath.Join(sd.path, name)
	err := renameNoReplace(hd.fd, name, sd.fd, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EXDEV) {
		return &fs.PathError{Op: "move", Path: from, Err: err}
	}
	if out, err := exec.Command("cp", "-a", "-T", "--", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s to %s: %w: %s", from, to, err, out)
	}
	return os.RemoveAll(from)
}

// invokingUser is the user who ran sudo (or root): home, uid, gid.
func invokingUser() (home string, uid, gid int) {
	home, uid, gid = os.Getenv("HOME"), os.Getuid(), os.Getgid()
	if u := os.Getenv("SUDO_USER"); u != "" {
		if out, err := exec.Command("getent", "passwd", u).Output(); err == nil {
			if f := strings.Split(strings.TrimSpace(string(out)), ":"); len(f) >= 6 {
				uid, _ = strconv.Atoi(f[2])
				gid, _ = strconv.Atoi(f[3])
				home = f[5]
			}
		}
	}
	return home, uid, gid
}
