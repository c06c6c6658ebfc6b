package shadow

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// gitOps keeps a repository's executable configuration read-only: the
// hooks, the config (core.hooksPath, core.fsmonitor, aliases, filters...),
// config.worktree, commondir, the .git entry itself (so it cannot be
// renamed away and replaced), a gitdir named by a .git file and a
// core.hooksPath inside the writable area. It looks at the workspace and
// its direct subdirectories, and the submodules .gitmodules names.
// Missing hooks directories are created on the host first (git's own
// layout has them; a missing one would be a place to plant hooks).
//
// The workspace is the session's, and so is how many gitdirs it holds:
// past MaxGitdirs (each costs a few mounts) the launch is refused rather
// than built with thousands of mounts, or with gitdirs left writable.
func gitOps(in Inputs, writable []string) (ops []mounts.Op, createDirs []string, err error) {
	if len(writable) == 0 {
		return nil, nil, nil
	}
	ws := writable[0]
	// inside judges where a path really leads on the host: the workspace
	// is the session's, so a symlink in it (ws/link -> /etc) is its too,
	// and a .git file or .gitmodules naming a gitdir through one must not
	// make the next launch bind that host directory writable.
	var wreal []string
	for _, w := range writable {
		if r := resolveLoose(in, w); r != "" {
			wreal = append(wreal, r)
		}
	}
	inside := func(p string) bool {
		r := resolveLoose(in, p)
		return r != "" && slices.ContainsFunc(wreal, func(w string) bool { return mounts.Within(r, w) })
	}
	isDir := func(p string) bool { fi, err := in.Stat(p); return err == nil && fi.IsDir() }
	exists := func(p string) bool { _, err := in.Lstat(p); return err == nil }
	read := func(p string) string {
		if in.ReadFile == nil {
			return ""
		}
		b, err := in.ReadFile(p)
		if err != nil {
			return ""
		}
		return string(b)
	}
	seen := map[string]bool{}
	ro := func(p string) {
		if !seen[p] && inside(p) && exists(p) {
			seen[p] = true
			ops = append(ops, mounts.Op{Kind: mounts.ROBind, Src: p, Dst: p})
		}
	}
	// hooksAt covers one core.hooksPath value, as seen from the worktree
	// top (a relative one is relative to it; "" when unknown).
	hooksAt := func(top, hp string) {
		if hp == "" {
			return
		}
		if strings.HasPrefix(hp, "~/") {
			hp = in.Home + hp[1:]
		} else if !path.IsAbs(hp) {
			if top == "" {
				return
			}
			hp = path.Join(top, hp)
		}
		hp = path.Clean(hp)
		if !inside(hp) || seen[hp] {
			return
		}
		seen[hp] = true
		if !exists(hp) {
			createDirs = append(createDirs, hp)
		}
		// Optional: created just before the launch; where the caller
		// cannot create it, the session (same uid) cannot either.
		ops = append(ops, mounts.Op{Kind: mounts.ROBind, Src: hp, Dst: hp, Optional: true})
	}
	// The system's and the user's levels cover every repository (see
	// gitlevels.go), the workspace itself too: a repository the session
	// creates there would run them on the host.
	hostHP := hostHooksPaths(in)
	for _, hp := range hostHP {
		hooksAt(ws, hp)
	}
	// hooksDir covers every core.hooksPath that applies to the worktree
	// top of gitdir: the host's levels, common's config, the gitdir's
	// config.worktree, and what they include.
	hooksDir := func(top, gitdir, common string) {
		vals := append(slices.Clone(hostHP), hooksPathsOf(in, common+"/config")...)
		vals = append(vals, hooksPathsOf(in, gitdir+"/config.worktree")...)
		for _, hp := range vals {
			hooksAt(top, hp)
		}
	}
	// commonOf is the gitdir's common directory (commondir names it).
	commonOf := func(gitdir string) string {
		c := strings.TrimSpace(read(gitdir + "/commondir"))
		if c == "" {
			return gitdir
		}
		if !path.IsAbs(c) {
			c = path.Join(gitdir, c)
		}
		return path.Clean(c)
	}
	// protect covers one gitdir whose worktree is top ("" when unknown:
	// a submodule's or linked worktree's gitdir found from its parent).
	gitdirs := 0
	var protect func(top, gitdir string, depth int)
	protect = func(top, gitdir string, depth int) {
		if err != nil || !inside(gitdir) || !isDir(gitdir) {
			return
		}
		if seen[gitdir] {
			hooksDir(top, gitdir, commonOf(gitdir))
			return
		}
		if gitdirs++; gitdirs > MaxGitdirs {
			err = fmt.Errorf("%s holds more than %d git directories (repositories, submodules, worktrees; the last one found: %s): each one's hooks and config are kept read-only with mounts of their own, and a session can make any number of them. Remove the ones you do not need, or set writable-git-hooks = true in %s to leave every repository's hooks writable", ws, MaxGitdirs, gitdir, ConfigPath)
			return
		}
		seen[gitdir] = true
		// Exact: the gitdir is in the workspace, which a concurrent
		// session can change between this plan and the mount; a symlink
		// put there meanwhile must fail the bind, not be followed.
		ops = append(ops, mounts.Op{Kind: mounts.Bind, Src: gitdir, Dst: gitdir, Exact: true})
		common := commonOf(gitdir)
		if common != gitdir {
			ro(gitdir + "/commondir")
		}
		ro(gitdir + "/config.worktree")
		if inside(common) {
			ro(common + "/config")
			if h := common + "/hooks"; !seen[h] {
				seen[h] = true
				if !isDir(h) {
					createDirs = append(createDirs, h)
				}
				ops = append(ops, mounts.Op{Kind: mounts.ROBind, Src: h, Dst: h, Optional: true})
			}
		}
		hooksDir(top, gitdir, common)
		// Submodules' and linked worktrees' gitdirs live inside this one.
		if depth < 3 && in.ReadDir != nil {
			for _, sub := range []string{"modules", "worktrees"} {
				names, _ := in.ReadDir(gitdir + "/" + sub)
				for _, n := range names {
					protect("", gitdir+"/"+sub+"/"+n, depth+1)
				}
			}
		}
	}
	// repo covers a worktree top whose .git is a directory or a file.
	repo := func(top string) {
		dotgit := top + "/.git"
		fi, err := in.Lstat(dotgit)
		if err != nil {
			return
		}
		if fi.IsDir() {
			protect(top, dotgit, 0)
			return
		}
		// A .git symlink (a session may leave one: `git init` elsewhere in
		// the workspace, then a link) leads git on the host to its
		// target: that gitdir is protected where it really is. The link
		// itself cannot be a mount point; a change of its target during
		// the session is reported (watchList).
		if fi.Mode()&fs.ModeSymlink != 0 {
			if in.Resolve != nil {
				if g, err := in.Resolve(dotgit); err == nil && isDir(g) {
					protect(top, g, 0)
				}
			}
			return
		}
		if !fi.Mode().IsRegular() {
			return
		}
		ro(dotgit) // the pointer itself: rewritten, it names another config
		c, ok := strings.CutPrefix(strings.TrimSpace(read(dotgit)), "gitdir:")
		if !ok {
			return
		}
		g := strings.TrimSpace(c)
		if !path.IsAbs(g) {
			g = path.Join(top, g)
		}
		protect(top, path.Clean(g), 0)
	}
	repo(ws)
	if in.ReadDir != nil {
		names, _ := in.ReadDir(ws)
		slices.Sort(names)
		for _, n := range names {
			if n != ".git" && isDir(ws+"/"+n) {
				repo(ws + "/" + n)
			}
		}
	}
	for _, p := range submodulePaths(read(ws + "/.gitmodules")) {
		if q := path.Clean(path.Join(ws, p)); inside(q) && q != ws {
			repo(q)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return ops, createDirs, nil
}

// MaxGitdirs bounds the gitdirs gitOps protects in one launch: far more
// than a workspace of repositories has (each takes two to five mounts),
// far fewer than the kernel's mounts per namespace (fs.mount-max, 100,000).
const MaxGitdirs = 1000

// submodulePaths returns the path = values of a .gitmodules text.
func submodulePaths(gm string) []string {
	var out []string
	for _, line := range strings.Split(gm, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.TrimSpace(k) == "path" {
			if p := strings.Trim(strings.TrimSpace(v), "\""); p != "" && !path.IsAbs(p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// resolveLoose follows the symlinks of the host path p (in.Resolve; none
// when it is nil); a missing tail is kept as it is. It returns "" where an
// existing component cannot be resolved (a dangling symlink, a loop):
// where such a path leads is not known.
func resolveLoose(in Inputs, p string) string {
	p = path.Clean(p)
	if in.Resolve == nil {
		return p
	}
	rest := ""
	for q := p; ; q = path.Dir(q) {
		r, err := in.Resolve(q)
		if err == nil {
			return path.Join(r, rest)
		}
		if q == "/" || q == "." {
			return ""
		}
		if in.Lstat != nil {
			if _, lerr := in.Lstat(q); lerr == nil {
				return "" // it exists, yet does not resolve
			}
		}
		rest = path.Join(path.Base(q), rest)
	}
}
