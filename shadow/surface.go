package shadow

import (
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
