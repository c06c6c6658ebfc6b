package shadow

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// Issue 27: ~/.cache and ~/.local/share are deny-by-default. Each becomes
// an empty tmpfs inside; only the entries of a reviewed list (HomeEntries,
// plus the home-entry keys of /etc/claude-sandbox.conf) are shown, each in
// its mode. docs/configuration.md gives the list and the reason for each.

// EntryMode is how a listed home entry is shown inside.
type EntryMode string

// The modes of a home entry.
const (
	// EntryRO binds the host's entry read-only: data the session needs
	// and the host may execute.
	EntryRO EntryMode = "ro"
	// EntrySession overlays it: the host's content readable, writes gone
	// at exit. For caches whose content the host runs or links into what
	// it runs, and that hold no secrets by design.
	EntrySession EntryMode = "session"
	// EntryRW binds it read-write: only data the host never executes and
	// that holds no secrets (Claude Code's own logs).
	EntryRW EntryMode = "rw"
)

// HomeEntry is one listed entry: Path is relative to the home directory.
type HomeEntry struct {
	Path   string    `json:"path"`
	Mode   EntryMode `json:"mode"`
	Reason string    `json:"-"`
}

// HomeEntries is the default list. Kept short on purpose: what a coding
// session needs to be fast, nothing the host keeps secrets in, and never
// read-write for anything the host executes or links into its builds.
var HomeEntries = []HomeEntry{
	{".cache/claude-cli-nodejs", EntryRW, "Claude Code's own logs (MCP server logs): data the host never runs"},
	{".cache/uv", EntrySession, "uv's wheel and source cache: wheels are linked into the host's venvs"},
	{".cache/pip", EntrySession, "pip's HTTP and wheel cache: built wheels are installed into the host's venvs"},
	{".cache/go-build", EntrySession, "Go's build cache: compiled packages are linked into the host's builds"},
	{".cache/pre-commit", EntrySession, "pre-commit's hook environments: run by the host's git commit"},
	{".cache/node-gyp", EntrySession, "Node headers that native modules are compiled against"},
	{".cache/ms-playwright", EntrySession, "Playwright's browsers: programs, large downloads"},
	{".local/share/uv/python", EntrySession, "uv-managed Pythons, which venvs in the workspace link to; programs the host runs (per-session rather than read-only so that uv's lock files and `uv python install` work inside)"},
	{".npm", EntrySession, "npm's tarball cache and npx packages: extracted into node_modules the host runs"},
}

// xdgTrees are the two trees shown deny-by-default; packageCaches are the
// package caches that live outside them by default. An entry may be below
// the first or be (or be below) one of the second; every package cache is
// what the host's builds link in or run from (never rw).
var (
	xdgTrees      = []string{".cache/", ".local/share/"}
	packageCaches = []string{".npm", "go/pkg/mod", ".cargo/registry"}
)

// inPackageCache reports whether p is, or is below, one of packageCaches.
func inPackageCache(p string) bool {
	return slices.ContainsFunc(packageCaches, func(r string) bool { return p == r || strings.HasPrefix(p, r+"/") })
}

// homeSecrets are entries known to hold credentials, history or sockets:
// no home-entry may be one or hold one (an entry below one, such as
// .cache/huggingface/hub, is fine).
var homeSecrets = []string{
	".cache/huggingface/token", ".cache/huggingface/stored_tokens", // Hugging Face tokens
	".cache/git",                                           // git credential-cache's socket (credential/socket)
	".local/share/keyrings", ".local/share/python_keyring", // plaintext keyrings, keyrings.alt
	".local/share/kwalletd", ".local/share/password-store", ".local/share/gopass",
	".local/share/mkcert",                            // mkcert's CA private key
	".local/share/docker", ".local/share/containers", // rootless Docker and Podman: container environments, auth
	".local/share/uv/credentials",                                              // uv auth login
	".local/share/fish/fish_history", ".local/share/zsh", ".local/share/atuin", // shell history
	".local/share/recently-used.xbel", ".local/share/gnupg",
	".local/share/Trash",
}

// shareMask are Claude Code's own writes into ~/.local/share (F4): an empty
// per-session directory, whether or not the host has one.
var shareMask = []string{"applications", "claude"}

// ParseHomeEntry reads a home-entry value: "PATH MODE", PATH relative to
// the home directory, below one of xdgTrees or in one of packageCaches, with no "..", and
// neither a credential location nor a directory holding one.
func ParseHomeEntry(v string) (HomeEntry, error) {
	f := strings.Fields(v)
	if len(f) != 2 {
		return HomeEntry{}, fmt.Errorf("%q: want PATH MODE (like .cache/foo session), MODE one of ro, session, rw", v)
	}
	p, m := f[0], EntryMode(f[1])
	switch m {
	case EntryRO, EntrySession, EntryRW:
	default:
		return HomeEntry{}, fmt.Errorf("%q: mode %q is not ro, session or rw", v, f[1])
	}
	p = strings.TrimPrefix(p, "~/")
	if path.IsAbs(p) || p != path.Clean(p) || slices.Contains(strings.Split(p, "/"), "..") || strings.ContainsRune(p, 0) {
		return HomeEntry{}, fmt.Errorf("%q: the path must be relative to your home directory, clean, with no \"..\" component", p)
	}
	ok := inPackageCache(p) || slices.ContainsFunc(xdgTrees, func(r string) bool { return strings.HasPrefix(p, r) })
	if !ok {
		return HomeEntry{}, fmt.Errorf("%q: an entry must be below .cache/ or .local/share/ (or be one of .npm, go/pkg/mod, .cargo/registry)", p)
	}
	for _, s := range homeSecrets {
		if mounts.Within("/"+s, "/"+p) {
			return HomeEntry{}, fmt.Errorf("%q: it is or holds ~/%s, which holds credentials, history or a socket; name an entry beside it", p, s)
		}
	}
	for _, n := range shareMask {
		if mounts.Within("/.local/share/"+n, "/"+p) {
			return HomeEntry{}, fmt.Errorf("%q: ~/.local/share/%s is Claude Code's own (its binaries, its desktop entries): always an empty per-session directory", p, n)
		}
	}
	if m == EntryRW && executedEntry(p) {
		return HomeEntry{}, fmt.Errorf("%q: the host executes what this entry holds (or links it into its builds): use session or ro, never rw", p)
	}
	return HomeEntry{Path: p, Mode: m, Reason: "/etc/claude-sandbox.conf"}, nil
}

