package verify

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// The probes of issue 28: a root caller reading host files the host's
// other users cannot (P64), the kernel's page-frame and allocator files
// (P65), the host's cgroup tree (P66), a writable tmpfs without a size
// (P67).

// maxPrivateLook bounds the entries P64 looks at.
const maxPrivateLook = 50000

func rootviewProbes() []Item {
	return []Item{
		{"P64", "read a host file only root may read (root callers)", privateFileProbe},
		{"P65", "read the kernel's page-frame and allocator files", kernelPagesProbe},
		{"P66", "see the host's cgroup tree", hostCgroupProbe},
		{"P67", "write a tmpfs without a size limit", tmpfsSizeProbe},
	}
}

// privateFileProbe walks the trees a root caller's plan hides private
// files in and reports ESCAPED for a regular file the sandbox reads that
// the host's other users may not (mounts.Private), outside the session's
// own home and workspace (bound on purpose).
func privateFileProbe(e *Env) (Status, string) {
	if os.Getuid() != 0 {
		return Blocked, "not root inside: the host's permissions decide what is read"
	}
	groups := []uint32{uint32(os.Getgid())}
	if gs, err := unix.Getgroups(); err == nil {
		for _, g := range gs {
			groups = append(groups, uint32(g))
		}
	}
	own := func(p string) bool {
		for _, d := range []string{e.Home, e.Workspace} {
			if d != "" && mounts.Within(p, filepath.Clean(d)) {
				return true
			}
		}
		return false
	}
	looked := 0
	var found string
	stop := errors.New("stop")
	// The listed trees first, then what else the root's top holds (the
	// plan's last walk of "/": mounts.SkipAtRoot says what it leaves).
	trees := slices.Clone(mounts.PrivateTrees)
	if ents, err := os.ReadDir(e.path("/")); err == nil {
		for _, d := range ents {
			if !mounts.SkipAtRoot(d.Name()) && d.Type()&fs.ModeSymlink == 0 {
				trees = append(trees, "/"+d.Name())
			}
		}
	}
	for _, tree := range trees {
		_ = filepath.WalkDir(e.path(tree), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if looked++; looked > maxPrivateLook {
				return stop
			}
			rel := strings.TrimPrefix(p, e.Root)
			if own(rel) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			var st unix.Stat_t
			if unix.Lstat(p, &st) != nil || !mounts.Private(st.Mode, st.Uid, st.Gid, uint32(os.Getuid()), groups) {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return nil
			}
			defer f.Close()
			if n, _ := f.Read(make([]byte, 1)); n > 0 || st.Size == 0 {
				found = rel
				return stop
			}
			return nil
		})
		if found != "" || looked > maxPrivateLook {
			break
		}
	}
	if found != "" {
		return Escaped, fmt.Sprintf("%s is readable inside, and the host's other users may not read it", found)
	}
	if looked > maxPrivateLook {
		return Blocked, fmt.Sprintf("none found in the first %d entries", maxPrivateLook)
	}
	return Blocked, fmt.Sprintf("no host file only root may read is readable (%d entries looked at)", looked)
}

// kernelPageFiles leak the host's physical memory layout and allocator
// state (see docs/threat-model.md).
var kernelPageFiles = []string{"/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup", "/proc/slabinfo",
	"/proc/pagetypeinfo", "/proc/vmallocinfo", "/sys/kernel/mm/page_idle/bitmap"}

func kernelPagesProbe(e *Env) (Status, string) {
	for _, p := range kernelPageFiles {
		f, err := os.Open(e.path(p))
		if err != nil {
			continue
		}
		n, _ := f.Read(make([]byte, 64))
		f.Close()
		if n > 0 {
			return Escaped, fmt.Sprintf("%s reads (%d bytes)", p, n)
		}
	}
	return Blocked, "none of " + strings.Join(kernelPageFiles, ", ") + " reads"
}

// hostCgroupProbe reports ESCAPED when /sys/fs/cgroup shows more than the
// sandbox's own cgroup namespace: cgroup v1 hierarchies (a directory per
// controller), a cgroup2 mount rooted above the sandbox's cgroup (its
// /proc/self/cgroup path is not "/"), or the hierarchy's root cgroup (no
// cgroup.type: the whole host tree).
func hostCgroupProbe(e *Env) (Status, string) {
	dir := e.path("/sys/fs/cgroup")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		return Blocked, "/sys/fs/cgroup is empty or absent"
	}
	if _, err := os.Stat(dir + "/cgroup.procs"); err != nil {
		var names []string
		for _, en := range ents {
			if en.IsDir() {
				names = append(names, en.Name())
			}
		}
		if len(names) > 0 {
			return Escaped, "/sys/fs/cgroup holds the host's hierarchies: " + strings.Join(names, ", ")
		}
		return Blocked, "/sys/fs/cgroup holds no hierarchy"
	}
	b, _ := os.ReadFile(e.path("/proc/self/cgroup"))
	self := ""
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "0::"); ok {
			self = v
		}
	}
	if self != "/" {
		return Escaped, fmt.Sprintf("the cgroup2 mount is rooted above the sandbox's cgroup (%q): its siblings show", self)
	}
	if _, err := os.Stat(dir + "/cgroup.type"); err != nil {
		return Escaped, "/sys/fs/cgroup is the hierarchy's root cgroup: the host's whole tree shows"
	}
	return Blocked, "/sys/fs/cgroup is the sandbox's own cgroup namespace"
}

// tmpfsSizeProbe reports ESCAPED for a writable tmpfs mounted without a
// size: the kernel's default, half the RAM for each, charged to no
// process.
func tmpfsSizeProbe(e *Env) (Status, string) {
	b, err := os.ReadFile(e.path("/proc/self/mountinfo"))
	if err != nil {
		return Inconclusive, fmt.Sprintf("read mountinfo: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 || g[0] != "tmpfs" {
			continue
		}
		if !hasOpt(f[5], "rw") || !hasOpt(g[2], "rw") {
			continue
		}
		n++
		if !strings.Contains(","+g[2], ",size=") {
			return Escaped, fmt.Sprintf("the tmpfs at %s is writable with no size limit (the kernel's default, half the RAM)", mounts.UnescapeMountinfo(f[4]))
		}
	}
	return Blocked, fmt.Sprintf("each of the %d writable tmpfs mounts has a size", n)
}

func hasOpt(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}
