package integration

// Attacks on the walls from inside, as the root caller and as uid 65534,
// through `run` and through the shadow: each test tries a way around a
// wall and fails if it gets through.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/mounts"
	"github.com/claude-sandbox/claude-sandbox/plan"
)

// listenUnix listens at p (world-connectable), accepting and closing
// connections until the test ends; with renameTo, the socket is bound at p
// and then renamed (/proc/net/unix keeps the name it was bound at).
func listenUnix(t *testing.T, p, renameTo string) {
	t.Helper()
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	final := p
	if renameTo != "" {
		if err := os.Rename(p, renameTo); err != nil {
			t.Fatal(err)
		}
		final = renameTo
	}
	t.Cleanup(func() { l.Close(); os.Remove(final) })
	if err := os.Chmod(final, 0o777); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// A host socket under a name /proc/net/unix does not list: renamed after
// bind() (the list keeps the old name), hard-linked beside a listed one,
// or shown a second time by a host bind mount of its directory (the
// launcher runs in a mount namespace with /srv/D also bound at /opt/D).
// None connects, from `run` or the shadow. Seen connecting (five of the
// six paths, all but the listed name) with the masks taken from the listed
// names alone.
func TestAttackSocketOtherNames(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		wp := testutil.Build(t, "./integration/wallprobe")
		tag := fmt.Sprintf("cs-atk-%d-%d", os.Getpid(), s.uid)
		dir, alias := "/srv/"+tag, "/opt/"+tag
		mkdirOwned(t, dir)
		mkdirOwned(t, alias)
		listenUnix(t, dir+"/a.sock", "")
		listenUnix(t, dir+"/tmp-r.sock", dir+"/r.sock")
		if err := os.Link(dir+"/a.sock", dir+"/h.sock"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir + "/h.sock") })
		var paths []string
		for _, d := range []string{dir, alias} {
			for _, n := range []string{"a.sock", "r.sock", "h.sock"} {
				paths = append(paths, d+"/"+n)
			}
		}
		check := func(where, out string) {
			t.Helper()
			for _, p := range paths {
				if !strings.Contains(out, p+" err:") {
					t.Errorf("%s (uid %d): the host socket at %s is reachable; output:\n%s", where, s.uid, p, out)
				}
			}
		}
		bindAlias := fmt.Sprintf("mount --bind %s %s", dir, alias)

		env := s.env()
		inner := fmt.Sprintf("%s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s run --net=none -- %s connect %s",
			bindAlias, s.uid, s.uid, strings.Join(env, " "), s.bin, wp, strings.Join(paths, " "))
		r := testutil.Run(t, shellInPrivateMountNS(inner))
		if r.Code != 0 {
			t.Fatalf("run: %v", r)
		}
		check("run", r.Stdout)

		home := testutil.MkdirFor(t, s.uid)
		ws := filepath.Join(home, "project")
		must(t, os.Mkdir(ws, 0o755))
		must(t, os.Chown(ws, s.uid, s.uid))
		real := fmt.Sprintf("#!/bin/sh\nexec %s connect %s\n", wp, strings.Join(paths, " "))
		prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
		sr := runShadow(t, s.uid, home, ws, bindAlias+" && "+prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
		if sr.Code != 0 {
			t.Fatalf("shadow: %v", sr)
		}
		check("shadow", sr.Stdout)
	})
}

// shellInPrivateMountNS runs script with sh in a private mount namespace
// of its own (a bind mount made there never reaches the machine).
func shellInPrivateMountNS(script string) *exec.Cmd {
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	return cmd
}

