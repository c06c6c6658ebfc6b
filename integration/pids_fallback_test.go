package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// roProcSys is a shell prefix that runs "$@" in a mount namespace of its
// own whose /proc/sys is read-only, as in a container: the sandbox's
// kernel.pid_max cannot be written there (the fresh procfs that would
// reach it is refused too, /proc having a submount).
const roProcSys = `mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec "$@"`

// sandboxCgroups lists the pids cgroups the launcher makes, wherever the
// host mounts cgroup hierarchies.
func sandboxCgroups(t *testing.T) []string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), "claude-sandbox-") {
			found = append(found, p)
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// Issue 28: where the sandbox's kernel.pid_max cannot be written, a fork
// bomb as root under --pids-limit 400 still stops below 400 (a pids
// cgroup; as uid 65534, RLIMIT_NPROC or the cgroup), every process ends
// with the sandbox (the cgroup, removable only once empty, is gone). Fails without the fix: root
// got a warning and no limit (started 2000).
func TestPidsLimitWithoutPidMax(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		const limit = 400
		before := sandboxCgroups(t)
		c := s.cmd("--pids-limit", strconv.Itoa(limit), "--", s.probe, "forks", "2000")
		launcher := c.Args
		if s.uid != 0 {
			launcher = append([]string{"setpriv", "--reuid=" + strconv.Itoa(s.uid), "--regid=" + strconv.Itoa(s.uid), "--clear-groups"}, launcher...)
		}
		w := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", roProcSys, "sh"}, launcher...)...)
		w.Env, w.Dir = c.Env, c.Dir
		r := testutil.Run(t, w)
		started, errLine := forkResult(t, r)
		if errLine != "err:EAGAIN" || started >= limit {
			t.Errorf("fork bomb under --pids-limit %d with pid_max unwritable: started %d, %s; want fewer than %d and err:EAGAIN (%v)", limit, started, errLine, limit, r)
		}
		if s.uid == 0 && strings.Contains(r.Stderr, "process limit") {
			t.Errorf("root got a weaker limit than asked: %q", r.Stderr)
		}
		if after := sandboxCgroups(t); len(after) != len(before) {
			t.Errorf("pids cgroups before the run %q, after %q: one was left behind", before, after)
		}
	})
}
