package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
func linkSharedConfig(home, shared string, uid, gid int, stdout io.Writer) error {
	if !filepath.IsAbs(shared) {
		return fmt.Errorf("--shared-config %s: give an absolute path", shared)
	}
	if err := os.MkdirAll(shared, 0o700); err != nil {
		return err
	}
	_ = os.Chown(shared, uid, gid)
	for _, name := range []string{".claude", ".claude.json"} {
		h, s := filepath.Join(home, name), filepath.Join(shared, name)
		if t, err := os.Readlink(h); err == nil && t == s {
			continue
		}
		hfi, herr := os.Lstat(h)
		_, serr := os.Lstat(s)
		switch {
		case herr == nil && hfi.Mode()&os.ModeSymlink != 0:
			if err := os.Remove(h); err != nil {
				return err
			}
			if serr != nil {
				if err := seed(s, name, uid, gid); err != nil {
					return err
				}
			}
			fmt.Fprintf(stdout, "re-pointed %s to %s\n", h, s)
		case herr == nil && serr == nil:
			bak := h + ".bak-" + strconv.FormatInt(time.Now().Unix(), 10)
			if err := os.Rename(h, bak); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "backed up %s to %s; using the shared %s\n", h, bak, s)
		case herr == nil:
			if err := move(h, s); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "adopted %s into %s\n", h, s)
		default:
			if serr != nil {
				if err := seed(s, name, uid, gid); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "seeded %s\n", s)
			}
		}
		if err := os.Symlink(s, h); err != nil {
			return err
		}
		_ = os.Lchown(h, uid, gid)
	}
	return nil
}

func seed(path, name string, uid, gid int) error {
	var err error
	if strings.HasSuffix(name, ".json") {
		err = os.WriteFile(path, []byte("{}\n"), 0o600)
	} else {
		err = os.Mkdir(path, 0o700)
	}
	if err == nil {
		err = os.Chown(path, uid, gid)
	}
	return err
}

// move renames, or copies and removes across filesystems (the shared dir
// is often a host mount).
func move(from, to string) error {
	if err := os.Rename(from, to); err == nil {
		return nil
	}
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s to %s: %v: %s", from, to, err, out)
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