// A session leaves, in the writable workspace, a symlink to a host
// directory outside it and a .git file (or a .gitmodules path) naming a
// gitdir through that symlink. The next launch's git protection makes
// each gitdir a writable mount point of its own: it must never bind a
// host directory outside the writable area that way (here the victim's
// bin directory, standing for ~/.local/bin or, for a root caller, /etc).
func TestAttackGitdirThroughSymlink(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			victim := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			for _, d := range []string{ws + "/sub", ws + "/mod", victim + "/bin", victim + "/mod/.git"} {
				must(t, os.MkdirAll(d, 0o755))
			}
			// What the earlier session wrote into its workspace.
			must(t, os.Symlink(victim, ws+"/link"))
			must(t, os.WriteFile(ws+"/sub/.git", []byte("gitdir: ../link/bin\n"), 0o644))
			must(t, os.WriteFile(ws+"/.gitmodules", []byte("[submodule \"m\"]\n\tpath = link/mod\n"), 0o644))
			chownTree(t, uid, home, victim)
			real := "#!/bin/sh\n" +
				"touch " + ws + "/link/bin/planted 2>/dev/null && echo planted-bin\n" +
				"touch " + ws + "/link/mod/.git/planted 2>/dev/null && echo planted-mod\n" +
				"exit 0\n"
			prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
			r := runShadow(t, uid, home, ws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			for _, p := range []string{victim + "/bin/planted", victim + "/mod/.git/planted"} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("uid %d: the session wrote %s, outside the workspace, through a gitdir named via a symlink (%q)", uid, p, r.Stdout)
				}
			}
		})
	}
}

// A root caller's sandbox writes files owned by host root into its
// writable binds. A set-user-ID copy of a shell left there (the sandbox's
// nosuid mount does not follow the file outside) would be a root shell for
// any local user. chmod, install -m and an O_CREAT mode with a set-ID bit
// must all fail, from `run` and the shadow; the host then holds no set-ID
// file owned by root. Seen leaving a 4755 root-owned shell without the
// filter's mode checks.
func TestAttackRootSetuidInWorkspace(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		script := `cd "$1" && cp /bin/sh ./sh-suid && chmod 4755 ./sh-suid; chmod u+s ./sh-suid; chmod g+s ./sh-suid;` +
			` install -m 4755 /bin/true ./true-suid; touch ./plain && chmod 6755 ./plain;` +
			` python3 -c 'import os; os.close(os.open("made-suid", os.O_CREAT|os.O_WRONLY, 0o4755))' 2>/dev/null; ls -l`
		check := func(where, ws, out string) {
			t.Helper()
			ents, err := os.ReadDir(ws)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) == 0 {
				t.Fatalf("%s: nothing was written in the workspace (%s)", where, out)
			}
			for _, e := range ents {
				fi, err := os.Lstat(filepath.Join(ws, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid == 0 && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
					t.Errorf("%s (uid %d): the host now holds %s, %v, owned by root: a set-ID program for any local user", where, s.uid, e.Name(), fi.Mode())
				}
			}
		}
		ws := testutil.MkdirFor(t, s.uid)
		r := s.run("--bind", ws, ws, "--", "/bin/sh", "-c", script, "sh", ws)
		check("run", ws, r.Stdout+r.Stderr)

		home := testutil.MkdirFor(t, s.uid)
		sws := filepath.Join(home, "project")
		must(t, os.Mkdir(sws, 0o755))
		must(t, os.Chown(sws, s.uid, s.uid))
		real := "#!/bin/sh\n" + strings.ReplaceAll(script, `"$1"`, sws) + "\nexit 0\n"
		prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
		sr := runShadow(t, s.uid, home, sws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
		if sr.Code != 0 {
			t.Fatalf("shadow: %v", sr)
		}
		check("shadow", sws, sr.Stdout+sr.Stderr)
	})
}

// A session writes a SessionStart hook into the workspace's
// .claude/settings.local.json and an MCP server into its .mcp.json: both
// run when Claude Code next starts in this trusted directory outside the
// shadow (an IDE's binary), before any prompt the gate could block. They
// cannot be read-only (Claude Code writes its permissions there), so the
// change must be reported at exit, on stderr and in the change log. Seen
// unreported before the workspace's settings were watched.
func TestAttackWorkspaceClaudeSettingsReported(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			must(t, os.MkdirAll(ws+"/.claude", 0o755))
			chownTree(t, uid, home)
			real := "#!/bin/sh\n" +
				`printf '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"echo PLANTED"}]}]}}\n' > ` + ws + "/.claude/settings.local.json\n" +
				`printf '{"mcpServers":{"x":{"command":"sh","args":["-c","echo PLANTED"]}}}\n' > ` + ws + "/.mcp.json\n"
			prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
			r := runShadow(t, uid, home, ws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			log, _ := os.ReadFile(filepath.Join(home, ".local/state/claude-sandbox/changes.log"))
			for want, logged := range map[string]string{
				".claude/settings.local.json: hooks (added)": `.claude/settings.local.json","key":"hooks","change":"added"}`,
				".mcp.json: mcpServers (added)":              `.mcp.json","key":"mcpServers","change":"added"}`,
			} {
				if !strings.Contains(r.Stderr, want) {
					t.Errorf("uid %d: %q not reported on stderr: %s", uid, want, r.Stderr)
				}
				if !strings.Contains(string(log), logged) {
					t.Errorf("uid %d: %q not in the change log: %q", uid, logged, log)
				}
			}
		})
	}
}

