package verify

import (
	"os"
	"path/filepath"
	"testing"
)

func writeRV(t *testing.T, root, p, data string, mode os.FileMode) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(full, mode); err != nil {
		t.Fatal(err)
	}
}

// P64: a root-only file that reads is ESCAPED (as root, the tests' uid);
// one in the session's own workspace, or a world-readable one, is not.
func TestPrivateFileProbe(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("P64 judges a root caller's view; run as root")
	}
	fx := t.TempDir()
	writeRV(t, fx, "/etc/public.conf", "x", 0o644)
	writeRV(t, fx, "/home/w/secret.key", "x", 0o600)
	if st, ev := privateFileProbe(&Env{Root: fx, Workspace: "/home/w"}); st != Blocked {
		t.Errorf("only the workspace's own and world-readable files: %s %s, want BLOCKED", st, ev)
	}
	writeRV(t, fx, "/etc/wireguard/wg0.conf", "PrivateKey", 0o600)
	if st, ev := privateFileProbe(&Env{Root: fx, Workspace: "/home/w"}); st != Escaped {
		t.Errorf("a readable root-only wg0.conf: %s %s, want ESCAPED", st, ev)
	}
}

// P65: a page-frame file that reads is ESCAPED; none reading is BLOCKED.
func TestKernelPagesProbe(t *testing.T) {
	fx := t.TempDir()
	if st, ev := kernelPagesProbe(&Env{Root: fx}); st != Blocked {
		t.Errorf("no page files: %s %s", st, ev)
	}
	writeRV(t, fx, "/proc/slabinfo", "", 0o444)
	if st, ev := kernelPagesProbe(&Env{Root: fx}); st != Blocked {
		t.Errorf("an empty (masked) slabinfo: %s %s", st, ev)
	}
	writeRV(t, fx, "/proc/kpageflags", "\x01\x02", 0o444)
	if st, ev := kernelPagesProbe(&Env{Root: fx}); st != Escaped {
		t.Errorf("a readable kpageflags: %s %s, want ESCAPED", st, ev)
	}
}

// P66: v1 hierarchies, the root cgroup, or a mount above the sandbox's
// cgroup are ESCAPED; an empty directory or the own namespace's root is
// not.
func TestHostCgroupProbe(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  Status
	}{
		{"empty", map[string]string{}, Blocked},
		{"v1 hierarchies", map[string]string{"/sys/fs/cgroup/memory/tasks": ""}, Escaped},
		{"the root cgroup", map[string]string{"/sys/fs/cgroup/cgroup.procs": "", "/proc/self/cgroup": "0::/\n"}, Escaped},
		{"rooted above us", map[string]string{"/sys/fs/cgroup/cgroup.procs": "", "/sys/fs/cgroup/cgroup.type": "domain", "/proc/self/cgroup": "0::/user.slice/x\n"}, Escaped},
		{"own namespace", map[string]string{"/sys/fs/cgroup/cgroup.procs": "", "/sys/fs/cgroup/cgroup.type": "domain", "/proc/self/cgroup": "0::/\n"}, Blocked},
	}
	for _, c := range cases {
		fx := t.TempDir()
		if err := os.MkdirAll(filepath.Join(fx, "/sys/fs/cgroup"), 0o755); err != nil {
			t.Fatal(err)
		}
		for p, d := range c.files {
			writeRV(t, fx, p, d, 0o644)
		}
		if st, ev := hostCgroupProbe(&Env{Root: fx}); st != c.want {
			t.Errorf("%s: %s %s, want %s", c.name, st, ev, c.want)
		}
	}
}

// P67: a writable tmpfs without size= in its options is ESCAPED; sized or
// read-only ones are not.
func TestTmpfsSizeProbe(t *testing.T) {
	sized := "30 20 0:40 / /tmp rw,nosuid,nodev - tmpfs none rw,size=8192k,mode=1777\n" +
		"31 20 0:41 / /etc/ssl/private ro,nosuid - tmpfs none ro,size=4k,mode=755\n" +
		"32 20 0:42 / /run/user ro,nosuid - tmpfs tmpfs ro,mode=755\n"
	fx := t.TempDir()
	writeRV(t, fx, "/proc/self/mountinfo", sized, 0o444)
	if st, ev := tmpfsSizeProbe(&Env{Root: fx}); st != Blocked {
		t.Errorf("sized and read-only tmpfs: %s %s, want BLOCKED", st, ev)
	}
	writeRV(t, fx, "/proc/self/mountinfo", sized+"33 20 0:43 / /dev/shm rw,nosuid,nodev - tmpfs none rw,mode=1777\n", 0o444)
	if st, ev := tmpfsSizeProbe(&Env{Root: fx}); st != Escaped {
		t.Errorf("an unsized writable /dev/shm: %s %s, want ESCAPED", st, ev)
	}
}
