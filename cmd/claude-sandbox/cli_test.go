package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

func TestParseRunArgs(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		forPlan bool
		want    plan.Options
		json    bool
		wantErr string
	}{
		{name: "command after --", args: []string{"--", "ls", "-l"}, want: plan.Options{Command: []string{"ls", "-l"}}},
		{name: "command without --", args: []string{"ls", "--", "-l"}, want: plan.Options{Command: []string{"ls", "--", "-l"}}},
		{name: "net forms", args: []string{"--net=none", "x"}, want: plan.Options{Net: plan.NetNone, Command: []string{"x"}}},
		{name: "pids limit", args: []string{"--pids-limit", "800", "x"}, want: plan.Options{PidsLimit: 800, Command: []string{"x"}}},
		{name: "pids limit 0 is none", args: []string{"--pids-limit=0", "x"}, want: plan.Options{PidsLimit: -1, Command: []string{"x"}}},
		{name: "tmpfs size", args: []string{"--tmpfs-size", "64M", "x"}, want: plan.Options{TmpfsSize: 64 << 20, Command: []string{"x"}}},
		{name: "tmpfs size too small", args: []string{"--tmpfs-size=4k", "x"}, wantErr: "--tmpfs-size: \"4k\" is too small"},
		{name: "tmpfs size not a size", args: []string{"--tmpfs-size", "big", "x"}, wantErr: "--tmpfs-size: \"big\" is not a size"},
		{name: "pids limit not a number", args: []string{"--pids-limit", "lots", "x"}, wantErr: "--pids-limit: \"lots\" is not a number"},
		{name: "net separate value", args: []string{"--net", "host", "x"}, want: plan.Options{Net: plan.NetHost, Command: []string{"x"}}},
		{name: "allow-socket repeats", args: []string{"--allow-socket", "/run/docker.sock", "--allow-socket=/srv/a.sock", "x"}, want: plan.Options{AllowSockets: []string{"/run/docker.sock", "/srv/a.sock"}, Command: []string{"x"}}},
		{name: "allow-socket needs a value", args: []string{"--allow-socket"}, wantErr: "--allow-socket needs a value"},
		{
			name: "ops keep their order",
			args: []string{"--ro-bind", "/a", "/b", "--tmpfs", "/t", "--mask", "/m", "--bind-try", "/c", "/d", "--perms", "1777", "--tmpfs=/u", "--ro-bind-try", "/e", "/f", "--bind", "/g", "/h", "--", "true"},
			want: plan.Options{Command: []string{"true"}, Ops: []mounts.Op{
				{Kind: mounts.ROBind, Src: "/a", Dst: "/b"},
				{Kind: mounts.Tmpfs, Dst: "/t"},
				{Kind: mounts.Mask, Dst: "/m"},
				{Kind: mounts.Bind, Src: "/c", Dst: "/d", Optional: true},
				{Kind: mounts.Tmpfs, Dst: "/u", Mode: 0o1777},
				{Kind: mounts.ROBind, Src: "/e", Dst: "/f", Optional: true},
				{Kind: mounts.Bind, Src: "/g", Dst: "/h"},
			}},
		},
		{
			name: "env and process options",
			args: []string{"--setenv", "A", "1 2", "--keep-env", "TERM", "--keep-env=LANG", "--chdir", "/w", "--hostname", "h", "--bare", "sh"},
			want: plan.Options{Command: []string{"sh"}, SetEnv: [][2]string{{"A", "1 2"}}, KeepEnv: []string{"TERM", "LANG"}, Chdir: "/w", Hostname: "h", Bare: true},
		},
		{name: "plan json", args: []string{"--json", "--", "x"}, forPlan: true, json: true, want: plan.Options{Command: []string{"x"}}},
		{name: "json only for plan", args: []string{"--json", "x"}, wantErr: "--json belongs to"},
		{name: "unknown option", args: []string{"--bindd", "/a", "/b", "x"}, wantErr: "unknown option --bindd"},
		{name: "unknown net", args: []string{"--net=jails", "x"}, wantErr: `--net: unknown mode "jails"`},
		{name: "empty command", args: []string{"--net=none"}, wantErr: "no command given"},
		{name: "empty after --", args: []string{"--"}, wantErr: "no command given"},
		{name: "bind needs two", args: []string{"--bind", "/a"}, wantErr: "--bind needs 2 values"},
		{name: "setenv needs two", args: []string{"--setenv", "A"}, wantErr: "--setenv needs 2 values"},
		{name: "tmpfs needs one", args: []string{"--tmpfs"}, wantErr: "--tmpfs needs a value"},
		{name: "bind takes no inline", args: []string{"--bind=/a", "/b", "x"}, wantErr: "--bind takes no =value"},
		{name: "bad perms", args: []string{"--perms", "999", "--tmpfs", "/t", "x"}, wantErr: "not an octal mode"},
		{name: "dangling perms", args: []string{"--perms", "0700", "x"}, wantErr: "--perms must come right before"},
		{name: "flag value for bare", args: []string{"--bare=1", "x"}, wantErr: "--bare takes no =value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := parseRunArgs(c.args, c.forPlan)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.opts, c.want) || r.json != c.json {
				t.Errorf("got %+v json=%v\nwant %+v json=%v", r.opts, r.json, c.want, c.json)
			}
		})
	}
}