// The shadow plans a writable bind of each gitdir in the workspace from
// its resolved path; a concurrent session sharing the workspace can swap
// a directory on that path for a symlink (to /etc, ~/.local/bin) between
// the plan and the mount. Such a bind is exact: a symlink found in its
// source when the sandbox is built fails the launch instead of being
// followed. Here the swap is made before the launch, deterministically:
// the exact bind refuses it, the same bind without the flag follows it.
// Seen following it (the victim writable) with the flag ignored.
func TestAttackExactBindRefusesSwappedSymlink(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		ws := testutil.MkdirFor(t, uid)
		victim := testutil.MkdirFor(t, uid)
		must(t, os.MkdirAll(ws+"/sub", 0o755))
		must(t, os.Symlink(victim, ws+"/sub/gitdir")) // what the race leaves
		chownTree(t, uid, ws, victim)
		for _, exact := range []bool{true, false} {
			dst := ws + "/sub/gitdir"
			p, err := plan.Build(plan.Options{
				Command: []string{"/bin/sh", "-c", "touch " + dst + "/planted && echo planted"},
				UID:     uid, GID: uid, HostRoot: uid == 0, Net: plan.NetNone,
				Ops: []mounts.Op{{Kind: mounts.Bind, Src: ws, Dst: ws}, {Kind: mounts.Bind, Src: dst, Dst: dst, Exact: exact}},
			})
			if err != nil {
				t.Fatal(err)
			}
			r := runPlan(t, uid, p)
			_, planted := os.Stat(victim + "/planted")
			os.Remove(victim + "/planted")
			if exact && (planted == nil || r.Code == 0 || !strings.Contains(r.Stderr, "symlink appeared")) {
				t.Errorf("uid %d: an exact bind through a swapped-in symlink: %v (victim written: %v)", uid, r, planted == nil)
			}
			if !exact && planted != nil {
				t.Errorf("uid %d: control: a plain bind should follow the symlink: %v", uid, r)
			}
		}
	}
}

// The sandbox's /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom
// and /dev/tty are binds of the host's own device inodes, which a root
// caller's uid 0 owns: chmod 000 /dev/null from inside would break the
// host for every user. The metadata must not change (here /dev/full, the
// least used of them, restored at the end if it did), from `run` and the
// shadow; the devices still work. Seen changing the host's /dev/full mode
// and times with the nodes bound writable.
func TestAttackHostDeviceNodeMetadata(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		var before syscall.Stat_t
		must(t, syscall.Stat("/dev/full", &before))
		t.Cleanup(func() {
			var now syscall.Stat_t
			if syscall.Stat("/dev/full", &now) == nil && now.Mode != before.Mode {
				_ = os.Chmod("/dev/full", os.FileMode(before.Mode&0o777))
			}
		})
		script := "chmod 600 /dev/full; touch -d 2001-01-01 /dev/full; echo x > /dev/null && head -c 1 /dev/zero | wc -c"
		check := func(where string, r testutil.Result) {
			t.Helper()
			var after syscall.Stat_t
			must(t, syscall.Stat("/dev/full", &after))
			if after.Mode != before.Mode || after.Mtim != before.Mtim {
				t.Errorf("%s (uid %d): the host's /dev/full changed from inside: mode %o -> %o, mtime %v -> %v", where, s.uid, before.Mode, after.Mode, before.Mtim, after.Mtim)
			}
			if !strings.Contains(r.Stdout, "1") {
				t.Errorf("%s (uid %d): the devices no longer work inside: %v", where, s.uid, r)
			}
		}
		check("run", s.run("--", "/bin/sh", "-c", script))

		home := testutil.MkdirFor(t, s.uid)
		ws := filepath.Join(home, "project")
		must(t, os.Mkdir(ws, 0o755))
		must(t, os.Chown(ws, s.uid, s.uid))
		prelude, claude := shadowHost(t, "egress-jail = 0\n", "#!/bin/sh\n"+script+"\n")
		check("shadow", runShadow(t, s.uid, home, ws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi"))
	})
}

