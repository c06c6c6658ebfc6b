package plan

import (
	"encoding/json"
	"io/fs"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/mounts"
)

// fakeFS answers stat for a fixed set of host paths.
type fakeFS map[string]bool // path -> isDir

type fakeInfo struct{ dir bool }

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return map[bool]fs.FileMode{true: fs.ModeDir, false: 0}[f.dir] }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.dir }
func (f fakeInfo) Sys() any           { return nil }

func (f fakeFS) stat(p string) (fs.FileInfo, error) {
	if dir, ok := f[p]; ok {
		return fakeInfo{dir}, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
}

var host = fakeFS{"/home/u": true, "/home/u/work": true, "/home/u/.cache": true, "/etc/passwd": false}

func base(extra ...mounts.Op) []mounts.Op {
	ops := []mounts.Op{
		{Kind: mounts.RootRO, Dst: "/"}, {Kind: mounts.Dev, Dst: "/dev"}, {Kind: mounts.Proc, Dst: "/proc"},
		{Kind: mounts.Cgroup, Dst: "/sys/fs/cgroup"},
		{Kind: mounts.Tmpfs, Dst: "/tmp", Mode: 0o1777}, {Kind: mounts.Tmpfs, Dst: "/home/u", Mode: 0o700},
	}
	return append(ops, extra...)
}

func TestBuild(t *testing.T) {
	cases := []struct {
		name    string
		opts    Options
		want    *Plan
		wantErr string
	}{
		{
			name: "defaults",
			opts: Options{Command: []string{"true"}, Home: "/home/u", Cwd: "/home/u/work", UID: 1000, GID: 1000},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/home/u/work", UID: 1000, GID: 1000, Net: NetJail, Egress: &Egress{}, Mounts: base()},
		},
		{
			name: "root stays root, net none, hostname",
			opts: Options{Command: []string{"id"}, Home: "/home/u", Net: NetNone, Hostname: "box"},
			want: &Plan{Argv: []string{"id"}, Env: []string{}, Dir: "/", Net: NetNone, Hostname: "box", Mounts: base()},
		},
		{
			name: "host root gets the private-file walks before its own ops and the kernel covers last, after the late ops",
			opts: Options{Command: []string{"true"}, Home: "/home/u", Bare: true, HostRoot: true, PidsLimit: 500,
				Late: []mounts.Op{{Kind: mounts.File, Dst: "/etc/resolv.conf", Data: "x"}}},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/", Net: NetJail, Egress: &Egress{}, HostRoot: true, PidsLimit: 500,
				Mounts: append(append(append(base()[:4], hidePrivate()...), mounts.Op{Kind: mounts.File, Dst: "/etc/resolv.conf", Data: "x"}), mounts.KernelCovers()...)},
		},
		{
			name: "no process limit",
			opts: Options{Command: []string{"true"}, Home: "/home/u", Bare: true, PidsLimit: -1},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/", Net: NetJail, Egress: &Egress{}, Mounts: base()[:4]},
		},
		{
			name:    "process limit below the kernel's reserve",
			opts:    Options{Command: []string{"true"}, PidsLimit: 100},
			wantErr: "--pids-limit 100: use a number from 300",
		},
		{
			name: "bare drops the default tmpfs",
			opts: Options{Command: []string{"true"}, Home: "/home/u", Bare: true},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/", Net: NetJail, Egress: &Egress{}, Mounts: base()[:4]},
		},
		{
			name: "missing home gets no tmpfs",
			opts: Options{Command: []string{"true"}, Home: "/nonexistent"},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/", Net: NetJail, Egress: &Egress{}, Mounts: base()[:5]},
		},
		{
			name: "user ops in order, cleaned, default tmpfs mode, try dropped when missing",
			opts: Options{Command: []string{"true"}, Home: "/home/u", Ops: []mounts.Op{
				{Kind: mounts.Bind, Src: "/home/u/work/", Dst: "/home/u/work"},
				{Kind: mounts.ROBind, Src: "/etc/passwd", Dst: "/x/passwd"},
				{Kind: mounts.Bind, Src: "/nope", Dst: "/nope", Optional: true},
				{Kind: mounts.ROBind, Src: "/home/u/.cache", Dst: "/home/u/.cache", Optional: true},
				{Kind: mounts.Tmpfs, Dst: "/var//cache"},
				{Kind: mounts.Mask, Dst: "/home/u/.ssh"},
			}},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/", Net: NetJail, Egress: &Egress{}, Mounts: base(
				mounts.Op{Kind: mounts.Bind, Src: "/home/u/work", Dst: "/home/u/work"},
				mounts.Op{Kind: mounts.ROBind, Src: "/etc/passwd", Dst: "/x/passwd"},
				mounts.Op{Kind: mounts.ROBind, Src: "/home/u/.cache", Dst: "/home/u/.cache", Optional: true},
				mounts.Op{Kind: mounts.Tmpfs, Dst: "/var/cache", Mode: 0o755},
				mounts.Op{Kind: mounts.Mask, Dst: "/home/u/.ssh"},
			)},
		},
		{
			name: "environment: cleared, keep-env copies, setenv wins in order",
			opts: Options{Command: []string{"env"}, Environ: []string{"TERM=xterm", "GH_TOKEN=secret", "LANG=C"},
				KeepEnv: []string{"TERM", "LANG", "UNSET"}, SetEnv: [][2]string{{"A", "1"}, {"LANG", "C.UTF-8"}}},
			want: &Plan{Argv: []string{"env"}, Env: []string{"TERM=xterm", "LANG=C.UTF-8", "A=1"}, Dir: "/", Net: NetJail, Egress: &Egress{}, Mounts: base()[:5]},
		},
		{
			name: "chdir is strict",
			opts: Options{Command: []string{"true"}, Chdir: "/srv/x/", Cwd: "/home/u"},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/srv/x", DirStrict: true, Net: NetJail, Egress: &Egress{}, Mounts: base()[:5]},
		},
		{
			name: "jail with allow entries, late ops last",
			opts: Options{Command: []string{"true"}, Net: NetJail, Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")},
				Ops:  []mounts.Op{{Kind: mounts.Tmpfs, Dst: "/x"}},
				Late: []mounts.Op{{Kind: mounts.File, Dst: "/etc/resolv.conf", Data: "nameserver 192.0.2.1\n"}}},
			want: &Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/", Net: NetJail, Egress: &Egress{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")}}, Mounts: append(base()[:5],
				mounts.Op{Kind: mounts.Tmpfs, Dst: "/x", Mode: 0o755},
				mounts.Op{Kind: mounts.File, Dst: "/etc/resolv.conf", Data: "nameserver 192.0.2.1\n"})},
		},
		{name: "allow without the jail", opts: Options{Command: []string{"x"}, Net: NetHost, Allow: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")}}, wantErr: "apply to the egress jail"},
		{name: "empty command", opts: Options{}, wantErr: "no command given"},
		{name: "empty argv0", opts: Options{Command: []string{""}}, wantErr: "no command given"},
		{name: "bad net", opts: Options{Command: []string{"x"}, Net: "jail2"}, wantErr: `unknown network mode "jail2"`},
		{name: "relative source", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{{Kind: mounts.Bind, Src: "work", Dst: "/w"}}}, wantErr: `--bind: source: "work" is not an absolute path`},
		{name: "relative destination", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{{Kind: mounts.Tmpfs, Dst: "w"}}}, wantErr: `--tmpfs: destination: "w" is not an absolute path`},
		{name: "relative try source is still an error", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{{Kind: mounts.ROBind, Src: "w", Dst: "/w", Optional: true}}}, wantErr: `--ro-bind-try: source`},
		{name: "missing source", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{{Kind: mounts.ROBind, Src: "/nope", Dst: "/w"}}}, wantErr: "--ro-bind: source /nope: does not exist (use the -try form"},
		{name: "root destination", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{{Kind: mounts.Tmpfs, Dst: "/"}}}, wantErr: "cannot replace the root"},
		{name: "destination inside a mask", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{
			{Kind: mounts.Mask, Dst: "/home/u/.ssh"}, {Kind: mounts.Bind, Src: "/home/u/work", Dst: "/home/u/.ssh/keys"}}}, wantErr: "inside the masked path /home/u/.ssh"},
		{name: "tmpfs inside a mask", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{
			{Kind: mounts.Mask, Dst: "/srv"}, {Kind: mounts.Tmpfs, Dst: "/srv/a"}}}, wantErr: "inside the masked path /srv"},
		{name: "base kinds cannot be requested", opts: Options{Command: []string{"x"}, Ops: []mounts.Op{{Kind: mounts.Proc, Dst: "/proc2"}}}, wantErr: `operation "proc" cannot be requested`},
		{name: "bad env name", opts: Options{Command: []string{"x"}, SetEnv: [][2]string{{"A=B", "1"}}}, wantErr: `invalid variable name "A=B"`},
		{name: "bad keep-env name", opts: Options{Command: []string{"x"}, KeepEnv: []string{""}}, wantErr: "--keep-env: invalid variable name"},
		{name: "env name with a space", opts: Options{Command: []string{"x"}, SetEnv: [][2]string{{"A B", "1"}}}, wantErr: `--setenv: invalid variable name "A B": use letters, digits and _`},
		{name: "env name starting with a digit", opts: Options{Command: []string{"x"}, SetEnv: [][2]string{{"1A", "1"}}}, wantErr: `invalid variable name "1A"`},
		{name: "env name with a dash", opts: Options{Command: []string{"x"}, KeepEnv: []string{"A-B"}}, wantErr: `--keep-env: invalid variable name "A-B"`},
		{name: "relative chdir", opts: Options{Command: []string{"x"}, Chdir: "sub"}, wantErr: "--chdir:"},
		{name: "bad hostname", opts: Options{Command: []string{"x"}, Hostname: "a b"}, wantErr: "invalid hostname"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Stat = host.stat
			c.opts.Host = noHost
			got, err := Build(c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want.PidsLimit == 0 && c.opts.PidsLimit >= 0 {
				c.want.PidsLimit = DefaultPidsLimit
			}
			unsized(got)
			if !reflect.DeepEqual(got, c.want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(c.want, "", " ")
				t.Errorf("plan:\n%s\nwant:\n%s", g, w)
			}
		})
	}
}

