package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is what one change did.
type Kind string

// The changes install and uninstall make. Each is undone from its record
// alone (Journal.Rollback), so a dry run's records are exactly what a real
// run would apply.
const (
	// CreatedFile: Path did not exist and now holds a file (undo: remove it).
	CreatedFile Kind = "create file"
	// ReplacedFile: Path held another file (or a symlink), kept at Backup
	// until the end (undo: Backup back to Path).
	ReplacedFile Kind = "replace file"
	// Removed: Path (a file, link or tree) was renamed to Backup, deleted
	// at the end (undo: Backup back to Path).
	Removed Kind = "remove"
	// Moved: the entry at From is now at Path (undo: rename it back).
	Moved Kind = "move"
	// CopiedTree: the tree Path was made as a copy (undo: remove it all).
	CopiedTree Kind = "copy tree"
	// CreatedDir: the directory Path was made (undo: remove it).
	CreatedDir Kind = "create dir"
	// CreatedLink: the symlink Path -> Target was made (undo: remove it).
	CreatedLink Kind = "create link"
	// Chowned: Path's owner became UID:GID, from OldUID:OldGID (undo: the
	// old owner back).
	Chowned Kind = "chown"
	// Deleted: Path was removed for good, after the point of no return
	// (not undone).
	Deleted Kind = "delete"
	// RemovedDir: an emptied directory install had made was removed, after
	// the point of no return (not undone).
	RemovedDir Kind = "remove empty dir"
)

// Change is one record of the journal.
type Change struct {
	Kind   Kind
	Path   string
	From   string      // Moved: where the entry was
	Backup string      // ReplacedFile, Removed: the old entry, until Commit
	Target string      // CreatedLink: the link's target
	Mode   fs.FileMode // CreatedFile, ReplacedFile, CreatedDir
	// Chowned: the new and the old owner.
	UID, GID, OldUID, OldGID int
	// Base is set when Path lies in a tree someone other than root can
	// change (the user's home, the shared directory): the undo reaches
	// Path's directory from Base one component at a time, refusing
	// symlinks (safefs.go). FromBase is the same for From.
	Base, FromBase string
	// Step is the install or uninstall step that made the change.
	Step string
	// Note says what the change is for ("the shadow", "the real Claude Code").
	Note string
}

func (c Change) String() string {
	s := fmt.Sprintf("%-16s %s", c.Kind, c.Path)
	switch c.Kind {
	case CreatedFile, ReplacedFile, CreatedDir:
		s += fmt.Sprintf(" (mode %04o)", c.Mode.Perm())
	case Moved:
		s += " (from " + c.From + ")"
	case CreatedLink:
		s += " -> " + c.Target
	case Chowned:
		s += fmt.Sprintf(" to %d:%d (was %d:%d)", c.UID, c.GID, c.OldUID, c.OldGID)
	}
	if c.Note != "" {
		s += ": " + c.Note
	}
	return s
}

// Journal is the list of changes a run made (or, with Dry, would make). A
// run that fails part way replays it in reverse (Rollback), which puts the
// tree back as it was; a run that succeeds drops the backups (Commit).
type Journal struct {
	Dry     bool
	Changes []Change
	// dryDirs are the directories a dry run has recorded as made, so each
	// is recorded once and later steps see it as there.
	dryDirs map[string]bool
}

func (j *Journal) add(c Change) { j.Changes = append(j.Changes, c) }

// since returns the records added after the first n.
func (j *Journal) since(n int) []Change { return slices.Clone(j.Changes[n:]) }