// Places under ~/.local/share the host executes from that the first list
// missed: Steam's steam.sh, user gems' bin (Arch's GEM_HOME), virtualenv's
// seed wheels, Zed's extensions, rootless Docker's images, KDE service
// menus. A session's edit of an existing file and a file it adds beside
// it must be gone after the session. Seen landing on the host before
// these entries were per-session.
func TestAttackShareExecPlaces(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	files := []string{
		"Steam/steam.sh", "gem/ruby/3.3.0/bin/rake", "virtualenv/wheel/3.12/embed/3/pip.json",
		"zed/extensions/work/x/run.sh", "docker/image/overlay2/repositories.json", "kio/servicemenus/x.desktop",
	}
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			must(t, os.MkdirAll(ws, 0o755))
			script := "#!/bin/sh\n"
			for _, f := range files {
				p := filepath.Join(home, ".local/share", f)
				must(t, os.MkdirAll(filepath.Dir(p), 0o755))
				must(t, os.WriteFile(p, []byte("host\n"), 0o755))
				script += fmt.Sprintf("echo planted >> %s; echo planted > %s.new\n", p, p)
			}
			script += "exit 0\n"
			chownTree(t, uid, home)
			prelude, claude := shadowHost(t, "egress-jail = 0\n", script)
			r := runShadow(t, uid, home, ws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			for _, f := range files {
				p := filepath.Join(home, ".local/share", f)
				if b, err := os.ReadFile(p); err != nil || string(b) != "host\n" {
					t.Errorf("uid %d: ~/.local/share/%s changed on the host: %q %v", uid, f, b, err)
				}
				if _, err := os.Stat(p + ".new"); err == nil {
					t.Errorf("uid %d: a file planted beside ~/.local/share/%s landed on the host", uid, f)
				}
			}
		})
	}
}

// A root caller's sandbox reads as host root. The shadow masked
// /etc/shadow and /etc/gshadow, but the backups the shadow tools leave
// (/etc/shadow-, /etc/gshadow-) hold the same hashes, and the host's SSH
// host keys and TLS private keys would let a session impersonate the
// machine. None may be read from inside. Seen reading /etc/shadow- and
// the planted host key as root before they were masked.
func TestAttackRootReadsHostSecrets(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			must(t, os.MkdirAll(ws, 0o755))
			must(t, os.Chown(ws, uid, uid))
			secrets := []string{"/etc/shadow-", "/etc/gshadow-", "/etc/ssh/ssh_host_ed25519_key", "/etc/ssl/private/host.key"}
			real := "#!/bin/sh\nfor f in " + strings.Join(secrets, " ") + "; do cat $f 2>/dev/null; done\nexit 0\n"
			prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
			etc := filepath.Join(filepath.Dir(filepath.Dir(claude)), "etc")
			for _, f := range secrets {
				p := filepath.Join(etc, strings.TrimPrefix(f, "/etc/"))
				must(t, os.MkdirAll(filepath.Dir(p), 0o755))
				must(t, os.WriteFile(p, []byte("SECRET-"+filepath.Base(f)+"\n"), 0o600))
			}
			r := runShadow(t, uid, home, ws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			if strings.Contains(r.Stdout, "SECRET-") {
				t.Errorf("uid %d: host secrets read from inside:\n%s", uid, r.Stdout)
			}
		})
	}
}