// The plan is the hand-over format: it must survive a JSON round trip
// unchanged, since that is how it reaches the init stage.
func TestPlanJSONRoundTrip(t *testing.T) {
	p, err := Build(Options{Command: []string{"sh", "-c", "echo hi"}, Home: "/home/u", SetEnv: [][2]string{{"A", "x y"}},
		Ops: []mounts.Op{{Kind: mounts.Bind, Src: "/home/u/work", Dst: "/w"}}, Stat: host.stat})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q Plan
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, &q) {
		t.Errorf("round trip changed the plan:\n%+v\n%+v", p, q)
	}
}

// A field the reader does not know, in the plan or in one of its mount
// operations, is refused, not dropped: the plan crosses to the sandbox's
// init this way, and a stage binary of another version must not leave out
// a wall it has no field for. (The stage channel refuses unknown fields,
// but a type with its own UnmarshalJSON decided for itself.)
func TestPlanJSONRefusesUnknownFields(t *testing.T) {
	p, err := Build(Options{Command: []string{"true"}, Ops: []mounts.Op{{Kind: mounts.Bind, Src: "/home/u/work", Dst: "/w"}}, Stat: host.stat})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	top["maskEverything"] = true
	withTop, _ := json.Marshal(top)
	delete(top, "maskEverything")
	ops := top["mounts"].([]any)
	ops[len(ops)-1].(map[string]any)["readOnlyUnlessNew"] = false
	withOp, _ := json.Marshal(top)
	for name, in := range map[string][]byte{"plan": withTop, "mount op": withOp} {
		var q Plan
		if err := json.Unmarshal(in, &q); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("a %s with an unknown field: %v, want refused", name, err)
		}
	}
}

