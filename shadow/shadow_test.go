package shadow

import (
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// host is a fake host filesystem: path -> entry.
type host map[string]entry

type entry struct {
	dir, link bool
	dev       uint64
	data      string
}

type info struct {
	e entry
}

type devSys struct{ dev uint64 }

func (d devSys) Device() uint64 { return d.dev }

func (i info) Name() string { return "x" }
func (i info) Size() int64  { return 0 }
func (i info) Mode() fs.FileMode {
	switch {
	case i.e.link:
		return fs.ModeSymlink
	case i.e.dir:
		return fs.ModeDir
	}
	return 0
}
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.e.dir }
func (i info) Sys() any           { return devSys{i.e.dev} }

func (h host) stat(p string) (fs.FileInfo, error) {
	if e, ok := h[p]; ok {
		e.link = false
		if h[p].link {
			e.dir = true // our fake symlinks point at directories
		}
		return info{e}, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
}

func (h host) lstat(p string) (fs.FileInfo, error) {
	if e, ok := h[p]; ok {
		return info{e}, nil
	}
	return nil, &fs.PathError{Op: "lstat", Path: p, Err: fs.ErrNotExist}
}

func (h host) readDir(dir string) ([]string, error) {
	if e, ok := h[dir]; !ok || !e.dir {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	var out []string
	for p := range h {
		if parent, name := filepath.Split(p); filepath.Clean(parent) == dir && name != "" {
			out = append(out, name)
		}
	}
	return out, nil
}

func (h host) readFile(p string) ([]byte, error) {
	if e, ok := h[p]; ok && !e.dir {
		return []byte(e.data), nil
	}
	return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
}

// fullHost has everything the bind-back list can use.
func fullHost() host {
	d := entry{dir: true}
	f := entry{}
	return host{
		"/home/u": d, "/home/u/.claude": d, "/home/u/.claude.json": f, "/home/u/.cache": d,
		"/home/u/.local/share": d, "/home/u/.local/share/applications": d, "/home/u/.local/share/claude": d,
		"/home/u/.config/gh": d, "/home/u/.config/glab-cli": d, "/home/u/.config/Code": d,
		"/home/u/.local/bin/uv": f, "/home/u/.local/bin/uvx": f, "/home/u/.ssh": d,
		"/home/u/project": d, "/home/u/project/sub": d, "/workspaces/repo": d, "/workspaces/repo/pkg": d,
		"/run/user": d, "/run/secrets": d, "/dev/null": f, "/data": d,
		RealBinary: f, "/venv/bin": d,
	}
}

func inputs(h host, args ...string) Inputs {
	return Inputs{
		Args: args, Home: "/home/u", User: "u", UID: 1000, GID: 1000, Cwd: "/home/u/project",
		Config: DefaultConfig(), Real: RealBinary, GitName: "U", GitEmail: "u@example.org",
		Environ: []string{"HOME=/home/u", "TERM=xterm-256color", "LANG=C.UTF-8", "GH_TOKEN=ghp_x", "GITHUB_TOKEN=x",
			"ANTHROPIC_API_KEY=sk-x", "SSH_AUTH_SOCK=/tmp/ssh.sock", "DISPLAY=:0", "EPICS_CA_ADDR_LIST=10.1.2.3", "PATH=/home/u/.local/bin:/usr/bin"},
		Stat: h.stat, Lstat: h.lstat, Readable: func(p string) bool { return p == "/etc/shadow" },
		ReadDir: h.readDir, ReadFile: h.readFile,
	}
}

// build runs the shadow and the plan builder, as a launch does.
func build(t *testing.T, in Inputs) (*Launch, *plan.Plan) {
	t.Helper()
	l, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	l.Options.Host = runOnlyHost{}
	p, err := plan.Build(l.Options)
	if err != nil {
		t.Fatal(err)
	}
	return l, p
}

// runOnlyHost has an empty /run and no Unix sockets, so the plan does not
// depend on the machine the tests run on.
type runOnlyHost struct{}

func (runOnlyHost) Lstat(p string) (fs.FileInfo, error) {
	if p == "/run" {
		return os.Lstat("/")
	}
	return nil, &fs.PathError{Op: "lstat", Path: p, Err: fs.ErrNotExist}
}
func (runOnlyHost) Readlink(p string) (string, error) {
	return "", &fs.PathError{Op: "readlink", Path: p, Err: fs.ErrInvalid}
}
func (runOnlyHost) ReadDir(string) ([]fs.DirEntry, error) { return nil, nil }
func (runOnlyHost) UnixSockets() ([]string, bool, error)  { return nil, false, nil }

func dsts(p *plan.Plan, kind mounts.Kind) []string {
	var out []string
	for _, m := range p.Mounts {
		if m.Kind == kind {
			out = append(out, m.Dst)
		}
	}
	return out
}

func env(p *plan.Plan) map[string]string {
	m := map[string]string{}
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func TestBindBackList(t *testing.T) {
	h := fullHost()
	h["/home/u/.local/share/icons"] = entry{dir: true}
	h["/home/u/.local/share/bash-completion"] = entry{dir: true}
	h["/home/u/.cache/pre-commit"] = entry{dir: true}
	h["/home/u/.cache/fontconfig"] = entry{dir: true}
	h["/home/u/.cache/claude-cli-nodejs"] = entry{dir: true}
	h["/home/u/.local/share/uv/python"] = entry{dir: true}
	h["/home/u/.config/gh/hosts.yml"] = entry{}
	h["/home/u/.config/gh/config.yml"] = entry{}
	h["/home/u/.config/glab-cli/config.yml"] = entry{}
	h["/home/u/.config/glab-cli/aliases.yml"] = entry{}
	_, p := build(t, inputs(h, "-p", "hi"))
	binds := dsts(p, mounts.Bind)
	// Issue 27: only listed entries of ~/.cache and ~/.local/share
	// (fontconfig, icons and bash-completion are not).
	want := []string{"/home/u/.claude", "/home/u/.claude.json", "/home/u/.cache/claude-cli-nodejs",
		"/home/u/.config/gh/hosts.yml", "/home/u/.config/glab-cli/config.yml", "/home/u/project"}
	if !slices.Equal(binds, want) {
		t.Errorf("read-write binds %q\nwant %q", binds, want)
	}
	if o := dsts(p, mounts.Overlay); !slices.Equal(o, []string{"/home/u/.cache/pre-commit", "/home/u/.local/share/uv/python"}) {
		t.Errorf("per-session overlays %q", o)
	}
	for _, m := range p.Mounts {
		if strings.Contains(m.Src, ".config/Code") || strings.Contains(m.Dst, ".config/Code") || strings.Contains(m.Dst, ".ssh") {
			t.Errorf("never bound, but: %v", m)
		}
		if m.Kind == mounts.Bind && (m.Dst == "/home/u" || m.Dst == "/home/u/.local/bin" || m.Dst == "/home/u/.config" ||
			m.Dst == "/home/u/.local/share" || m.Dst == "/home/u/.cache" || m.Dst == "/home/u/.config/gh") {
			t.Errorf("a whole directory bound: %v", m)
		}
	}
	tmpfs := dsts(p, mounts.Tmpfs)
	for _, d := range []string{"/tmp", "/home/u", "/run/user", "/run/secrets", "/home/u/.local/share", "/home/u/.cache",
		"/home/u/.local/share/applications", "/home/u/.local/share/claude", "/home/u/.config/gh", "/home/u/.config/glab-cli"} {
		if !slices.Contains(tmpfs, d) {
			t.Errorf("no tmpfs on %s (have %q)", d, tmpfs)
		}
	}
	// The re-masks come after the tmpfs they sit in.
	idx := func(kind mounts.Kind, dst string) int {
		return slices.IndexFunc(p.Mounts, func(m mounts.Op) bool { return m.Kind == kind && m.Dst == dst })
	}
	if idx(mounts.Tmpfs, "/home/u/.local/share/claude") < idx(mounts.Tmpfs, "/home/u/.local/share") {
		t.Error("~/.local/share/claude is re-masked before ~/.local/share is mounted")
	}
	ro := dsts(p, mounts.ROBind)
	for _, d := range []string{"/home/u/.local/bin/claude", "/home/u/.netrc", "/home/u/.Xauthority", "/home/u/.ICEauthority",
		"/home/u/.local/bin/uv", "/home/u/.local/bin/uvx", "/home/u/.config/gh/config.yml", "/home/u/.config/glab-cli/aliases.yml"} {
		if !slices.Contains(ro, d) {
			t.Errorf("no read-only bind on %s (have %q)", d, ro)
		}
	}
	if m := dsts(p, mounts.Mask); !slices.Equal(m, []string{"/etc/shadow"}) {
		t.Errorf("masks %q, want only the readable /etc/shadow", m)
	}
	files := dsts(p, mounts.File)
	if !slices.Contains(files, "/home/u/.gitconfig") {
		t.Errorf("no generated gitconfig (files %q)", files)
	}
	if p.Argv[0] != "/home/u/.local/bin/claude" {
		t.Errorf("command %q", p.Argv)
	}
}

func TestMissingSourcesAreSkipped(t *testing.T) {
	h := host{"/home/u": {dir: true}, "/home/u/project": {dir: true}, RealBinary: {}, "/dev/null": {}}
	l, p := build(t, inputs(h))
	for _, m := range p.Mounts {
		if m.Kind == mounts.Bind && m.Dst != "/home/u/project" {
			t.Errorf("bound although missing on the host: %v", m)
		}
		if m.Dst == "/run/user" || m.Dst == "/run/secrets" || strings.HasPrefix(m.Dst, "/home/u/.local/share") {
			t.Errorf("mounted although the host lacks it: %v", m)
		}
	}
	if !slices.Contains(l.CreateDirs, "/home/u/.config/gh") {
		t.Errorf("S4: create %q %q", l.CreateFiles, l.CreateDirs)
	}
	want := []StateEntry{{Name: ".claude", Dir: true}, {Name: ".claude.json", Data: "{}\n"}}
	if !slices.Equal(l.State, want) {
		t.Errorf("Claude Code's state to create: %+v, want %+v", l.State, want)
	}
}

func TestEnvironment(t *testing.T) {
	in := inputs(fullHost())
	in.Config.PassEnv = []string{"EPICS_CA_ADDR_LIST"}
	in.Environ = append(in.Environ, "VIRTUAL_ENV=/venv")
	_, p := build(t, in)
	e := env(p)
	for _, never := range []string{"GH_TOKEN", "GITHUB_TOKEN", "ANTHROPIC_API_KEY", "SSH_AUTH_SOCK", "DISPLAY"} {
		if _, ok := e[never]; ok {
			t.Errorf("%s crossed into the sandbox", never)
		}
	}
	want := map[string]string{
		"TERM": "xterm-256color", "LANG": "C.UTF-8", "EPICS_CA_ADDR_LIST": "10.1.2.3", "VIRTUAL_ENV": "/venv",
		"HOME": "/home/u", "USER": "u", "IS_SANDBOX": "1", "GIT_CONFIG_GLOBAL": "/home/u/.gitconfig", "GIT_CONFIG_SYSTEM": "/dev/null",
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/home/u/.local/bin:/venv/bin",
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("%s = %q inside, want %q", k, e[k], v)
		}
	}
	if len(e) != len(want) {
		t.Errorf("environment %v has more than the allowlist", e)
	}
	if strings.HasPrefix(e["PATH"], "/home/u/.local/bin") {
		t.Error("~/.local/bin is prepended")
	}
	in.Config.PassEnv = []string{"GH_TOKEN"}
	if _, err := Build(in); err == nil || !strings.Contains(err.Error(), "never crosses") {
		t.Errorf("pass-env GH_TOKEN: %v", err)
	}
}

func TestChromeFlags(t *testing.T) {
	cases := map[string][]string{
		"":                       {"--no-chrome"},
		"-p hi":                  {"--no-chrome", "-p", "hi"},
		"--chrome -p hi":         {"--no-chrome", "-p", "hi"},
		"-p --chrome x --chrome": {"--no-chrome", "-p", "x"},
		"--no-chrome --resume":   {"--no-chrome", "--resume"},
	}
	for in, want := range cases {
		if got := ClaudeArgs(strings.Fields(in)); !slices.Equal(got, want) {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
		// The same on the recursion-guard path.
		i := inputs(fullHost(), strings.Fields(in)...)
		i.Environ = append(i.Environ, "IS_SANDBOX=1")
		l, err := Build(i)
		if err != nil || !l.Direct || !slices.Equal(l.Argv[1:], want) || l.Argv[0] != RealBinary {
			t.Errorf("direct %q: %+v %v", in, l, err)
		}
	}
}

func TestWorkspaceResolution(t *testing.T) {
	cases := []struct {
		name    string
		cwd     string
		root    string
		want    string // the workspace bound read-write, "" none
		wantErr string
	}{
		{"cwd is the workspace", "/home/u/project", "", "/home/u/project", ""},
		{"a subdirectory is the workspace", "/home/u/project/sub", "", "/home/u/project/sub", ""},
		{"override wins", "/home/u/project/sub", "/workspaces/repo", "/workspaces/repo", ""},
		{"override from elsewhere", "/tmp", "/workspaces/repo", "/workspaces/repo", ""},
		{"missing cwd is not bound", "/gone", "", "", ""},
		{"missing override is not bound", "/home/u/project", "/workspaces/none", "", ""},
		{"home itself refused", "/home/u", "", "", "holds your home directory"},
		{"root refused", "/", "", "", "holds your home directory"},
		{"override above home refused", "/home/u/project", "/home", "", "holds your home directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := inputs(fullHost())
			in.Cwd, in.Config.WorkspaceRoot = c.cwd, c.root
			l, err := Build(in)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Workspace != c.want {
				t.Errorf("workspace %q, want %q", l.Workspace, c.want)
			}
		})
	}
}

func TestNoForgeAllowWriteAndJail(t *testing.T) {
	in := inputs(fullHost())
	in.Config.NoForge = true
	in.Config.AllowWrite = []string{"/data", "/missing"}
	in.Config.EgressJail = false
	l, p := build(t, in)
	for _, m := range p.Mounts {
		if strings.Contains(m.Dst, ".config/g") {
			t.Errorf("no-forge still binds %v", m)
		}
	}
	if strings.Contains(l.GitConfig, "credential") {
		t.Error("no-forge gitconfig has credential helpers")
	}
	if b := dsts(p, mounts.Bind); !slices.Contains(b, "/data") || slices.Contains(b, "/missing") {
		t.Errorf("allow-write binds %q", b)
	}
	if p.Net != plan.NetHost {
		t.Errorf("egress-jail = 0 gives net %q", p.Net)
	}
	in.Config.EgressJail = true
	_, p = build(t, in)
	if p.Net != plan.NetJail {
		t.Errorf("the jail is not the default: %q", p.Net)
	}
	in.Config.AllowWrite = []string{"/home"}
	if _, err := Build(in); err == nil {
		t.Error("allow-write over the home directory must be refused")
	}
}

func TestRealBinaryMissing(t *testing.T) {
	h := fullHost()
	delete(h, RealBinary)
	_, err := Build(inputs(h))
	if err == nil || !strings.Contains(err.Error(), "re-run the installer") {
		t.Errorf("missing real binary: %v", err)
	}
}

func TestPersistWarning(t *testing.T) {
	h := fullHost()
	h["/"] = entry{dir: true}
	in := inputs(h)
	if l, _ := build(t, in); l.PersistWarning != "" {
		t.Errorf("outside a container, a plain ~/.claude warned: %s", l.PersistWarning)
	}
	in.InContainer = true
	if l, _ := build(t, in); l.PersistWarning == "" {
		t.Error("in a container, a plain ~/.claude on the container's root must warn")
	}
	delete(h, "/home/u/.claude")
	if l, _ := build(t, in); l.PersistWarning == "" {
		t.Error("in a container, a ~/.claude still to be made on the container's root must warn")
	}
	h["/home/u"] = entry{dir: true, dev: 9}
	if l, _ := build(t, in); l.PersistWarning != "" {
		t.Errorf("a home on a volume warned: %s", l.PersistWarning)
	}
	h["/home/u"] = entry{dir: true}
	h["/home/u/.claude"] = entry{link: true}
	if l, _ := build(t, in); l.PersistWarning != "" {
		t.Errorf("a symlinked ~/.claude warned: %s", l.PersistWarning)
	}
	h["/home/u/.claude"] = entry{dir: true, dev: 7}
	if l, _ := build(t, in); l.PersistWarning != "" {
		t.Errorf("a mounted ~/.claude warned: %s", l.PersistWarning)
	}
}

func TestInContainer(t *testing.T) {
	none := func(string) bool { return false }
	if InContainer([]string{"HOME=/h", "CODESPACES=false"}, none) {
		t.Error("no mark, yet a container")
	}
	for _, f := range []string{"/.dockerenv", "/run/.containerenv", "/run/systemd/container"} {
		if !InContainer(nil, func(p string) bool { return p == f }) {
			t.Errorf("%s not taken for a container", f)
		}
	}
	for _, kv := range []string{"container=podman", "KUBERNETES_SERVICE_HOST=10.0.0.1", "CODESPACES=true", "REMOTE_CONTAINERS=true"} {
		if !InContainer([]string{kv}, none) {
			t.Errorf("%s not taken for a container", kv)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// The whole plan of a typical launch, as `claude-sandbox plan --json
// --shadow` prints it, held as golden text: any change to what the shadow
// asks of the engine shows up in review.
func TestPlanGolden(t *testing.T) {
	defer func(f func() uint64) { plan.TotalRAM = f }(plan.TotalRAM)
	plan.TotalRAM = func() uint64 { return 8 << 30 } // the default tmpfs size follows the RAM
	in := inputs(fullHost(), "--chrome", "-p", "fix the bug")
	in.Config.AllowIP = nil
	in.Config.PassEnv = []string{"EPICS_CA_ADDR_LIST"}
	_, p := build(t, in)
	got, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "plan.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got)+"\n" {
		t.Errorf("plan differs from %s (go test ./shadow -update if intended):\n%s", path, got)
	}
}
