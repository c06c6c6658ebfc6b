package nsexec

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Where the sandbox's own kernel.pid_max cannot be set (a kernel before
// 6.14, or a read-only /proc/sys, as in many containers), the launcher
// bounds the sandbox with a pids cgroup instead, when it may make one: a
// new cgroup with pids.max = the limit, into which init is moved before it
// starts anything (so every task of the sandbox, nested namespaces
// included, is counted). It is made
//
//   - on cgroup v2, beside the launcher's own cgroup (where the pids
//     controller is enabled for the launcher's cgroup, its parent's
//     children have it too; the v2 rule that a cgroup with controllers for
//     its children holds no process keeps it out of the launcher's own),
//     or below the root when the launcher is there. It needs that parent
//     to be writable: root, or a delegated subtree (systemd's user@.service
//     delegates one to each user).
//   - on a v1 pids hierarchy, below the launcher's own pids cgroup
//     (root only, in practice).
//
// Otherwise init falls back to RLIMIT_NPROC (non-root callers), or warns.

// pidsCgroup is a cgroup made for one sandbox.
type pidsCgroup struct {
	dir string
}

var cgroupSeq atomic.Uint64

// pidMaxUnsettable reports whether init will likely fail to set the
// sandbox's kernel.pid_max, and why.
func pidMaxUnsettable() (bool, string) {
	if rel := kernelRelease(); !kernelAtLeast(rel, minPerNSPidMax) {
		return true, fmt.Sprintf("kernel %s keeps one pid_max for the whole machine (per PID namespace from 6.14)", rel)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/proc/sys", &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
		return true, "/proc/sys is read-only here"
	}
	return false, ""
}

// cgroupMounts returns the mount points of the cgroup2 hierarchy and of a
// v1 hierarchy holding the pids controller ("" for each one missing), each
// only where its root is the hierarchy's (not a bind of a subtree).
func cgroupMounts() (v2, v1pids string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 || a[3] != "/" {
			continue
		}
		switch {
		case b[0] == "cgroup2" && v2 == "":
			v2 = unescapeMount(a[4])
		case b[0] == "cgroup" && v1pids == "" && hasOpt(b[2], "pids"):
			v1pids = unescapeMount(a[4])
		}
	}
	return v2, v1pids
}

func hasOpt(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownCgroups returns this process's cgroup v2 path and its v1 pids path
// ("" where none), from /proc/self/cgroup.
func ownCgroups() (v2, v1pids string) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasOpt(parts[1], "pids"):
			v1pids = parts[2]
		}
	}
	return v2, v1pids
}

// pidsCgroupParent returns the directory under which this process may make
// a pids cgroup, or "" and why not. With enable false it changes nothing
// (a root cgroup whose children lack the pids controller is then taken as
// able to get it).
func pidsCgroupParent(enable bool) (string, error) {
	mnt2, mnt1 := cgroupMounts()
	own2, own1 := ownCgroups()
	var why []string
	if mnt2 != "" && own2 != "" && !strings.HasPrefix(own2, "/..") {
		own := filepath.Join(mnt2, own2)
		parent := filepath.Dir(own)
		if own2 == "/" {
			parent = own
		}
		ctl, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
		avail, _ := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
		switch {
		case !hasField(string(ctl), "pids") && (own2 != "/" || !hasField(string(avail), "pids")):
			why = append(why, fmt.Sprintf("cgroup v2: the pids controller is not enabled for %s", own))
		case unix.Access(parent, unix.W_OK) != nil:
			why = append(why, fmt.Sprintf("cgroup v2: %s is not writable (not delegated to this user)", parent))
		default:
			if !hasField(string(ctl), "pids") && enable {
				// The root cgroup: enabling a controller there is allowed.
				if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
					why = append(why, fmt.Sprintf("cgroup v2: enable pids in %s: %v", parent, err))
					break
				}
			}
			return parent, nil
		}
	}
	if mnt1 != "" && own1 != "" && !strings.HasPrefix(own1, "/..") {
		own := filepath.Join(mnt1, own1)
		if unix.Access(own, unix.W_OK) == nil {
			return own, nil
		}
		why = append(why, fmt.Sprintf("cgroup v1: %s is not writable", own))
	}
	if len(why) == 0 {
		return "", errors.New("no cgroup hierarchy with the pids controller")
	}
	return "", errors.New(strings.Join(why, "; "))
}

func hasField(s, f string) bool {
	for _, x := range strings.Fields(s) {
		if x == f {
			return true
		}
	}
	return false
}

// newPidsCgroup makes a cgroup whose pids.max is limit.
func newPidsCgroup(limit int) (*pidsCgroup, error) {
	parent, err := pidsCgroupParent(true)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(parent, fmt.Sprintf("claude-sandbox-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make the pids cgroup: %w", err)
	}
	c := &pidsCgroup{dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(limit)), 0); err != nil {
		c.remove()
		return nil, fmt.Errorf("set %s/pids.max: %w", dir, err)
	}
	return c, nil
}

// add moves pid (a whole process) into the cgroup.
func (c *pidsCgroup) add(pid int) error {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move the sandbox into its pids cgroup %s: %w", c.dir, err)
	}
	return nil
}

// remove deletes the cgroup once the sandbox is gone. Its tasks leave it
// as they are reaped; a straggler (the launch abandoned before init was
// reaped) is killed.
func (c *pidsCgroup) remove() {
	for i := 0; i < 200; i++ {
		err := unix.Rmdir(c.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if !errors.Is(err, unix.EBUSY) {
			return
		}
		if b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PidsLimitKind says which process limit a sandbox started by this process
// with a --pids-limit gets here, and, when it gets none, what to change
// for one (claude-sandbox doctor prints it). It changes nothing.
func PidsLimitKind() (kind, fix string) {
	unsettable, why := pidMaxUnsettable()
	var parent string
	var cgErr error
	if unsettable { // the launcher makes a pids cgroup only then
		parent, cgErr = pidsCgroupParent(false)
	}
	switch pidsBoundFor(!unsettable, unsettable && cgErr == nil, CallerIsHostRoot()) {
	case boundPidMax:
		return "the sandbox's own kernel.pid_max (Linux 6.14 or later)", ""
	case boundCgroup:
		return fmt.Sprintf("a pids cgroup under %s (%s)", parent, why), ""
	case boundNproc:
		return fmt.Sprintf("RLIMIT_NPROC (%s; no pids cgroup: %v); it also counts this user's processes outside the sandbox against the limit", why, cgErr), ""
	}
	return "none", fmt.Sprintf("%s, no pids cgroup (%v), and RLIMIT_NPROC does not bind root: a fork bomb inside can exhaust the host's pids. Use Linux 6.14 or later with a writable /proc/sys, or a cgroup hierarchy with the pids controller writable by root (cgroup v2 with pids enabled for this process's parent cgroup), or run as a non-root user", why, cgErr)
}
