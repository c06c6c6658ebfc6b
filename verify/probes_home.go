package verify

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// The home probes (issue 27): what a previous session left in the trees
// sessions write must not shape this session's mounts, and the
// credentials that live under ~/.cache and ~/.local/share must not be
// visible.

func homeProbes() []Item {
	return []Item{
		{"P81", "a link left for the next session became a mount", linkMountProbe},
		{"P82", "read a credential under ~/.cache or ~/.local/share", homeCredentialProbe},
	}
}

// topMounts is the file system type of the topmost mount at each mount
// point (mountinfo lists mounts in the order they were made).
func topMounts(e *Env) map[string]string {
	out := map[string]string{}
	f, err := os.Open(e.path("/proc/self/mountinfo"))
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && len(fields) > 4 {
				out[mounts.UnescapeMountinfo(fields[4])] = fields[i+1]
			}
		}
	}
	return out
}

// linkMountProbe looks for what the two-session escape leaves: a mount
// made at a link's target. The shadow mounts per-session directories
// (overlays) below the home only; an overlay on top of the home itself,
// /proc, /run, /etc, /home, /sys or /dev was put there through a link (a
// previous session's ~/.claude/local -> $HOME or /proc). And any link
// below ~/.claude that leads out of it to an overlay's mount point is
// one that was followed.
func linkMountProbe(e *Env) (Status, string) {
	top := topMounts(e)
	if len(top) == 0 {
		return Inconclusive, "cannot read /proc/self/mountinfo"
	}
	for _, p := range []string{e.Home, "/proc", "/run", "/etc", "/home", "/sys", "/dev"} {
		if top[p] == "overlay" {
			return Escaped, fmt.Sprintf("an overlay is mounted on %s: a link a session left (such as ~/.claude/local -> %s) was followed at launch", p, p)
		}
	}
	claude := filepath.Join(e.Home, ".claude")
	var found string
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		ents, err := os.ReadDir(e.path(dir))
		if err != nil {
			return
		}
		for _, d := range ents {
			p := filepath.Join(dir, d.Name())
			if d.Type()&os.ModeSymlink != 0 {
				t, err := os.Readlink(e.path(p))
				if err != nil {
					continue
				}
				if !filepath.IsAbs(t) {
					t = filepath.Join(dir, t)
				}
				t = filepath.Clean(t)
				if !mounts.Within(t, claude) && top[t] == "overlay" && found == "" {
					found = fmt.Sprintf("%s -> %s, and an overlay is mounted there: the link was followed at launch", p, t)
				}
				continue
			}
			if d.IsDir() && depth < 3 {
				walk(p, depth+1)
			}
		}
	}
	walk(claude, 0)
	if found != "" {
		return Escaped, found
	}
	return Blocked, "no mount made through a link: nothing on the home, /proc, /run, /etc, and no link below ~/.claude leads to a per-session mount"
}

// homeSecrets are credentials, history and sockets found readable under
// the bulk bind-backs before issue 27, relative to the home.
var homeSecrets = []string{
	".cache/huggingface/token", ".cache/huggingface/stored_tokens", ".cache/git/credential",
	".local/share/keyrings", ".local/share/python_keyring", ".local/share/mkcert/rootCA-key.pem",
	".local/share/docker/containers", ".local/share/containers/auth.json", ".local/share/uv/credentials",
	".local/share/fish/fish_history", ".local/share/zsh/history", ".local/share/atuin",
}

// homeCredentialProbe reads each: a readable file, or a directory with
// an entry in it, is ESCAPED.
func homeCredentialProbe(e *Env) (Status, string) {
	for _, rel := range homeSecrets {
		p := filepath.Join(e.Home, rel)
		fi, err := os.Stat(e.path(p))
		if err != nil {
			continue
		}
		if fi.IsDir() {
			if ents, err := os.ReadDir(e.path(p)); err == nil && len(ents) > 0 {
				return Escaped, fmt.Sprintf("%s is visible, holding %s", p, ents[0].Name())
			}
			continue
		}
		if f, err := os.Open(e.path(p)); err == nil {
			f.Close()
			return Escaped, p + " is readable"
		}
	}
	return Blocked, "none of " + strings.Join(homeSecrets, ", ") + " is visible below the home"
}
