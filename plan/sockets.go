package plan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// Host pathname sockets. A read-only mount does not stop connect() on a
// Unix socket, and a host socket is often a door out (the Docker daemon,
// D-Bus, systemd, an SSH or GPG agent, a resolver that bypasses the jail).
// Build keeps them out of the view in two layers:
//
//   - /run (and /var/run when it is a directory of its own) is covered by a
//     private tmpfs, in which the host's top-level symlinks are re-created
//     (NixOS: /run/current-system, /run/opengl-driver), a few known
//     socket-free directories are bound back read-only (NixOS
//     /run/wrappers), and so is the directory holding /etc/resolv.conf's
//     target when that lies under the cover. Sockets created there later
//     are hidden too.
//   - Every bound pathname socket the kernel lists in /proc/net/unix (the
//     launcher's network namespace, first MaxListedSockets entries) that
//     is a socket on the host and visible somewhere in the view (through
//     the read-only root or a bind, the bind-backs above included) gets a
//     mask-socket op at each place it shows, after every other op.
//
// Then each --allow-socket path is bound back read-only at its own
// (symlink-resolved) path, after the masks, so it wins.

// MaxListedSockets bounds how many /proc/net/unix entries are read.
const MaxListedSockets = 4096

// sweptSocketDirs hold sockets bound from another network namespace, so
// that /proc/net/unix never lists them, in a known place: WSLg's X11,
// Wayland and PulseAudio servers (bound in WSL's system distribution).
// Every socket in them is masked.
var sweptSocketDirs = []string{"/mnt/wslg", "/mnt/wslg/runtime-dir", "/mnt/wslg/.X11-unix"}

// maxSweptEntries bounds how many entries are read of each directory
// that holds a listed socket (to find the renamed and linked ones).
const maxSweptEntries = 4096

// Host is what Build reads of the host to keep its sockets out; nil in
// Options means the real host.
type Host interface {
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	// UnixSockets lists the paths of bound pathname sockets (absolute
	// or not; abstract ones left out), at most MaxListedSockets of them,
	// and whether the list was cut there.
	UnixSockets() (paths []string, truncated bool, err error)
}

// OSHost is the real host.
type OSHost struct{}

func (OSHost) Lstat(name string) (fs.FileInfo, error)     { return os.Lstat(name) }
func (OSHost) Readlink(name string) (string, error)       { return os.Readlink(name) }
func (OSHost) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// UnixSockets reads /proc/net/unix.
func (OSHost) UnixSockets() ([]string, bool, error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	paths, cut, err := ParseProcNetUnix(f, MaxListedSockets)
	if err != nil || cut {
		return paths, cut, err
	}
	more, cut := foreignSockets(MaxListedSockets - len(paths))
	return append(paths, more...), cut, nil
}

// foreignSockets lists the pathname sockets bound in the other network
// namespaces of processes this caller may inspect (a container's, a
// service's with PrivateNetwork=): a listener there is reached by path
// all the same, and /proc/net/unix lists only the launcher's namespace.
// Each path is as its binder saw it; where that process has a mount
// namespace of its own, the path is mapped to the host's view through
// both mount tables (a container's root, a volume bound into it). At
// most limit paths.
func foreignSockets(limit int) (out []string, truncated bool) {
	self := func(kind string) string { l, _ := os.Readlink("/proc/self/ns/" + kind); return l }
	ownNet, ownMnt := self("net"), self("mnt")
	if ownNet == "" {
		return nil, false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	var ours []HostMount
	seen := map[string]bool{ownNet: true}
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		ns, err := os.Readlink("/proc/" + pid + "/ns/net")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		f, err := os.Open("/proc/" + pid + "/net/unix")
		if err != nil {
			continue
		}
		paths, _, _ := ParseProcNetUnix(f, MaxListedSockets)
		f.Close()
		if len(paths) == 0 {
			continue
		}
		var theirs []HostMount
		if mnt, _ := os.Readlink("/proc/" + pid + "/ns/mnt"); mnt != ownMnt {
			b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
			if err != nil {
				continue
			}
			theirs = ParseMountinfo(string(b))
			if ours == nil {
				b, _ := os.ReadFile("/proc/self/mountinfo")
				ours = ParseMountinfo(string(b))
			}
		}
		for _, p := range paths {
			if !path.IsAbs(p) {
				continue
			}
			mapped := []string{path.Clean(p)}
			if theirs != nil {
				mapped = MapForeignPath(path.Clean(p), theirs, ours)
			}
			for _, m := range mapped {
				if len(out) >= limit {
					return out, true
				}
				out = append(out, m)
			}
		}
	}
	return out, false
}