// executedEntry reports whether p is, or is below, an entry of the lists
// of places the host executes from (cacheExec, shareExec), or a package
// cache.
func executedEntry(p string) bool {
	for _, l := range []struct {
		dir   string
		names []string
	}{{".cache/", cacheExec}, {".local/share/", shareExec}} {
		rest, ok := strings.CutPrefix(p, l.dir)
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(rest, "/")
		if slices.Contains(l.names, first) {
			return true
		}
	}
	return inPackageCache(p)
}

// homeEntryOps makes ~/.cache and ~/.local/share empty tmpfses (with the
// host directory's mode) and shows each listed entry that exists on the
// host in its mode; Claude Code's own ~/.local/share entries are masked.
// A later entry for the same path wins (the configuration's over the
// default's). Nothing is created on the host.
func homeEntryOps(in Inputs, home string, extra []HomeEntry) []mounts.Op {
	var ops []mounts.Op
	share := false // ~/.local/share is a directory: Claude Code's own entries are masked in it
	for _, dir := range []string{".cache", ".local/share"} {
		fi, err := in.Stat(home + "/" + dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		share = share || dir == ".local/share"
		mode := mounts.Mode(fi.Mode().Perm())
		if mode == 0 {
			mode = 0o755
		}
		ops = append(ops, mounts.Op{Kind: mounts.Tmpfs, Dst: home + "/" + dir, Mode: mode})
	}
	byPath := map[string]EntryMode{}
	var order []string
	for _, e := range append(slices.Clone(HomeEntries), extra...) {
		if _, ok := byPath[e.Path]; !ok {
			order = append(order, e.Path)
		}
		byPath[e.Path] = e.Mode
	}
	// Parents first, so a nested entry is mounted on top of its parent's.
	slices.SortStableFunc(order, func(a, b string) int { return strings.Count(a, "/") - strings.Count(b, "/") })
	for _, rel := range order {
		p := home + "/" + rel
		if _, err := in.Stat(p); err != nil {
			continue
		}
		kind := map[EntryMode]mounts.Kind{EntryRO: mounts.ROBind, EntrySession: mounts.Overlay, EntryRW: mounts.Bind}[byPath[rel]]
		ops = append(ops, mounts.Op{Kind: kind, Src: p, Dst: p, Optional: true})
	}
	if share {
		for _, n := range shareMask {
			ops = append(ops, mounts.Op{Kind: mounts.Tmpfs, Dst: home + "/.local/share/" + n, Mode: 0o755})
		}
	}
	return ops
}

// confine is the rule of issue 27 for every mount whose source lies below
// a tree a session can write (the source of a read-write bind: ~/.claude,
// ~/.claude.json, the workspace, allow-write, read-write entries): such a
// source is the session's choice, not the user's. Its tree's top is
// resolved as the user set it up (~/.claude may be a link to a shared
// directory), but below it nothing may be a symlink: an op whose source
// has one is dropped with a warning, never followed (a session's
// `ln -s $HOME ~/.claude/local` would otherwise mount the real home in the
// next session). The op kept gets the resolved source and Exact, so a
// link swapped in between this plan and the mount fails the launch.
// skip names ops the rule leaves alone (the workspace itself, which the
// user chose by starting there).
func confine(in Inputs, ops []mounts.Op, skip func(mounts.Op) bool) ([]mounts.Op, []string) {
	var roots []string
	for _, op := range ops {
		if op.Kind == mounts.Bind {
			roots = append(roots, path.Clean(op.Src))
		}
	}
	var out []mounts.Op
	var warns []string
	for _, op := range ops {
		if !op.Kind.HasSource() || op.Exact || skip(op) {
			out = append(out, op)
			continue
		}
		src := path.Clean(op.Src)
		root := ""
		for _, r := range roots {
			if r != src && mounts.Within(src, r) && len(r) > len(root) {
				root = r
			}
		}
		if root == "" {
			out = append(out, op)
			continue
		}
		cur := root
		if in.Resolve != nil {
			r, err := in.Resolve(root)
			if err != nil {
				continue // the tree is gone or a dangling link: nothing below it to show
			}
			cur = path.Clean(r)
		}
		full := cur + "/" + strings.TrimPrefix(src, root+"/")
		missing, link := false, ""
		for _, c := range strings.Split(strings.TrimPrefix(src, root+"/"), "/") {
			cur += "/" + c
			if in.Lstat == nil {
				continue
			}
			fi, err := in.Lstat(cur)
			if err != nil {
				missing = true
				break
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				link = cur
				break
			}
		}
		switch {
		case link != "":
			warns = append(warns, fmt.Sprintf("not shown inside: %s is a symbolic link in %s, which sessions can write (a link there is never followed: remove it if you made it, and look at what made it if you did not)", link, root))
		case missing && op.Optional:
		default:
			op.Src, op.Exact = full, true
			out = append(out, op)
		}
	}
	return out, warns
}