// The read-only /sys is a clone of the host's, submounts included: where
// the host mounts debugfs, tracefs or pstore (root-only kernel internals,
// every process's traced activity, earlier crashes' kernel logs), a root
// caller's sandbox read them as host root. Stood in for by a root-only
// tmpfs over /sys/kernel/debug in the launcher's own mount namespace.
// Seen read as root before the covers masked them.
func TestAttackRootReadsKernelFilesystems(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		script := "cat /sys/kernel/debug/secret /sys/kernel/tracing/secret /sys/fs/pstore/secret 2>/dev/null; exit 0"
		var setup []string
		for _, d := range []string{"/sys/kernel/debug", "/sys/kernel/tracing", "/sys/fs/pstore"} {
			setup = append(setup, fmt.Sprintf("mount -t tmpfs -o mode=0700 none %s && echo KERNEL-SECRET > %s/secret && chmod 600 %s/secret", d, d, d))
		}
		inner := fmt.Sprintf("%s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i %s %s run --net=none -- /bin/sh -c '%s'",
			strings.Join(setup, " && "), s.uid, s.uid, strings.Join(s.env(), " "), s.bin, script)
		r := testutil.Run(t, shellInPrivateMountNS(inner))
		if r.Code != 0 {
			t.Fatalf("run: %v", r)
		}
		if strings.Contains(r.Stdout, "KERNEL-SECRET") {
			t.Errorf("uid %d: a root-only kernel filesystem under /sys read from inside: %q", s.uid, r.Stdout)
		}
	})
}

// The classic hole: a nested user + mount namespace gets capabilities over
// a copy of the sandbox's mount tree, and unmounting a cover there would
// reveal what it hides. Each kind of cover the shadow lays over something
// writable or reachable is tried: the read-only .git/hooks and .git/config
// over the writable gitdir, the per-session overlay of ~/.claude/local
// over the writable ~/.claude, the mask over a host socket, the /run
// tmpfs, and for the root caller the read-only /proc/sys. The kernel
// locks every mount of the copy (MNT_LOCKED): nothing gets through.
func TestAttackNestedUnmountCovers(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	wp := testutil.Build(t, "./integration/wallprobe")
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			must(t, os.MkdirAll(filepath.Join(home, ".claude/local"), 0o755))
			must(t, os.MkdirAll(ws, 0o755))
			if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
				t.Fatalf("git init: %v %s", err, out)
			}
			chownTree(t, uid, home)
			config, err := os.ReadFile(ws + "/.git/config")
			must(t, err)
			sock := fmt.Sprintf("/srv/cs-atk-umount-%d-%d.sock", os.Getpid(), uid)
			listenUnix(t, sock, "")

			// Root cannot map uid 0 in a nested namespace (no
			// CAP_SETFCAP); it stays unmapped, with capabilities there.
			nest := "unshare -Urm"
			if uid == 0 {
				nest = "unshare -Um"
			}
			covers := []string{ws + "/.git/hooks", ws + "/.git/config", home + "/.claude/local", sock, "/run", "/proc/sys"}
			inner := "for m in " + strings.Join(covers, " ") + "; do umount $m 2>/dev/null && echo UNMOUNTED $m; umount -l $m 2>/dev/null && echo UNMOUNTED $m; done\n" +
				"touch " + ws + "/.git/hooks/pre-commit 2>/dev/null && echo WROTE-hooks\n" +
				"echo '[alias]' 2>/dev/null >> " + ws + "/.git/config && echo WROTE-config\n" +
				"touch " + home + "/.claude/local/planted 2>/dev/null\n" +
				wp + " connect " + sock + "\n" +
				"v=$(cat /proc/sys/kernel/randomize_va_space); (echo $v > /proc/sys/kernel/randomize_va_space) 2>/dev/null && echo WROTE-sysctl\n"
			must(t, os.WriteFile(ws+"/nested.sh", []byte(inner), 0o755))
			must(t, os.Chown(ws+"/nested.sh", uid, uid))
			real := "#!/bin/sh\n" + nest + " sh " + ws + "/nested.sh\nexit 0\n"
			prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
			r := runShadow(t, uid, home, ws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			for _, bad := range []string{"UNMOUNTED", "WROTE-", sock + " ok"} {
				if strings.Contains(r.Stdout, bad) {
					t.Errorf("uid %d: a cover gave way in a nested namespace (%q):\n%s", uid, bad, r.Stdout)
				}
			}
			if !strings.Contains(r.Stdout, sock+" err:") {
				t.Errorf("uid %d: the socket probe did not run: %v", uid, r)
			}
			if _, err := os.Stat(ws + "/.git/hooks/pre-commit"); err == nil {
				t.Errorf("uid %d: a hook landed on the host", uid)
			}
			if b, _ := os.ReadFile(ws + "/.git/config"); string(b) != string(config) {
				t.Errorf("uid %d: .git/config changed on the host: %q", uid, b)
			}
			if _, err := os.Stat(home + "/.claude/local/planted"); err == nil {
				t.Errorf("uid %d: a file landed in ~/.claude/local on the host", uid)
			}
		})
	}
}

