// Package approvals is the store of reach the user approved "always" for
// a workspace (claude-sandbox allow ID --always, the ask mode's approve
// --always): entries (a domain[:port], an address or CIDR, a host
// loopback port) that join the allowlist of every later launch of run
// and the shadow in that workspace.
//
// Where: one JSON file per workspace, named by a hash of the workspace's
// canonical path (the file records the path too), in the caller's state
// directory, $XDG_STATE_HOME/claude-sandbox/approvals (or
// ~/.local/state/claude-sandbox/approvals): outside every sandbox's
// writable view (the sandbox's home is empty, the host's is read-only;
// the launcher refuses the store when a writable bind of the plan covers
// it). The directory is made 0700, each file written atomically (a new
// file, mode 0600, renamed over the old one) under a lock, and read only
// when it is a regular file of the caller's, not a link, within a size
// limit, and well formed throughout: anything else is refused whole, with
// an error naming the file and the fix, and nothing of it applied.
package approvals

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/netpolicy"
)

// Kinds of entries.
const (
	Domain   = "domain"    // NAME[:PORT], as --allow-domain takes it
	IP       = "ip"        // ADDR or CIDR, as --allow-ip / --allow-cidr
	HostPort = "host-port" // PORT[/udp], as --allow-host-port
)

// Entry is one approved reach.
type Entry struct {
	Kind  string    `json:"kind"`
	Value string    `json:"value"`
	Added time.Time `json:"added"`
}

// String is the entry as the user gives it: "domain pypi.org".
func (e Entry) String() string { return e.Kind + " " + e.Value }

// file is one workspace's store.
type file struct {
	V         int     `json:"v"`
	Workspace string  `json:"workspace"`
	Entries   []Entry `json:"entries"`
}

// Limits of a store file.
const (
	MaxFileSize = 256 << 10
	MaxEntries  = 1000
	version     = 1
)

// Validate checks e's kind and value (as the launch options take them)
// and returns it in its canonical form.
func Validate(e Entry) (Entry, error) {
	v := strings.TrimSpace(e.Value)
	switch e.Kind {
	case Domain:
		if _, err := netpolicy.ExpandDomains([]string{v}); err != nil {
			return e, fmt.Errorf("domain %q: %w", v, err)
		}
	case IP:
		p, err := netpolicy.ParseAllow(v)
		if err != nil {
			return e, fmt.Errorf("ip %q: %w", v, err)
		}
		v = p.String()
	case HostPort:
		h, err := netpolicy.ParseHostPort(v)
		if err != nil {
			return e, fmt.Errorf("host-port %q: %w", v, err)
		}
		v = h.String()
	default:
		return e, fmt.Errorf("unknown kind %q (domain, ip or host-port)", e.Kind)
	}
	e.Value = v
	return e, nil
}

// ParseEntry reads an entry as String writes it
// ("domain pypi.org"); a bare value is a domain, or an ip when it parses
// as an address or CIDR.
func ParseEntry(s string) (Entry, error) {
	s = strings.TrimSpace(s)
	if k, v, ok := strings.Cut(s, " "); ok {
		return Validate(Entry{Kind: k, Value: v})
	}
	if _, err := netpolicy.ParseAllow(s); err == nil {
		return Validate(Entry{Kind: IP, Value: s})
	}
	return Validate(Entry{Kind: Domain, Value: s})
}

// DefaultDir is the store's directory for this environment:
// $XDG_STATE_HOME/claude-sandbox/approvals when XDG_STATE_HOME is an
// absolute path, else HOME/.local/state/claude-sandbox/approvals.
func DefaultDir(getenv func(string) string) (string, error) {
	if s := getenv("XDG_STATE_HOME"); filepath.IsAbs(s) {
		return filepath.Join(s, "claude-sandbox", "approvals"), nil
	}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("no state directory: neither XDG_STATE_HOME nor HOME is an absolute path")
	}
	return filepath.Join(home, ".local", "state", "claude-sandbox", "approvals"), nil
}