// Rollback undoes every change, newest first. It goes on past a failing
// undo (an entry changed since by someone else) and returns the failures.
func (j *Journal) Rollback() error {
	var errs []error
	if !j.Dry {
		for i := len(j.Changes) - 1; i >= 0; i-- {
			if err := undo(j.Changes[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	j.Changes = nil
	return errors.Join(errs...)
}

// Commit drops the backups: the run's changes stay.
func (j *Journal) Commit() {
	if j.Dry {
		return
	}
	for _, c := range j.Changes {
		if c.Backup == "" {
			continue
		}
		if c.Base == "" {
			_ = os.RemoveAll(c.Backup)
			continue
		}
		if d, err := openParent(c.Base, c.Backup); err == nil {
			_ = removeAllAt(d.fd, filepath.Base(c.Backup))
			d.Close()
		}
	}
}

// openParent opens path's directory: from base refusing symlinks when
// base is set, as root decided it otherwise.
func openParent(base, path string) (*Dir, error) {
	dir := filepath.Dir(path)
	if base == "" {
		return OpenTrusted(dir)
	}
	rel, err := filepath.Rel(base, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("%s is not below %s", path, base)
	}
	b, err := OpenTrusted(base)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	d, _, err := b.Walk(rel, 0, -1, -1, false)
	return d, err
}

func undo(c Change) error {
	d, err := openParent(c.Base, c.Path)
	if err != nil {
		return fmt.Errorf("undo %s: %w", c, err)
	}
	defer d.Close()
	name := filepath.Base(c.Path)
	switch c.Kind {
	case CreatedFile, CreatedLink:
		err = unix.Unlinkat(d.fd, name, 0)
	case CreatedDir:
		err = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
	case CopiedTree:
		err = removeAllAt(d.fd, name)
	case ReplacedFile, Removed:
		err = unix.Renameat(d.fd, filepath.Base(c.Backup), d.fd, name)
	case Moved:
		var from *Dir
		if from, err = openParent(c.FromBase, c.From); err == nil {
			err = unix.Renameat(d.fd, name, from.fd, filepath.Base(c.From))
			from.Close()
		}
	case Chowned:
		err = unix.Fchownat(d.fd, name, c.OldUID, c.OldGID, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("undo %s: %w", c, err)
	}
	return nil
}

// backupName is where path's old version waits until Commit.
func backupName(path string) string {
	return filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.claude-sandbox-undo-%d", filepath.Base(path), os.Getpid()))
}

// exists reports whether path is there (not followed), counting what a
// dry run has recorded as made.
func (j *Journal) exists(path string) bool {
	if j.dryDirs[path] {
		return true
	}
	_, err := os.Lstat(path)
	return err == nil
}

// mkdirs makes dir and its missing parents (mode 0755), in trees root
// owns.
func (j *Journal) mkdirs(dir string) error {
	var missing []string
	for d := dir; d != "/" && d != "." && d != ""; d = filepath.Dir(d) {
		if j.exists(d) {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if j.Dry {
			if j.dryDirs == nil {
				j.dryDirs = map[string]bool{}
			}
			j.dryDirs[d] = true
		} else if err := os.Mkdir(d, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			return err
		}
		j.add(Change{Kind: CreatedDir, Path: d, Mode: 0o755})
	}
	return nil
}

// put makes path, in a tree root owns, hold data (or, when src is set,
// the bytes of the file src, streamed), through the one atomic writer. An
// existing file keeps its mode and is kept as the backup. It changes
// nothing, and reports false, when path holds those bytes already.
//
// A symlink at path is replaced by the file (never written through), as
// an npm install's /usr/local/bin/claude link is by the shadow.
func (j *Journal) put(path string, data []byte, src string, mode os.FileMode, note string) (bool, error) {
	fi, statErr := os.Lstat(path)
	isLink := statErr == nil && fi.Mode()&fs.ModeSymlink != 0
	if statErr == nil && !isLink {
		if !fi.Mode().IsRegular() {
			return false, fmt.Errorf("%s exists and is not a regular file: move it away, then run again", path)
		}
		if src != "" {
			if same, _ := SameFile(src, path); same {
				return false, nil
			}
		} else if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			return false, nil
		}
		mode = fi.Mode().Perm()
	}
	if err := j.mkdirs(filepath.Dir(path)); err != nil {
		return false, err
	}
	c := Change{Kind: CreatedFile, Path: path, Mode: mode, Note: note}
	if statErr == nil {
		c.Kind, c.Backup = ReplacedFile, backupName(path)
	}
	if j.Dry {
		j.add(c)
		return true, nil
	}
	var r io.Reader = bytes.NewReader(data)
	if src != "" {
		in, err := os.Open(src)
		if err != nil {
			return false, err
		}
		defer in.Close()
		r = in
	}
	d, err := OpenTrusted(filepath.Dir(path))
	if err != nil {
		return false, err
	}
	defer d.Close()
	name := filepath.Base(path)
	if c.Backup != "" {
		bak := filepath.Base(c.Backup)
		_ = unix.Unlinkat(d.fd, bak, 0)
		if err := unix.Linkat(d.fd, name, d.fd, bak, 0); err != nil {
			return false, fmt.Errorf("keep the old %s: %w", path, err)
		}
	}
	if err := d.WriteAtomic(name, r, uint32(mode), -1, -1, true); err != nil {
		if c.Backup != "" {
			_ = unix.Unlinkat(d.fd, filepath.Base(c.Backup), 0)
		}
		return false, err
	}
	j.add(c)
	return true, nil
}

// remove removes path (a file, link or whole directory), in a tree root
// owns, by renaming it to its backup name. It reports false when there was
// nothing to remove.
func (j *Journal) remove(path, note string) (bool, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	c := Change{Kind: Removed, Path: path, Backup: backupName(path), Note: note}
	if !j.Dry {
		_ = os.RemoveAll(c.Backup)
		if err := os.Rename(path, c.Backup); err != nil {
			return false, err
		}
	}
	j.add(c)
	return true, nil
}

// removeBeneath removes path, which lies in base (a tree others can
// change), by renaming it to its backup name from a descriptor of its
// directory reached from base without following a symlink.
func (j *Journal) removeBeneath(base, path, note string) error {
	d, err := openParent(base, path)
	if err != nil {
		return err
	}
	defer d.Close()
	name := filepath.Base(path)
	if _, err := d.Lstat(name); err != nil {
		return &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	c := Change{Kind: Removed, Path: path, Backup: backupName(path), Base: base, Note: note}
	if !j.Dry {
		bak := filepath.Base(c.Backup)
		_ = unix.Unlinkat(d.fd, bak, 0)
		if err := unix.Renameat(d.fd, name, d.fd, bak); err != nil {
			return &fs.PathError{Op: "rename", Path: path, Err: err}
		}
	}
	j.add(c)
	return nil
}

// putBeneath puts what the file src holds at path, which lies in base (a
// tree others can change), as a new file with mode owned by base's owner,
// making missing directories on the way (theirs too), never following a
// symlink and never replacing anything. A dry run records the same.
func (j *Journal) putBeneath(base, path, src string, mode uint32, note string) error {
	uid, gid, err := ownerOf(base)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(base, filepath.Dir(path))
	if err != nil {
		return err
	}
	d, err := j.mkdirBeneath(base, rel, 0o755, uid, gid)
	if err != nil {
		return err
	}
	if d != nil {
		defer d.Close()
		if _, err := d.Lstat(filepath.Base(path)); err == nil {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
	}
	if !j.Dry {
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		if err := d.WriteAtomic(filepath.Base(path), in, mode, uid, gid, false); err != nil {
			return err
		}
	}
	j.add(Change{Kind: CreatedFile, Path: path, Mode: fs.FileMode(mode), Base: base, Note: note})
	return nil
}

// symlinkBeneath creates the link path -> target in base (a tree others
// can change), owned by base's owner, as putBeneath does a file.
func (j *Journal) symlinkBeneath(base, target, path, note string) error {
	uid, gid, err := ownerOf(base)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(base, filepath.Dir(path))
	if err != nil {
		return err
	}
	d, err := j.mkdirBeneath(base, rel, 0o755, uid, gid)
	if err != nil {
		return err
	}
	if !j.Dry {
		defer d.Close()
		name := filepath.Base(path)
		if err := unix.Symlinkat(target, d.fd, name); err != nil {
			return &fs.PathError{Op: "link", Path: path, Err: err}
		}
		if err := unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			_ = unix.Unlinkat(d.fd, name, 0)
			return &fs.PathError{Op: "chown", Path: path, Err: err}
		}
	} else if d != nil {
		d.Close()
	}
	j.add(Change{Kind: CreatedLink, Path: path, Target: target, Base: base, Note: note})
	return nil
}

// ownerOf is the owner of the directory path.
func ownerOf(path string) (uid, gid int, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return int(st.Uid), int(st.Gid), nil
}

// symlink creates the link path -> target.
func (j *Journal) symlink(target, path, note string) error {
	if !j.Dry {
		if err := os.Symlink(target, path); err != nil {
			return err
		}
	}
	j.add(Change{Kind: CreatedLink, Path: path, Target: target, Note: note})
	return nil
}

// mkdirBeneath opens the directory rel below base (a tree others can
// change), making missing components with mode, owned uid:gid, refusing
// any symlink, and records what it made. In a dry run the directory may
// not exist yet: then it records what it would make and returns nil.
func (j *Journal) mkdirBeneath(base, rel string, mode uint32, uid, gid int) (*Dir, error) {
	if j.Dry && j.dryDirs[base] {
		// base itself is only recorded as made: so is everything below.
		cur := base
		for _, name := range strings.Split(filepath.Clean(rel), "/") {
			if name == "." || name == "" {
				continue
			}
			cur = filepath.Join(cur, name)
			j.dryDirs[cur] = true
			j.add(Change{Kind: CreatedDir, Path: cur, Mode: fs.FileMode(mode), Base: base})
		}
		return nil, nil
	}
	b, err := OpenTrusted(base)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if !j.Dry {
		d, created, err := b.Walk(rel, mode, uid, gid, true)
		for _, p := range created {
			j.add(Change{Kind: CreatedDir, Path: p, Mode: fs.FileMode(mode), Base: base})
		}
		return d, err
	}
	cur := ""
	for _, name := range strings.Split(filepath.Clean(rel), "/") {
		if name == "." || name == "" {
			continue
		}
		next := filepath.Join(cur, name)
		p := filepath.Join(base, next)
		if !j.dryDirs[p] {
			d, _, err := b.Walk(next, 0, -1, -1, false)
			if err == nil {
				d.Close()
			} else if errors.Is(err, unix.ENOENT) || errors.Is(err, fs.ErrNotExist) {
				if j.dryDirs == nil {
					j.dryDirs = map[string]bool{}
				}
				j.dryDirs[p] = true
				j.add(Change{Kind: CreatedDir, Path: p, Mode: fs.FileMode(mode), Base: base})
			} else {
				return nil, err
			}
		}
		cur = next
	}
	if j.dryDirs[filepath.Join(base, cur)] {
		return nil, nil
	}
	d, _, err := b.Walk(rel, 0, -1, -1, false)
	return d, err
}

// createBeneath writes data as the new file name in d (see Dir.Create),
// which lies in base, and records it. d is nil when a dry run has only
// recorded d as made.
func (j *Journal) createBeneath(d *Dir, base, dirPath, name string, data []byte, mode uint32, uid, gid int, note string) error {
	path := filepath.Join(dirPath, name)
	if d != nil {
		if _, err := d.Lstat(name); err == nil {
			return fmt.Errorf("%s: %w", path, fs.ErrExist)
		}
	}
	if !j.Dry {
		if err := d.Create(name, data, mode, uid, gid); err != nil {
			return err
		}
	}
	j.add(Change{Kind: CreatedFile, Path: path, Mode: fs.FileMode(mode), Base: base, Note: note})
	return nil
}

// SameFile reports whether a and b hold the same bytes.
func SameFile(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	sa, _ := fa.Stat()
	sb, _ := fb.Stat()
	if sa.Size() != sb.Size() {
		return false, nil
	}
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea != nil {
			return true, nil
		}
	}
}

// within reports whether path lies in root (or is root).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && !strings.HasPrefix(rel, "../")
}