func TestLookPath(t *testing.T) {
	exe := map[string]bool{"/usr/bin/sh": true, "/opt/bin/tool": true}
	isExec := func(p string) bool { return exe[p] }
	cases := []struct {
		argv0 string
		env   []string
		want  string
		ok    bool
	}{
		{"sh", nil, "/usr/bin/sh", true},
		{"tool", nil, "", false},
		{"tool", []string{"PATH=/opt/bin:/usr/bin"}, "/opt/bin/tool", true},
		{"sh", []string{"PATH=/opt/bin"}, "", false},
		{"./x", nil, "./x", true},
		{"/abs/y", nil, "/abs/y", true},
	}
	for _, c := range cases {
		got, ok := LookPath(c.argv0, c.env, isExec)
		if got != c.want || ok != c.ok {
			t.Errorf("LookPath(%q, %q) = %q, %v; want %q, %v", c.argv0, c.env, got, ok, c.want, c.ok)
		}
	}
}

// Build must work with the real os.Stat too (the default).
func TestBuildRealStat(t *testing.T) {
	dir := t.TempDir()
	if _, err := Build(Options{Command: []string{"true"}, Ops: []mounts.Op{{Kind: mounts.Bind, Src: dir, Dst: "/w"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Options{Command: []string{"true"}, Ops: []mounts.Op{{Kind: mounts.Bind, Src: dir + "/missing", Dst: "/w"}}}); err == nil {
		t.Fatal("a missing source must be an error")
	}
	_ = os.Remove(dir)
}

// A plan crosses to the engine's stages as JSON: every string the caller
// gave (argument, environment value, working directory, mount paths and
// file data) comes back with the same bytes, UTF-8 or not, and the rest of
// the plan is unchanged.
func TestPlanJSONExactBytes(t *testing.T) {
	odd := "\xff\xfe-\x80"
	p := Plan{
		Argv: []string{"/bin/echo", "a" + odd}, Env: []string{"V=" + odd, "W=é"}, Dir: "/w" + odd, DirStrict: true,
		UID: 1000, GID: 1000, Hostname: "h", Net: NetJail, Egress: &Egress{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}, Routes: []string{"r"}},
		Mounts: []mounts.Op{
			{Kind: mounts.Bind, Src: "/s" + odd, Dst: "/d" + odd, Optional: true},
			{Kind: mounts.File, Dst: "/f", Data: "data" + odd, Mode: 0o444},
			{Kind: mounts.Symlink, Dst: "/l", Target: "t" + odd},
			{Kind: mounts.Tmpfs, Dst: "/tmp", Mode: 0o1777},
		},
		HostRoot: true, PidsLimit: 77,
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var got Plan
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("round trip changed the plan:\n got %#v\nwant %#v\njson %s", got, p, b)
	}
	// Ordinary UTF-8 stays readable, in the usual field order.
	b, _ = json.Marshal(Plan{Argv: []string{"true"}, Env: []string{}, Dir: "/é", Net: NetNone, Mounts: []mounts.Op{{Kind: mounts.Tmpfs, Dst: "/x", Mode: 0o755}}})
	want := `{"argv":["true"],"env":[],"dir":"/é","uid":0,"gid":0,"net":"none","mounts":[{"kind":"tmpfs","dst":"/x","mode":"0755"}],"pidsLimit":0}`
	if string(b) != want {
		t.Errorf("plain plan JSON:\n got %s\nwant %s", b, want)
	}
}

func hidePrivate() []mounts.Op {
	var ops []mounts.Op
	for _, t := range []string{"/etc", "/root", "/var", "/srv", "/opt", "/home", "/boot", "/usr/local/etc", "/mnt", "/media", "/"} {
		ops = append(ops, mounts.Op{Kind: mounts.HidePrivate, Dst: t})
	}
	return ops
}

// unsized drops the tmpfs sizes from a plan (TestTmpfsSizes checks them)
// so the other tests compare the operations alone.
func unsized(p *Plan) *Plan {
	p.TmpfsSize = 0
	for i := range p.Mounts {
		p.Mounts[i].Size = 0
	}
	return p
}

// Every writable tmpfs gets a size: by default a share of a quarter of the
// RAM, else what was asked; read-only kinds get none; too small is refused.
func TestTmpfsSizes(t *testing.T) {
	defer func(f func() uint64) { TotalRAM = f }(TotalRAM)
	TotalRAM = func() uint64 { return 8 << 30 }
	ops := []mounts.Op{{Kind: mounts.Tmpfs, Dst: "/scratch"}, {Kind: mounts.Overlay, Src: "/home/u/.cache", Dst: "/home/u/.cache"}}
	p, err := Build(Options{Command: []string{"true"}, Home: "/home/u", Stat: host.stat, Host: noHost, Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	// /dev (its /dev/shm), /tmp, the home, /scratch, the overlay: five.
	if want := int64(8<<30) / 4 / 5 &^ (1<<20 - 1); p.TmpfsSize != want {
		t.Errorf("default size %d, want %d", p.TmpfsSize, want)
	}
	n := 0
	for _, op := range p.Mounts {
		switch op.Kind {
		case mounts.Tmpfs, mounts.Dev, mounts.Overlay:
			n++
			if op.Size != p.TmpfsSize {
				t.Errorf("%s: size %d, want %d", op, op.Size, p.TmpfsSize)
			}
		default:
			if op.Size != 0 {
				t.Errorf("%s: size %d on a kind that writes nothing", op, op.Size)
			}
		}
	}
	if n != 5 {
		t.Errorf("%d sized ops, want 5: %v", n, p.Mounts)
	}
	p, err = Build(Options{Command: []string{"true"}, Home: "/home/u", Stat: host.stat, Host: noHost, TmpfsSize: 64 << 20})
	if err != nil || p.TmpfsSize != 64<<20 {
		t.Fatalf("asked 64M: %v %v", p, err)
	}
	if _, err := Build(Options{Command: []string{"true"}, Host: noHost, TmpfsSize: 4096}); err == nil || !strings.Contains(err.Error(), "--tmpfs-size") {
		t.Errorf("a 4 KiB tmpfs: %v, want a refusal naming --tmpfs-size", err)
	}
	for in, want := range map[string]int64{"512M": 512 << 20, "2G": 2 << 30, "1048576": 1 << 20, "64MiB": 64 << 20, "1k": 1024} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "M", "-1M", "1.5G", "lots", "99999999999T"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q): want an error", bad)
		}
	}
}

// A uid 0 that is not the host's (root in a rootless Podman container)
// gets the private-file walk too, without the host root's kernel covers;
// a plan for a non-root caller gets neither.
func TestRootCallerWalksPrivateTrees(t *testing.T) {
	count := func(p *Plan) (walks int) {
		for _, op := range p.Mounts {
			if op.Kind == mounts.HidePrivate {
				walks++
			}
		}
		return walks
	}
	base := Options{Command: []string{"true"}, Home: "/home/u", Stat: host.stat, Host: noHost}
	p, err := Build(base)
	if err != nil {
		t.Fatal(err)
	}
	if w := count(p); w != 0 {
		t.Errorf("a non-root caller's plan walks %d trees", w)
	}
	root := base
	root.RootCaller = true
	if p, err = Build(root); err != nil {
		t.Fatal(err)
	}
	if w := count(p); w != len(mounts.PrivateTrees)+1 || p.HostRoot {
		t.Errorf("a root caller's plan walks %d trees (want %d: PrivateTrees, then /), hostRoot %v", w, len(mounts.PrivateTrees)+1, p.HostRoot)
	}
}