// Store is the approvals directory Dir.
type Store struct{ Dir string }

// Default is the store of DefaultDir(os.Getenv).
func Default() (Store, error) {
	d, err := DefaultDir(os.Getenv)
	return Store{Dir: d}, err
}

// Canonical returns workspace's canonical path (absolute, symlinks
// resolved), which names its store.
func Canonical(workspace string) (string, error) {
	abs, err := filepath.Abs(workspace)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// Path is the store file of the workspace whose canonical path is canon.
func (s Store) Path(canon string) string {
	h := sha256.Sum256([]byte(canon))
	return filepath.Join(s.Dir, hex.EncodeToString(h[:16])+".json")
}

// openDir opens the store's directory (create: making it, and its
// parents, 0700 first), refusing a link, another owner, or a mode that
// lets others write.
func (s Store) openDir(create bool) (int, error) {
	if create {
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			return -1, err
		}
	}
	fd, err := unix.Open(s.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: %w", s.Dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: owned by uid %d with mode %04o: refused (it must be yours and writable by you alone: chmod 700 it, or remove it)", s.Dir, st.Uid, st.Mode&0o7777)
	}
	return fd, nil
}

// List returns workspace's entries (none when it has no store). A store
// file that is not a regular file of the caller's within MaxFileSize, or
// not well formed, is an error, and none of it is returned.
func (s Store) List(workspace string) ([]Entry, error) {
	canon, err := Canonical(workspace)
	if err != nil {
		return nil, err
	}
	dir, err := s.openDir(false)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	f, err := s.read(dir, canon)
	return f.Entries, err
}

// read reads canon's store file from dir (a missing one is empty).
func (s Store) read(dir int, canon string) (file, error) {
	path := s.Path(canon)
	name := filepath.Base(path)
	refuse := func(why string) (file, error) {
		return file{}, fmt.Errorf("approvals store %s: %s: refused, nothing of it applied (remove the file: claude-sandbox approvals lists the entries again once it is gone)", path, why)
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ENOENT) {
		return file{V: version, Workspace: canon}, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return refuse("a symbolic link")
	}
	if err != nil {
		return refuse(err.Error())
	}
	fh := os.NewFile(uintptr(fd), path)
	defer fh.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return refuse(err.Error())
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return refuse("not a regular file")
	case int(st.Uid) != os.Geteuid():
		return refuse(fmt.Sprintf("owned by uid %d", st.Uid))
	case st.Mode&0o022 != 0:
		return refuse(fmt.Sprintf("writable by others (mode %04o)", st.Mode&0o7777))
	case st.Size > MaxFileSize:
		return refuse(fmt.Sprintf("%d bytes, over the limit of %d", st.Size, MaxFileSize))
	}
	b, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return refuse(err.Error())
	}
	if len(b) > MaxFileSize {
		return refuse(fmt.Sprintf("over the limit of %d bytes", MaxFileSize))
	}
	var f file
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return refuse("not valid JSON: " + err.Error())
	}
	if f.V != version {
		return refuse(fmt.Sprintf("version %d, want %d", f.V, version))
	}
	if f.Workspace != canon {
		return refuse(fmt.Sprintf("it records workspace %q, not %q", f.Workspace, canon))
	}
	if len(f.Entries) > MaxEntries {
		return refuse(fmt.Sprintf("%d entries, over the limit of %d", len(f.Entries), MaxEntries))
	}
	for i, e := range f.Entries {
		c, err := Validate(e)
		if err != nil {
			return refuse(fmt.Sprintf("entry %d: %v", i+1, err))
		}
		if c.Value != e.Value {
			return refuse(fmt.Sprintf("entry %d: %s %q is not in its canonical form %q", i+1, e.Kind, e.Value, c.Value))
		}
	}
	return f, nil
}

