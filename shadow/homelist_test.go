package shadow

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// resolver follows the fake host's links: links maps a link to its
// target (absolute, or relative to the link's directory).
func resolver(h host, links map[string]string) func(string) (string, error) {
	return func(p string) (string, error) {
		p = path.Clean(p)
		out := "/"
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		for i := 0; i < len(parts); i++ {
			q := path.Join(out, parts[i])
			if t, ok := links[q]; ok {
				if !path.IsAbs(t) {
					t = path.Join(out, t)
				}
				rest := append(strings.Split(strings.TrimPrefix(path.Clean(t), "/"), "/"), parts[i+1:]...)
				parts, i, out = rest, -1, "/"
				continue
			}
			if _, ok := h[q]; !ok {
				return "", &fs.PathError{Op: "resolve", Path: p, Err: fs.ErrNotExist}
			}
			out = q
		}
		return out, nil
	}
}

// withLinks adds links to the fake host (as link entries) and its resolver.
func withLinks(h host, in Inputs, links map[string]string) Inputs {
	for l := range links {
		h[l] = entry{link: true}
	}
	in.Resolve = resolver(h, links)
	return in
}

// A link a session leaves below ~/.claude (or any tree sessions write)
// never becomes the next launch's mount source: ~/.claude/local -> $HOME,
// /proc, /run, /etc, a relative ".." link, and the same one level higher
// up (a nested entry below an allow-write tree). Fails without confine:
// the overlay's source is the link's target (the real home, /proc...).
func TestSessionLinkNeverMountSource(t *testing.T) {
	for name, tc := range map[string]struct {
		links  map[string]string
		conf   func(*Config)
		dst    string
		target string
	}{
		"local->home":     {map[string]string{"/home/u/.claude/local": "/home/u"}, nil, "/home/u/.claude/local", "/home/u"},
		"local->proc":     {map[string]string{"/home/u/.claude/local": "/proc"}, nil, "/home/u/.claude/local", "/proc"},
		"local->run":      {map[string]string{"/home/u/.claude/local": "/run"}, nil, "/home/u/.claude/local", "/run"},
		"local->etc":      {map[string]string{"/home/u/.claude/local": "/etc"}, nil, "/home/u/.claude/local", "/etc"},
		"local->relative": {map[string]string{"/home/u/.claude/local": "../.."}, nil, "/home/u/.claude/local", "/home"},
		"nested": {map[string]string{"/home/u/.local/share/uv": "/etc"}, func(c *Config) {
			c.AllowWrite = []string{"/home/u/.local/share"}
		}, "/home/u/.local/share/uv/python", "/etc"},
		"allow-write-below-workspace": {map[string]string{"/home/u/project/cache": "/home/u"}, func(c *Config) {
			c.AllowWrite = []string{"/home/u/project/cache"}
		}, "/home/u/project/cache", "/home/u"},
	} {
		t.Run(name, func(t *testing.T) {
			h := fullHost()
			for _, d := range []string{"/proc", "/run", "/etc", "/home", "/etc/python", "/home/u/.local"} {
				h[d] = entry{dir: true}
			}
			in := withLinks(h, inputs(h, "-p", "x"), tc.links)
			if _, ok := tc.links[tc.dst]; !ok {
				h[tc.dst] = entry{dir: true} // what stat sees through the link higher up
			}
			if tc.conf != nil {
				tc.conf(&in.Config)
			}
			l, err := Build(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range l.Options.Ops {
				if op.Kind.HasSource() && op.Dst == tc.dst {
					t.Errorf("mounted through the session's link: %v", op)
				}
				if op.Kind.HasSource() && op.Src == tc.target && op.Dst != op.Src {
					t.Errorf("the link's target became a source: %v", op)
				}
			}
			if !slices.ContainsFunc(l.Warnings, func(w string) bool { return strings.Contains(w, "symbolic link") }) {
				t.Errorf("no warning for the link: %q", l.Warnings)
			}
		})
	}
}

// ~/.claude linked by the user to a shared directory (install
// --shared-config) keeps working: ~/.claude/local is found below the
// link's target, shown exact (a link swapped in later fails the mount).
func TestSharedClaudeLocalStillShown(t *testing.T) {
	h := fullHost()
	h["/home"] = entry{dir: true}
	delete(h, "/home/u/.claude")
	h["/shared"], h["/shared/claude"], h["/shared/claude/local"] = entry{dir: true}, entry{dir: true}, entry{dir: true}
	in := withLinks(h, inputs(h, "-p", "x"), map[string]string{"/home/u/.claude": "/shared/claude"})
	h["/home/u/.claude/local"] = entry{dir: true} // what stat sees through the link
	l, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	var got []mounts.Op
	for _, op := range l.Options.Ops {
		if op.Dst == "/home/u/.claude/local" || op.Dst == "/home/u/.claude" {
			got = append(got, op)
		}
	}
	want := []mounts.Op{
		{Kind: mounts.Bind, Src: "/shared/claude", Dst: "/home/u/.claude", Optional: true},
		{Kind: mounts.Overlay, Src: "/shared/claude/local", Dst: "/home/u/.claude/local", Optional: true, Exact: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ops %v\nwant %v", got, want)
	}
}

// The home's credential and host-executed places under ~/.cache and
// ~/.local/share are not shown: only listed entries are.
func TestHomeEntriesDenyByDefault(t *testing.T) {
	h := fullHost()
	secret := []string{".cache/huggingface", ".local/share/keyrings", ".local/share/python_keyring", ".local/share/mkcert",
		".local/share/docker", ".local/share/fish", ".cache/git", ".local/share/cargo", ".cache/black", ".local/share/nautilus",
		".cache/fontconfig", ".local/share/uv", ".local/share/uv/credentials", ".local/share/uv/tools"}
	for _, s := range secret {
		h["/home/u/"+s] = entry{dir: true}
	}
	h["/home/u/.cache/p10k-instant-prompt-u.zsh"] = entry{}
	h["/home/u/.cache/uv"], h["/home/u/.local/share/uv/python"] = entry{dir: true}, entry{dir: true}
	h["/home/u/.npm"], h["/home/u/.cache/claude-cli-nodejs"] = entry{dir: true}, entry{dir: true}
	l, err := Build(inputs(h, "-p", "x"))
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]mounts.Kind{}
	for _, op := range l.Options.Ops {
		if op.Kind.HasSource() && (strings.HasPrefix(op.Dst, "/home/u/.cache") || strings.HasPrefix(op.Dst, "/home/u/.local/share") || strings.HasPrefix(op.Dst, "/home/u/.npm")) {
			shown[strings.TrimPrefix(op.Dst, "/home/u/")] = op.Kind
		}
	}
	want := map[string]mounts.Kind{".cache/uv": mounts.Overlay, ".local/share/uv/python": mounts.Overlay,
		".npm": mounts.Overlay, ".cache/claude-cli-nodejs": mounts.Bind}
	if fmt.Sprint(shown) != fmt.Sprint(want) {
		t.Errorf("shown %v\nwant %v", shown, want)
	}
	// The user's entries: a mode replaced, one added.
	in := inputs(h, "-p", "x")
	h["/home/u/.cache/huggingface/hub"] = entry{dir: true}
	for _, v := range []string{".cache/huggingface/hub session", "~/.cache/uv ro"} {
		e, err := ParseHomeEntry(v)
		if err != nil {
			t.Fatal(err)
		}
		in.Config.HomeEntry = append(in.Config.HomeEntry, e)
	}
	l, err = Build(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]mounts.Kind{}
	for _, op := range l.Options.Ops {
		if op.Dst == "/home/u/.cache/uv" || op.Dst == "/home/u/.cache/huggingface/hub" {
			got[op.Dst] = op.Kind
		}
	}
	if got["/home/u/.cache/uv"] != mounts.ROBind || got["/home/u/.cache/huggingface/hub"] != mounts.Overlay || len(got) != 2 {
		t.Errorf("with home-entry lines: %v", got)
	}
}

func TestParseHomeEntry(t *testing.T) {
	for _, v := range []string{".cache/foo ro", "~/.local/share/bar rw", ".npm session", "go/pkg/mod session",
		".cache/huggingface/hub session", ".cache/a/b rw"} {
		if _, err := ParseHomeEntry(v); err != nil {
			t.Errorf("%q refused: %v", v, err)
		}
	}
	for _, v := range []string{"", ".cache/foo", ".cache/foo rx", "/home/u/.cache/foo ro", ".cache/../.ssh ro", ".cache ro",
		".local/share ro", ".ssh ro", ".config/foo ro", ".cache//foo ro", ".cache/foo/ ro", "./.cache/foo ro",
		".cache/huggingface ro", ".cache/huggingface/token ro", ".cache/git session", ".local/share/keyrings ro",
		".local/share/python_keyring ro", ".local/share/mkcert ro", ".local/share/docker session", ".local/share/fish session",
		".local/share/uv rw", ".local/share/uv session", ".local/share/claude ro", ".local/share/applications rw",
		".cache/pre-commit rw", ".local/share/nvim/site rw", ".npm rw", ".cache/foo ro extra"} {
		if e, err := ParseHomeEntry(v); err == nil {
			t.Errorf("%q accepted: %+v", v, e)
		}
	}
	// The defaults obey the rules users' entries do.
	for _, e := range HomeEntries {
		if _, err := ParseHomeEntry(e.Path + " " + string(e.Mode)); err != nil {
			t.Errorf("default entry %s: %v", e.Path, err)
		}
		if e.Reason == "" {
			t.Errorf("default entry %s has no reason", e.Path)
		}
	}
}
