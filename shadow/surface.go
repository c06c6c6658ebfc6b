package shadow

import (
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// The writable surface (issue 14): a session may write data the host
// reads, never something the host later executes without the user
// choosing to. The lists below are the entries of ~/.local/share and
// ~/.cache that hold programs, plugins, completions or commands the host
// runs. Since issue 27 neither tree is bound back in bulk (homelist.go);
// the lists now refuse a home-entry = ... rw for any of them.

// shareExec are the entries of ~/.local/share the host executes from.
var shareExec = []string{
	"bash-completion",            // completions/*: sourced by the host's bash on Tab
	"zsh",                        // site-functions, completions: autoloaded by zsh
	"fish",                       // vendor_{completions,functions,conf}.d: run by fish
	"nushell",                    // vendor/autoload: run by nu at start
	"direnv",                     // allow/: which .envrc files the host's direnv runs
	"nvim",                       // site/pack, lazy, mason: plugins and servers nvim runs
	"vim",                        // site/pack for vim's XDG layout
	"uv",                         // tools/ and python/: uv tools and uv-managed Pythons' scripts
	"pipx",                       // venvs/ behind ~/.local/bin entries
	"pypoetry",                   // poetry's own environment
	"virtualenvs",                // pipenv's environments
	"hatch",                      // hatch environments
	"pdm",                        // pdm's environments
	"jupyter",                    // kernels/*/kernel.json: argv run by the host's Jupyter
	"gh",                         // extensions/: run by the host's gh
	"helm",                       // plugins/: run by the host's helm
	"mise", "rtx", "fnm", "pnpm", // tool versions and shims on the host's PATH
	"flatpak",                                                                  // exports/bin on the host's PATH
	"systemd",                                                                  // user/: units the host's systemd --user starts
	"dbus-1",                                                                   // services/: D-Bus activation runs Exec=
	"gnome-shell", "plasma", "kservices5", "kservices6", "nautilus", "konsole", // desktop extensions, scripts, profiles
	"zinit", "sheldon", "antidote", "tmux", // shell and tmux plugin managers
	"chezmoi",                  // source state applied (and run_ scripts run) by the host
	"containers",               // podman images the host runs
	"code-server", "JetBrains", // editor extensions and plugins
	"zed",              // extensions, language servers and the Node the editor runs
	"Steam",            // steam.sh and the client runtime the host's steam launcher runs
	"gem",              // user gems and their bin/ on the host's PATH (Arch's GEM_HOME)
	"virtualenv",       // seed wheels (pip, setuptools) copied into every new venv
	"docker",           // rootless Docker's data-root: images the host runs
	"omf", "oh-my-zsh", // fish and zsh frameworks sourced at every start
	"coursier", "swiftly", "bob", "aquaproj-aqua", // bin/ directories on the host's PATH
	"kio", "kwin", "xfce4", "cinnamon", // service menus (Exec=), KWin scripts, XFCE helpers, Cinnamon applets
	"Anki2", "krita", "gedit", "rhythmbox", "vlc", "qutebrowser", // application plugins and user scripts
	"lutris", "bottles", // Wine prefixes and runners the host launches
}

// cacheExec are the entries of ~/.cache that hold programs the host runs
// or links into what it runs.
var cacheExec = []string{
	"pre-commit",        // hook environments run by the host's git commit
	"pre-commit-zsh",    // (older pre-commit layouts)
	"uv",                // uvx tool environments run in place; wheels linked into venvs
	"pip",               // built wheels installed into the host's venvs
	"pypoetry",          // poetry's default virtualenvs
	"go-build",          // compiled packages linked into the host's go builds
	"ccache", "sccache", // compiled objects reused by the host's builds
	"bazel", "bazelisk", // build outputs and bazel binaries
	"ms-playwright", "puppeteer", "cypress", "electron", "selenium", // browsers and drivers
	"deno", "node-gyp", "yarn", "pnpm", // JavaScript modules and headers
	"huggingface", "torch", // pickled models and hub code, executed on load
	"JetBrains", "golangci-lint", "zig", "coursier",
}

// forgeOps gives the forge CLIs their credentials file read-write and
// everything that names a command read-only. The directory itself is a
// tmpfs: a file missing on the host and created inside lasts the session.
//
// gh keeps tokens in hosts.yml and settings (pager, editor, browser,
// shell aliases) in config.yml. glab keeps tokens and settings together
// in config.yml, so that file stays writable (token refresh) and its
// command keys are watched instead (see Watch); aliases.yml is read-only.
func forgeOps(h func(string) string) (ops []mounts.Op, create []string) {
	gh, glab := h(".config/gh"), h(".config/glab-cli")
	ops = append(ops,
		mounts.Op{Kind: mounts.Tmpfs, Dst: gh, Mode: 0o700},
		mounts.Op{Kind: mounts.Bind, Src: gh + "/hosts.yml", Dst: gh + "/hosts.yml", Optional: true},
		mounts.Op{Kind: mounts.ROBind, Src: gh + "/config.yml", Dst: gh + "/config.yml", Optional: true},
		mounts.Op{Kind: mounts.Tmpfs, Dst: glab, Mode: 0o700},
		mounts.Op{Kind: mounts.Bind, Src: glab + "/config.yml", Dst: glab + "/config.yml", Optional: true},
		mounts.Op{Kind: mounts.ROBind, Src: glab + "/aliases.yml", Dst: glab + "/aliases.yml", Optional: true},
	)
	// gh reads an empty hosts.yml as "not logged in", so it can exist
	// before the first login and a login inside persists.
	return ops, []string{gh + "/hosts.yml"}
}

// tmpDirs are shared with every program on the machine: never a
// workspace or an allow-write path, nor anything that holds one.
var tmpDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// sharedTmp returns the shared temporary directory p is or holds, or "".
// A directory below one (/tmp/project) is the user's own and allowed.
func sharedTmp(p string) string {
	for _, t := range tmpDirs {
		if mounts.Within(t, p) {
			return t
		}
	}
	return ""
}

// gitOps keeps a repository's executable configuration read-only: the
// hooks, the config (core.hooksPath, core.fsmonitor, aliases, filters...),
// config.worktree, commondir, the .git entry itself (so it cannot be
// renamed away and replaced), a gitdir named by a .git file and a
// core.hooksPath inside the writable area. It looks at the workspace and
// its direct subdirectories, and the submodules .gitmodules names.
// Missing hooks directories are created on the host first (git's own
// layout has them; a missing one would be a place to plant hooks).
func gitOps(in Inputs, writable []string) (ops []mounts.Op, createDirs []string) {
	if len(writable) == 0 {
		return nil, nil
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
	// hooksDir covers a core.hooksPath in common's config, as seen from
	// the worktree top (a relative one is relative to it).
	hooksDir := func(top, common string) {
		hp := hooksPath(read(common + "/config"))
		if hp == "" || top == "" {
			return
		}
		if strings.HasPrefix(hp, "~/") {
			hp = in.Home + hp[1:]
		} else if !path.IsAbs(hp) {
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
	var protect func(top, gitdir string, depth int)
	protect = func(top, gitdir string, depth int) {
		if !inside(gitdir) || !isDir(gitdir) {
			return
		}
		if seen[gitdir] {
			hooksDir(top, commonOf(gitdir))
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
		hooksDir(top, common)
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
	return ops, createDirs
}

// hooksPath returns core.hooksPath from a git config file's text (the
// last one wins, as in git), unquoted.
func hooksPath(cfg string) string {
	section, val := "", ""
	for _, line := range strings.Split(cfg, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			section = strings.ToLower(strings.Trim(strings.Fields(strings.Trim(line, "[]"))[0], "\""))
			if i := strings.IndexByte(line, ']'); i >= 0 && strings.TrimSpace(line[i+1:]) != "" {
				line = strings.TrimSpace(line[i+1:]) // [core] hooksPath = x
			} else {
				continue
			}
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && section == "core" && strings.EqualFold(strings.TrimSpace(k), "hookspath") {
			val = strings.Trim(strings.TrimSpace(v), "\"")
		}
	}
	return val
}

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