// The launcher reads, on the host, files a session can replace: the
// watched ~/.claude/settings.json after the session, the workspace's
// .gitmodules and a gitdir's modules/ at the next launch. A session that
// leaves FIFOs there (or links to /dev/zero, or a 1 TiB sparse file: the
// unit test covers those) must not hang the user's launcher or make it
// read without end: both sessions end, and the replaced settings file is
// reported. Seen hanging at the first session's end before the reads
// refused what is not a regular file.
func TestAttackLauncherReadsPlantedFIFO(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			must(t, os.MkdirAll(filepath.Join(home, ".claude"), 0o755))
			must(t, os.MkdirAll(ws+"/.git", 0o755))
			must(t, os.WriteFile(filepath.Join(home, ".claude/settings.json"), []byte(`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"true"}]}]}}`+"\n"), 0o644))
			chownTree(t, uid, home)
			real := "#!/bin/sh\n" +
				"rm -f " + home + "/.claude/settings.json && mkfifo " + home + "/.claude/settings.json\n" +
				"mkfifo " + ws + "/.gitmodules " + ws + "/.git/modules 2>/dev/null\n" +
				"echo session-ran\nexit 0\n"
			prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
			for i := 0; i < 2; i++ {
				inner := fmt.Sprintf("%s && cd %s && exec setpriv --reuid=%d --regid=%d --clear-groups -- env -i HOME=%s USER=tester PATH=/usr/bin:/bin TERM=dumb %s -p hi",
					prelude, ws, uid, uid, home, claude)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", inner)
				cmd.Dir = "/"
				r := testutil.Run(t, cmd)
				hung := ctx.Err() != nil
				cancel()
				if hung {
					t.Fatalf("uid %d, session %d: the launcher hung on a FIFO the session left: %v", uid, i+1, r)
				}
				if r.Code != 0 || !strings.Contains(r.Stdout, "session-ran") {
					t.Errorf("uid %d, session %d: %v", uid, i+1, r)
				}
				if i == 0 && !strings.Contains(r.Stderr, "settings.json") {
					t.Errorf("uid %d: the replaced ~/.claude/settings.json was not reported: %s", uid, r.Stderr)
				}
			}
		})
	}
}

// At launch the shadow asks the host's git for the user's identity, in the
// workspace: git reads the repository's config too, which a session may
// have written (a repository it created inside). An include of a FIFO
// there must not hang the next launch. Seen hanging without the deadline.
func TestAttackGitIncludeFIFO(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	home := testutil.MkdirFor(t, 0)
	ws := filepath.Join(home, "project")
	must(t, os.MkdirAll(ws+"/.git", 0o755))
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	must(t, syscall.Mkfifo(ws+"/fifo", 0o644))
	f, err := os.OpenFile(ws+"/.git/config", os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString("[include]\n\tpath = ../fifo\n")
	must(t, err)
	must(t, f.Close())
	prelude, claude := shadowHost(t, "egress-jail = 0\n", "#!/bin/sh\necho session-ran\n")
	inner := fmt.Sprintf("%s && cd %s && exec env -i HOME=%s USER=tester PATH=/usr/bin:/bin TERM=dumb %s -p hi", prelude, ws, home, claude)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", inner)
	cmd.Dir = "/"
	r := testutil.Run(t, cmd)
	if ctx.Err() != nil {
		t.Fatalf("the launch hung on a FIFO included by the workspace's git config: %v", r)
	}
	if r.Code != 0 || !strings.Contains(r.Stdout, "session-ran") {
		t.Errorf("launch: %v", r)
	}
}

// A socket bound from another network namespace is not in the launcher's
// /proc/net/unix. WSLg binds its X11, Wayland and PulseAudio sockets that
// way under /mnt/wslg: stood in for by sockets bound from the lab's
// "world" namespace in a /mnt/wslg of the test's making. None connects,
// from `run` (root and 65534). Seen connecting before /mnt/wslg was swept.
func TestAttackWSLgSockets(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		wp := testutil.Build(t, "./integration/wallprobe")
		l := newLab(t)
		mkdirOwned(t, "/mnt/wslg/runtime-dir")
		var paths []string
		for _, p := range []string{"/mnt/wslg/PulseServer", "/mnt/wslg/runtime-dir/wayland-0"} {
			p := p
			os.Remove(p)
			must(t, inNetns(l.world, func() error { listenUnix(t, p, ""); return nil }))
			paths = append(paths, p)
		}
		r := s.run("--", wp, "connect", paths[0], paths[1])
		for _, p := range paths {
			if !strings.Contains(r.Stdout, p+" err:") {
				t.Errorf("uid %d: the socket %s, bound from another network namespace, is reachable: %v", s.uid, p, r)
			}
		}
	})
}