// update applies change to workspace's entries under the store's lock
// and writes them back atomically.
func (s Store) update(workspace string, change func(*file) error) error {
	canon, err := Canonical(workspace)
	if err != nil {
		return err
	}
	dir, err := s.openDir(true)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if err := unix.Flock(dir, unix.LOCK_EX); err != nil {
		return err
	}
	f, err := s.read(dir, canon)
	if err != nil {
		return err
	}
	if err := change(&f); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	name := filepath.Base(s.Path(canon))
	tmp := "." + name + "." + strconv.Itoa(os.Getpid()) + ".tmp"
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("approvals store %s: %w", s.Dir, err)
	}
	fh := os.NewFile(uintptr(fd), tmp)
	_, err = fh.Write(b)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return fmt.Errorf("approvals store %s: %w", s.Dir, err)
	}
	_ = unix.Fsync(dir)
	return nil
}

// Add validates e and stores it for workspace; it returns e as stored
// (its value in Validate's canonical form) and reports false when it was
// there already.
func (s Store) Add(workspace string, e Entry) (Entry, bool, error) {
	e, err := Validate(e)
	if err != nil {
		return e, false, err
	}
	if e.Added.IsZero() {
		e.Added = time.Now().UTC().Truncate(time.Second)
	}
	added := false
	err = s.update(workspace, func(f *file) error {
		for _, o := range f.Entries {
			if o.Kind == e.Kind && o.Value == e.Value {
				return nil
			}
		}
		if len(f.Entries) >= MaxEntries {
			return fmt.Errorf("the workspace has %d approvals already, the limit", MaxEntries)
		}
		f.Entries = append(f.Entries, e)
		added = true
		return nil
	})
	return e, added, err
}

// Remove removes from workspace's entries the one named by which: its
// number in List's order (from 1), or the entry as ParseEntry reads it.
func (s Store) Remove(workspace, which string) (Entry, error) {
	var gone Entry
	err := s.update(workspace, func(f *file) error {
		i := -1
		if n, err := strconv.Atoi(which); err == nil {
			if n < 1 || n > len(f.Entries) {
				return fmt.Errorf("no approval number %d (the workspace has %d)", n, len(f.Entries))
			}
			i = n - 1
		} else {
			e, err := ParseEntry(which)
			if err != nil {
				return err
			}
			for j, o := range f.Entries {
				if o.Kind == e.Kind && o.Value == e.Value {
					i = j
				}
			}
			if i < 0 {
				return fmt.Errorf("%s is not approved for this workspace", e)
			}
		}
		gone = f.Entries[i]
		f.Entries = append(f.Entries[:i:i], f.Entries[i+1:]...)
		return nil
	})
	return gone, err
}

// Add stores e for workspace in the default store (DefaultDir): what
// claude-sandbox allow --always and the ask mode's approve --always call.
// It returns e as stored, and false when it was stored already.
func Add(workspace string, e Entry) (Entry, bool, error) {
	s, err := Default()
	if err != nil {
		return e, false, err
	}
	return s.Add(workspace, e)
}

// List returns workspace's entries in the default store.
func List(workspace string) ([]Entry, error) {
	s, err := Default()
	if err != nil {
		return nil, err
	}
	return s.List(workspace)
}

// Remove removes an entry of workspace's from the default store.
func Remove(workspace, which string) (Entry, error) {
	s, err := Default()
	if err != nil {
		return Entry{}, err
	}
	return s.Remove(workspace, which)
}

// Covered reports whether dir (the store's directory, or where it would
// be) lies within one of the writable host paths srcs (a sandbox's
// writable binds): symlinks in both resolved as far as they exist. It
// returns the covering path.
func Covered(dir string, srcs []string) (string, bool) {
	d := resolveExisting(dir)
	for _, s := range srcs {
		r := resolveExisting(s)
		if r == "/" || d == r || strings.HasPrefix(d, strings.TrimSuffix(r, "/")+"/") {
			return s, true
		}
	}
	return "", false
}

// resolveExisting resolves the symlinks of p's longest existing prefix
// and appends the rest.
func resolveExisting(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