// MapForeignPath returns where the path p of another mount namespace
// (whose mount table is theirs) shows in ours: the filesystem and
// directory of their mount that holds p, at each of our mounts of the
// same filesystem that includes it.
func MapForeignPath(p string, theirs, ours []HostMount) []string {
	best := -1
	for i, m := range theirs {
		if mounts.Within(p, m.Point) && (best < 0 || len(m.Point) >= len(theirs[best].Point)) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	m := theirs[best]
	inFS := path.Join(m.Root, strings.TrimPrefix(p, m.Point))
	var out []string
	for _, n := range ours {
		if n.Dev == m.Dev && mounts.Within(inFS, n.Root) {
			a := path.Join(n.Point, strings.TrimPrefix(inFS, n.Root))
			if !contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// ParseProcNetUnix returns the socket paths of a /proc/net/unix listing,
// reading at most limit entries.
func ParseProcNetUnix(r io.Reader, limit int) ([]string, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	var out []string
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Num") {
			continue
		}
		if n++; n > limit {
			return out, true, nil
		}
		// Num RefCount Protocol Flags Type St Inode [Path]: the path is
		// the rest of the line after seven fields (it may hold spaces).
		rest := line
		for i := 0; i < 7; i++ {
			rest = strings.TrimLeft(rest, " ")
			j := strings.IndexByte(rest, ' ')
			if j < 0 {
				rest = ""
				break
			}
			rest = rest[j:]
		}
		p := strings.TrimSpace(rest)
		if p == "" || p[0] == '@' {
			continue // unbound or abstract
		}
		out = append(out, p)
	}
	return out, false, sc.Err()
}

// coveredRun are the directories that get a private tmpfs, when they are
// real directories on the host (not the usual /var/run -> /run link).
var coveredRun = []string{"/run", "/var/run"}

// keptRunDirs are top-level directories of /run bound back read-only
// because systems run programs from them and they hold no sockets: NixOS
// puts its setuid wrappers (on PATH) in /run/wrappers. Sockets later found
// inside them are masked like any other.
var keptRunDirs = []string{"wrappers"}

// runCover returns the base ops that cover /run: the tmpfs, the
// re-created links, the kept directories and the resolver's directory.
func runCover(h Host) []mounts.Op {
	var covers []string
	var out []mounts.Op
	for _, dir := range coveredRun {
		fi, err := h.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		covers = append(covers, dir)
		out = append(out, mounts.Op{Kind: mounts.Tmpfs, Dst: dir, Mode: 0o755})
		ents, err := h.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			p := dir + "/" + e.Name()
			switch {
			case e.Type()&fs.ModeSymlink != 0:
				if t, err := h.Readlink(p); err == nil {
					out = append(out, mounts.Op{Kind: mounts.Symlink, Dst: p, Target: t})
				}
			case e.IsDir() && contains(keptRunDirs, e.Name()):
				out = append(out, mounts.Op{Kind: mounts.ROBind, Src: p, Dst: p})
			}
		}
	}
	// Name resolution: /etc/resolv.conf is often a link into /run
	// (systemd-resolved, resolvconf, NetworkManager). Its directory comes
	// back, so a rewrite of the file on the host shows inside; where that
	// directory would be the cover itself, only the file does.
	if target, err := resolve(h, "/etc/resolv.conf"); err == nil {
		for _, c := range covers {
			if !mounts.Within(target, c) || target == c {
				continue
			}
			if fi, err := h.Lstat(target); err != nil || fi.IsDir() {
				break
			}
			src := path.Dir(target)
			if src == c {
				src = target
			}
			out = append(out, mounts.Op{Kind: mounts.ROBind, Src: src, Dst: src})
			break
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// resolve follows every symlink in p on the host, as the kernel would, and
// returns the path it names. Components must exist.
func resolve(h Host, p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	// Not cleaned first: "a/.." is the parent of what a points to.
	done := "/"
	rest := p
	for hops := 0; rest != ""; {
		var name string
		name, rest, _ = strings.Cut(strings.TrimLeft(rest, "/"), "/")
		switch name {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, name)
		fi, err := h.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		t, err := h.Readlink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(t, "/") {
			done = "/"
		}
		// done has no links left, so the target is walked from there.
		rest = t + "/" + rest
	}
	return done, nil
}

// isSocket reports whether the host path p (already resolved) is a socket.
func isSocket(h Host, p string) bool {
	fi, err := h.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSocket != 0
}

// showsAt returns every path of the view where the host path hostPath
// appears: through the read-only root or a bind whose source holds it,
// unless a later op covers that path.
func showsAt(view []mounts.Op, hostPath string) []string {
	var out []string
	for i, op := range view {
		var at string
		switch op.Kind {
		case mounts.RootRO:
			at = hostPath
		case mounts.Bind, mounts.ROBind, mounts.DevBind:
			if !mounts.Within(hostPath, op.Src) {
				continue
			}
			at = path.Join(op.Dst, strings.TrimPrefix(hostPath, op.Src))
		default:
			continue
		}
		covered := false
		for _, later := range view[i+1:] {
			// A HidePrivate walk covers only what it finds private;
			// a socket there still shows.
			if later.Kind != mounts.MaskSocket && later.Kind != mounts.HidePrivate && later.Kind != mounts.SocketDir && mounts.Within(at, later.Dst) {
				covered = true
				break
			}
		}
		if !covered && !contains(out, at) {
			out = append(out, at)
		}
	}
	return out
}

// hideSockets returns the socket masks for view and the bind-backs of the
// allowed sockets, to go after every other op. Warnings name allowed paths
// that are missing.
//
// sockDirs are the socket directories (mounts.SocketDir) for the directories
// of the read-only root that hold a masked socket, to go right after the
// view's RootRO: a mask lies on the socket's inode, and the host's unlink
// of it (a service restart re-creating its socket) detaches the mask in
// every namespace; a socket bound there later under a new name was never
// masked. A directory with host mounts below it (or "/") keeps the masks
// alone: an overlay would hide those mounts.
func hideSockets(view []mounts.Op, h Host, allow []string) (ops, sockDirs []mounts.Op, warnings []string, err error) {
	allowed := map[string]bool{}
	var backs []mounts.Op
	for _, a := range allow {
		p, err := mounts.CleanAbs(a)
		if err != nil {
			return nil, nil, nil, errf("--allow-socket: %v", err)
		}
		target, err := resolve(h, p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				warnings = append(warnings, fmt.Sprintf("--allow-socket %s: no such socket on the host; nothing to allow", p))
				continue
			}
			return nil, nil, nil, errf("--allow-socket %s: %v", p, unwrapPathErr(err))
		}
		if !isSocket(h, target) {
			return nil, nil, nil, errf("--allow-socket %s: %s is not a socket (to show a file or directory use --ro-bind)", p, target)
		}
		if !allowed[target] {
			allowed[target] = true
			backs = append(backs, mounts.Op{Kind: mounts.ROBind, Src: target, Dst: target})
		}
	}
	listed, truncated, lerr := h.UnixSockets()
	if lerr != nil {
		warnings = append(warnings, fmt.Sprintf("cannot list the host's Unix sockets (%v): only those under /run are hidden", lerr))
	}
	if truncated {
		warnings = append(warnings, fmt.Sprintf("the host has more than %d Unix sockets; only the first %d listed were checked for masking (those under /run are hidden regardless)", MaxListedSockets, MaxListedSockets))
	}
	// Candidates: each listed socket, and every socket in a directory
	// that holds one. /proc/net/unix gives the name a socket was bound
	// at; a socket bound under a temporary name and renamed into place, or
	// a hard link beside it, lives on under a name the list never shows.
	seen := map[string]bool{}
	var cands []string
	addCand := func(t string) {
		if !seen[t] && !allowed[t] {
			seen[t] = true
			cands = append(cands, t)
		}
	}
	table := mountTable(h) // read once: the aliases and socketDirs ask it
	aliases := hostAliases(table)
	dirs := map[string]string{} // resolved directories: sockets share a few
	// sweep resolves the host directory d once and, where it shows in the
	// view, adds every socket in it; it returns the resolved path ("" when
	// d does not resolve).
	sweep := func(d string) string {
		if dir, ok := dirs[d]; ok {
			return dir
		}
		dir, err := resolve(h, d)
		if err != nil {
			dir = ""
		}
		dirs[d] = dir
		if dir != "" && showsAnywhere(view, aliases, dir) {
			if ents, err := h.ReadDir(dir); err == nil {
				for i, e := range ents {
					if i == maxSweptEntries {
						break
					}
					if e.Type()&fs.ModeSocket != 0 {
						addCand(path.Join(dir, e.Name()))
					}
				}
			}
		}
		return dir
	}
	for _, d := range sweptSocketDirs {
		sweep(d)
	}
	for _, s := range listed {
		if !path.IsAbs(s) {
			continue // bound by a relative path: where is unknown
		}
		s = path.Clean(s)
		dir := sweep(path.Dir(s))
		if dir == "" {
			continue
		}
		// bind() creates the socket at exactly the path it is given (a
		// final symlink is not followed), so only the directory needs
		// resolving. Whether it shows in the view is asked first: most
		// sockets live under /run, /tmp or a home, which are covered,
		// and need no stat at all.
		addCand(path.Join(dir, path.Base(s)))
	}
	var masks []string
	masked := map[string]bool{}
	for _, target := range cands {
		checked := false
		// The socket shows at its own path and at every other place the
		// host mounts its filesystem (a bind mount of its directory).
		for k, hp := range aliases(target) {
			ats := showsAt(view, hp)
			if len(ats) == 0 {
				continue
			}
			if !checked {
				if !isSocket(h, target) {
					break
				}
				checked = true
			}
			// Another path is a socket for the caller too, or the
			// sandbox cannot reach it either (a directory it may not
			// search, a mount point hidden by a later mount).
			if k > 0 && !isSocket(h, hp) {
				continue
			}
			for _, at := range ats {
				if !masked[at] {
					masked[at] = true
					masks = append(masks, at)
				}
			}
		}
	}
	sort.Strings(masks)
	for _, m := range masks {
		ops = append(ops, mounts.Op{Kind: mounts.MaskSocket, Dst: m})
	}
	var below []string // host mount points, for socketDirs
	if len(masks) > 0 {
		for _, m := range table {
			below = append(below, m.Point)
		}
	}
	return append(ops, backs...), socketDirs(view, masks, below), warnings, nil
}

// socketDirs returns a SocketDir op for the directory of each mask that
// the view shows through its read-only root (not a bind, which may be
// writable or show another tree), unless it is "/" or a host mount point
// lies below it.
func socketDirs(view []mounts.Op, masks, hostMounts []string) []mounts.Op {
	var out []mounts.Op
	seen := map[string]bool{}
	for _, m := range masks {
		d := path.Dir(m)
		if d == "/" || seen[d] || !viaRoot(view, d) {
			continue
		}
		seen[d] = true
		nested := false
		for _, p := range hostMounts {
			if p != d && mounts.Within(p, d) {
				nested = true
				break
			}
		}
		if !nested {
			out = append(out, mounts.Op{Kind: mounts.SocketDir, Dst: d})
		}
	}
	return out
}

// viaRoot reports whether the view's path p comes from its read-only
// root: no op that places a tree (a bind, a tmpfs, an overlay...) holds
// it. Masks, walks, covers and files do not place a tree at p.
func viaRoot(view []mounts.Op, p string) bool {
	for i := len(view) - 1; i >= 0; i-- {
		op := view[i]
		switch op.Kind {
		case mounts.RootRO:
			return true
		case mounts.MaskSocket, mounts.HidePrivate, mounts.SocketDir, mounts.ReadOnly, mounts.File, mounts.Symlink:
			continue
		}
		if mounts.Within(p, op.Dst) {
			return false
		}
	}
	return false
}

// showsAnywhere reports whether the host path p, or another path of it
// through a host bind mount, shows in the view.
func showsAnywhere(view []mounts.Op, aliases func(string) []string, p string) bool {
	for _, a := range aliases(p) {
		if len(showsAt(view, a)) > 0 {
			return true
		}
	}
	return false
}

// HostMount is one line of the host's mount table: the filesystem
// (device), the directory of it mounted (root), and where (mount point).
type HostMount struct {
	Dev, Root, Point string
}

// MountLister is a Host that can list its mount table, so that a socket
// is masked at every place a host bind mount shows it. A Host without it
// gets no aliases.
type MountLister interface {
	Mounts() ([]HostMount, error)
}

// Mounts reads /proc/self/mountinfo.
func (OSHost) Mounts() ([]HostMount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return ParseMountinfo(string(b)), nil
}

// ParseMountinfo returns the device, root and mount point of each line.
func ParseMountinfo(s string) []HostMount {
	var out []HostMount
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		out = append(out, HostMount{Dev: f[2], Root: mounts.UnescapeMountinfo(f[3]), Point: mounts.UnescapeMountinfo(f[4])})
	}
	return out
}

// mountTable is h's mount table; nil when h cannot list it.
func mountTable(h Host) []HostMount {
	ml, ok := h.(MountLister)
	if !ok {
		return nil
	}
	table, err := ml.Mounts()
	if err != nil {
		return nil
	}
	return table
}

// hostAliases returns a function giving every host path at which the
// (resolved) host path p shows: p itself, and the same file through each
// other mount of its filesystem that includes it and is not covered by a
// mount on top (table: the host's mount table, see mountTable).
func hostAliases(table []HostMount) func(string) []string {
	if len(table) == 0 {
		return func(p string) []string { return []string{p} }
	}
	// top returns the index of the mount that shows p: the deepest mount
	// point holding it, the last one mounted when several are stacked.
	// One map lookup per ancestor of p.
	points := map[string]int{}
	byDev := map[string][]int{}
	for i, m := range table {
		points[m.Point] = i
		byDev[m.Dev] = append(byDev[m.Dev], i)
	}
	top := func(p string) int {
		for q := p; ; q = path.Dir(q) {
			if i, ok := points[q]; ok {
				return i
			}
			if q == "/" || q == "." {
				return -1
			}
		}
	}
	return func(p string) []string {
		out := []string{p}
		i := top(p)
		if i < 0 {
			return out
		}
		m := table[i]
		inFS := path.Join(m.Root, strings.TrimPrefix(p, m.Point))
		for _, j := range byDev[m.Dev] {
			n := table[j]
			if j == i || !mounts.Within(inFS, n.Root) {
				continue
			}
			a := path.Join(n.Point, strings.TrimPrefix(inFS, n.Root))
			if a != p && top(a) == j && !contains(out, a) {
				out = append(out, a)
			}
		}
		return out
	}
}

// ShownAt returns the paths inside the plan's view where the host file
// hostPath shows (its symlinks followed; through the read-only root, a
// bind, or another host mount of the same file), for a file that must
// stay outside (run's --ssh-key-file). A file that cannot be resolved is
// reported at its own path, to be safe.
func (p *Plan) ShownAt(hostPath string) []string {
	h := OSHost{}
	r, err := resolve(h, hostPath)
	if err != nil {
		return []string{hostPath}
	}
	var out []string
	for _, a := range hostAliases(mountTable(h))(r) {
		for _, at := range showsAt(p.Mounts, a) {
			if !contains(out, at) {
				out = append(out, at)
			}
		}
	}
	return out
}