// A socket bound by a process with network and mount namespaces of its
// own (a container), in a host directory it sees at another path (a
// volume), is not in the launcher's /proc/net/unix. The launcher also
// reads the listings of the other network namespaces it may inspect and
// maps each path through both mount tables: the socket is masked at its
// host path. Root only: the binder runs as root, and a non-root caller may
// not inspect it. Seen connecting before the other namespaces were read.
func TestAttackContainerSocket(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	wp := testutil.Build(t, "./integration/wallprobe")
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	dir := fmt.Sprintf("/srv/cs-atk-ctr-%d", os.Getpid())
	mkdirOwned(t, dir)
	mkdirOwned(t, "/opt/cs-atk-volume")
	// The "container": its own network and mount namespaces, dir seen at
	// /opt/cs-atk-volume, a listener bound there (python3 stands in).
	ctr := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
		"mount --bind "+dir+" /opt/cs-atk-volume && exec python3 -c 'import socket,os,sys,time\n"+
			"s=socket.socket(socket.AF_UNIX); s.bind(\"/opt/cs-atk-volume/db.sock\"); os.chmod(\"/opt/cs-atk-volume/db.sock\",0o777); s.listen(8)\n"+
			"print(\"ready\",flush=True)\nwhile True:\n c,_=s.accept(); c.close()'")
	out, err := ctr.StdoutPipe()
	must(t, err)
	if err := ctr.Start(); err != nil {
		t.Fatalf("cannot start the stand-in container: %v", err)
	}
	t.Cleanup(func() { _ = ctr.Process.Kill(); _ = ctr.Wait(); os.Remove(dir + "/db.sock") })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the stand-in container did not start: %q %v", line, err)
	}
	r := testutil.Run(t, testutil.As(0, []string{"PATH=/usr/bin:/bin"}, bin, "run", "--net=none", "--", wp, "connect", dir+"/db.sock"))
	if !strings.Contains(r.Stdout, dir+"/db.sock err:") {
		t.Errorf("a container's socket in a host directory is reachable from a root caller's sandbox: %v", r)
	}
}