func TestRealMainUsage(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{nil, 2, "", "Usage:"},
		{[]string{"help"}, 0, "claude-sandbox run", ""},
		{[]string{"run", "--help"}, 0, "--ro-bind SRC DST", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"run"}, 2, "", "no command given"},
		{[]string{"run", "--bind", "relative", "/x", "true"}, 2, "", "is not an absolute path"},
		{[]string{"plan", "true"}, 2, "", "add --json"},
		{[]string{"plan", "--json", "--net=none", "--mask", "/etc/shadow", "--", "true"}, 0, `"kind": "mask"`, ""},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := realMain(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.inStdout) || !strings.Contains(errb.String(), c.inStderr) {
			t.Errorf("%q: code %d stdout %q stderr %q; want code %d, stdout with %q, stderr with %q",
				c.args, code, out.String(), errb.String(), c.code, c.inStdout, c.inStderr)
		}
		if lines := strings.Count(strings.TrimSpace(errb.String()), "\n"); c.code == 2 && c.inStderr != "Usage:" && lines > 0 {
			t.Errorf("%q: error is not one line: %q", c.args, errb.String())
		}
	}
}

// Without --clearenv, run's command gets PATH, and HOME and TERM from the
// caller; what the caller sets or keeps itself wins, in its place.
func TestBaseEnv(t *testing.T) {
	environ := []string{"HOME=/home/u", "TERM=xterm", "PATH=/caller/bin", "SECRET=x"}
	build := func(args ...string) []string {
		t.Helper()
		r, err := parseRunArgs(append(args, "--", "true"), false)
		if err != nil {
			t.Fatal(err)
		}
		if !r.clearenv {
			baseEnv(&r.opts, environ)
		}
		r.opts.Environ, r.opts.Net = environ, plan.NetNone
		p, err := plan.Build(r.opts)
		if err != nil {
			t.Fatal(err)
		}
		return p.Env
	}
	cases := []struct {
		args []string
		want []string
	}{
		{nil, []string{"PATH=" + plan.DefaultPath, "HOME=/home/u", "TERM=xterm"}},
		{[]string{"--clearenv"}, []string{}},
		{[]string{"--clearenv", "--setenv", "A", "1"}, []string{"A=1"}},
		{[]string{"--keep-env", "PATH", "--setenv", "TERM", "dumb"}, []string{"PATH=/caller/bin", "HOME=/home/u", "TERM=dumb"}},
	}
	for _, c := range cases {
		if got := build(c.args...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: environment %q, want %q", c.args, got, c.want)
		}
	}
	if _, err := parseRunArgs([]string{"--clearenv=1", "true"}, false); err == nil || !strings.Contains(err.Error(), "--clearenv takes no =value") {
		t.Errorf("--clearenv=1: %v", err)
	}
}

// --udp-flows takes a positive count and refuses anything else, naming
// the form it wants.
func TestParseRunArgsUDPFlows(t *testing.T) {
	for _, args := range [][]string{{"--udp-flows", "64", "x"}, {"--udp-flows=64", "x"}} {
		r, err := parseRunArgs(args, false)
		if err != nil || r.udpFlows != 64 {
			t.Errorf("%q: udpFlows %v, %v; want 64", args, r, err)
		}
	}
	for _, v := range []string{"0", "-1", "many", "70000"} {
		if _, err := parseRunArgs([]string{"--udp-flows", v, "x"}, false); err == nil || !strings.Contains(err.Error(), "--udp-flows 512") {
			t.Errorf("--udp-flows %s: error %v, want one naming the form", v, err)
		}
	}
}