// A workspace whose .git is a symlink to a gitdir elsewhere in it (what a
// session can leave: `git init` then a link, never a mount point): git on
// the host follows the link, so the target's hooks and config must be as
// read-only as a plain .git's, and a session that points the link at a
// gitdir of its own making is reported at exit. Seen writable (a hook
// planted through the link) before symlinked .git entries were followed.
func TestAttackSymlinkedDotGit(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	for _, uid := range []int{0, testutil.Nobody} {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			home := testutil.MkdirFor(t, uid)
			ws := filepath.Join(home, "project")
			must(t, os.MkdirAll(ws, 0o755))
			if out, err := exec.Command("git", "init", "-q", "--bare", ws+"/realgit").CombinedOutput(); err != nil {
				t.Fatalf("git init: %v %s", err, out)
			}
			must(t, os.Symlink("realgit", ws+"/.git"))
			chownTree(t, uid, home)
			config, err := os.ReadFile(ws + "/realgit/config")
			must(t, err)
			real := "#!/bin/sh\n" +
				"printf '#!/bin/sh\\necho PWNED\\n' > " + ws + "/.git/hooks/pre-commit 2>/dev/null && echo wrote-hook\n" +
				"echo '[core]' >> " + ws + "/.git/config 2>/dev/null && echo wrote-config\n" +
				"mkdir -p " + ws + "/mine/hooks && rm -f " + ws + "/.git && ln -s mine " + ws + "/.git && echo relinked\n" +
				"exit 0\n"
			prelude, claude := shadowHost(t, "egress-jail = 0\n", real)
			r := runShadow(t, uid, home, ws, prelude, claude, []string{"HOME=" + home, "USER=tester", "PATH=/usr/bin:/bin", "TERM=dumb"}, "-p", "hi")
			if r.Code != 0 {
				t.Fatalf("shadow: %v", r)
			}
			if _, err := os.Stat(ws + "/realgit/hooks/pre-commit"); err == nil || strings.Contains(r.Stdout, "wrote-hook") {
				t.Errorf("uid %d: a hook was planted through the .git symlink: %s", uid, r.Stdout)
			}
			if b, _ := os.ReadFile(ws + "/realgit/config"); string(b) != string(config) || strings.Contains(r.Stdout, "wrote-config") {
				t.Errorf("uid %d: the config behind the .git symlink changed: %q", uid, b)
			}
			if strings.Contains(r.Stdout, "relinked") && !strings.Contains(r.Stderr, ".git: (symlink target)") {
				t.Errorf("uid %d: the .git link was pointed elsewhere and nothing was reported: %s", uid, r.Stderr)
			}
		})
	}
}

// A host service restarting during the session re-creates its socket
// (unlink, bind): the kernel detaches every mount on the old path in
// every namespace, the sandbox's mask-socket included, and the new socket
// was reachable; so was a socket bound later under a new name beside a
// listed one. Both are refused now: a directory of the read-only view
// that holds a listed socket is shown through a read-only overlay of
// itself (mounts.SocketDir), through which connect() never reaches a
// socket. As root and uid 65534; seen failing (both connected) with the
// socket-dir ops left out of the plan.
func TestAttackSocketRecreatedDuringSession(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		wp := testutil.Build(t, "./integration/wallprobe")
		tag := fmt.Sprintf("cs-atk-re-%d-%d", os.Getpid(), s.uid)
		dir := "/srv/" + tag
		mkdirOwned(t, dir)
		must(t, os.WriteFile(dir+"/data.txt", []byte("DATA-OK\n"), 0o644))
		t.Cleanup(func() { os.Remove(dir + "/data.txt") })
		listen := func(p string) net.Listener {
			t.Helper()
			os.Remove(p)
			l, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			must(t, os.Chmod(p, 0o777))
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			return l
		}
		a := listen(dir + "/a.sock")
		sync := testutil.MkdirFor(t, s.uid)
		script := fmt.Sprintf(`%[1]s connect %[2]s/a.sock; cat %[2]s/data.txt; : > %[3]s/ready
while [ ! -e %[3]s/go ]; do sleep 0.05; done
%[1]s connect %[2]s/a.sock %[2]s/b.sock`, wp, dir, sync)
		cmd := s.cmd("--bind", sync, sync, "--", "/bin/sh", "-c", script)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		must(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		for ready := false; !ready; {
			select {
			case err := <-done:
				t.Fatalf("the sandbox ended before the restart: %v\n%s", err, out.String())
			case <-time.After(50 * time.Millisecond):
				_, err := os.Stat(sync + "/ready")
				ready = err == nil
			}
		}
		// The service restarts: its socket is unlinked and bound again;
		// another one appears beside it.
		a.Close()
		a = listen(dir + "/a.sock")
		b := listen(dir + "/b.sock")
		t.Cleanup(func() { a.Close(); b.Close(); os.Remove(dir + "/a.sock"); os.Remove(dir + "/b.sock") })
		must(t, os.WriteFile(sync+"/go", nil, 0o644))
		if err := <-done; err != nil {
			t.Fatalf("sandbox: %v\n%s", err, out.String())
		}
		got := out.String()
		if strings.Count(got, dir+"/a.sock err:") != 2 || !strings.Contains(got, dir+"/b.sock err:") {
			t.Errorf("uid %d: a host socket re-created or bound during the session is reachable:\n%s", s.uid, got)
		}
		if !strings.Contains(got, "DATA-OK") {
			t.Errorf("uid %d: the socket directory's files no longer read:\n%s", s.uid, got)
		}
	})
}
