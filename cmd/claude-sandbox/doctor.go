package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/internal/install"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

const doctorHelp = `Usage: claude-sandbox doctor

Checks, one line each, what the sandbox needs on this machine (kernel,
user namespaces, AppArmor, /dev/net/tun for the egress jail, a real
sandbox start as an unprivileged user) and, when the shadow is installed
(sudo claude-sandbox install), the installed layout it runs Claude Code
from. A line is OK, FIX with the exact remedy, or -- when it does not
apply (the shadow's checks on a machine without the shadow). Exit 1 when
anything needs a fix, 0 otherwise. It takes no options and changes
nothing.
`

// doctorMain checks every prerequisite and the installed layout, one line
// each: OK, FIX with the exact remedy, or -- (not used here). Exit 1 when
// anything needs a fix.
func doctorMain(args []string, stdout, stderr io.Writer) int {
	if code, done := parseFlags(newFlags("doctor"), args, doctorHelp, stdout, stderr); done {
		return code
	}
	if len(args) > 0 {
		return usageLine(stderr, "doctor", "unexpected argument "+args[0])
	}
	bad := 0
	check := func(name string, fix string) {
		if fix == "" {
			fmt.Fprintf(stdout, "OK   %s\n", name)
			return
		}
		bad++
		fmt.Fprintf(stdout, "FIX  %s: %s\n", name, fix)
	}
	sysctl := func(name string) (string, bool) {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		return strings.TrimSpace(string(b)), err == nil
	}

	fmt.Fprintln(stdout, "The sandbox (claude-sandbox run, and the shadow's launches):")
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	rel := unix.ByteSliceToString(uts.Release[:])
	check("kernel "+rel+" (5.12 or later: the new mount API)", kernelFix(rel))

	// A real sandbox start as an unprivileged user says more than sysctls;
	// the sysctls then say why it fails.
	startFix := ""
	cmd := exec.Command("/proc/self/exe", "run", "--net=none", "--bare", "--", "/bin/true")
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		why := strings.TrimSpace(string(out))
		if why == "" {
			why = "it printed nothing"
		}
		startFix = fmt.Sprintf("a sandbox around /bin/true fails (%v): %s", err, why)
	}

	fix := ""
	if v, ok := sysctl("user.max_user_namespaces"); ok && v == "0" {
		fix = "user namespaces are off: sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)"
	}
	check("user.max_user_namespaces", fix)
	fix = ""
	if v, ok := sysctl("kernel.unprivileged_userns_clone"); ok && v == "0" {
		fix = "unprivileged user namespaces are off: sysctl -w kernel.unprivileged_userns_clone=1"
	}
	check("kernel.unprivileged_userns_clone", fix)
	for _, k := range []string{"kernel.apparmor_restrict_unprivileged_userns", "kernel.apparmor_restrict_unprivileged_unconfined"} {
		fix = ""
		// A restriction that does not stop the sandbox (the profile is
		// loaded, or this user is exempt) needs nothing.
		if v, ok := sysctl(k); ok && v == "1" && startFix != "" {
			if _, err := os.Stat("/etc/apparmor.d/claude-sandbox"); err != nil {
				fix = "AppArmor restricts user namespaces: sudo claude-sandbox install --apparmor (a profile for this binary only), or sysctl -w " + k + "=0"
			}
		}
		check(k, fix)
	}
	check("a sandbox starts for an unprivileged user", startFix)
	check("/dev/net/tun for the egress jail (--net=jail, the default)", tunProblem("/dev/net/tun"))
	degradedChecks(stdout, check, startFix == "")

	// The installed layout: only where the shadow is (being) used.
	fmt.Fprintln(stdout, "The shadow (claude run inside the sandbox; sudo claude-sandbox install sets it up):")
	_, progErr := os.Stat(guard.Program)
	settings, setErr := os.ReadFile(guard.ManagedSettings)
	guarded := setErr == nil && bytes.Contains(settings, []byte(guard.GateCommand))
	if progErr != nil && errors.Is(progErr, fs.ErrNotExist) && !guarded {
		fmt.Fprintf(stdout, "--   not installed: %s is missing, so the shadow's checks do not apply (sudo claude-sandbox install, to run Claude Code sandboxed as `claude`)\n", guard.Program)
	} else {
		fix = ""
		if progErr != nil {
			fix = fmt.Sprintf("%v: sudo claude-sandbox install", progErr)
		}
		check(guard.Program, fix)
		check("the shadow /usr/local/bin/claude", shadowPlaceFix("/usr/local/bin/claude", guard.Program))
		check("the real binary "+shadow.RealBinary, realBinaryFix(shadow.RealBinary))
		fix = ""
		if home, err := os.UserHomeDir(); err == nil {
			if _, err := os.Lstat(home + "/.local/bin/claude"); err == nil {
				fix = home + "/.local/bin/claude exists again (Claude Code's native installer or its auto-updater): it runs Claude unwrapped; sudo claude-sandbox install moves it away"
			}
		}
		check("no stray ~/.local/bin/claude", fix)
		fix = ""
		if setErr != nil {
			fix = fmt.Sprintf("no managed settings (%v): sudo claude-sandbox install", setErr)
		} else if !guarded || !bytes.Contains(settings, []byte(guard.VerifyCommand)) {
			fix = "the integrity guard's hooks are missing: sudo claude-sandbox install"
		}
		check("the integrity guard in "+guard.ManagedSettings, fix)
		fix = ""
		if _, err := loadConfig(shadow.ConfigPath); err != nil {
			fix = err.Error()
		}
		check("the configuration "+shadow.ConfigPath, fix)
	}

	if bad > 0 {
		fmt.Fprintf(stdout, "%d to fix\n", bad)
		return 1
	}
	fmt.Fprintln(stdout, "all good")
	return 0
}

// degradedChecks names each degraded mode that applies here, with its
// cost and the exact remedy for the runtime detected (degraded.go): a
// degraded sandbox is never reported healthy. When sandboxes start
// (starts), it starts one as the caller, around unshare --user (a nested
// user namespace): its exit says whether one can be made inside, and its
// warnings name the other modes. The process limit is one line, whether
// or not a sandbox was started: its kind from nsexec.PidsLimitKind, a FIX
// when that finds none or the launch warned it had none.
func degradedChecks(stdout io.Writer, check func(name, fix string), starts bool) {
	rt := currentRuntime()
	fix := func(m degradedMode) string { return modeCost(m) + "; to fix: " + modeFix(m, rt) }
	warnings := ""
	if starts {
		where := "this host"
		if rt != rtHost {
			where = "a container (" + string(rt) + ")"
		}
		fmt.Fprintf(stdout, "Full strength (running in %s):\n", where)
		argv := []string{"run", "--net=none", "--bare", "--", "/bin/true"}
		unshare, lookErr := exec.LookPath("unshare")
		if lookErr == nil {
			argv = append(argv[:len(argv)-1], unshare, "--user", "/bin/true")
		}
		cmd := exec.Command("/proc/self/exe", argv...)
		cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		// The launcher's warnings, and what else was said (unshare's).
		var said []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if w, ok := strings.CutPrefix(l, "claude-sandbox: warning: "); ok {
				warnings += w + "\n"
			} else if l != "" {
				said = append(said, l)
			}
		}
		f := ""
		if warnedMode(warnings, modeProcFallback) {
			f = fix(modeProcFallback)
		}
		check("a fresh /proc inside the sandbox", f)
		if lookErr != nil {
			fmt.Fprintln(stdout, "--   nested user namespaces: no unshare(1) here to try one with")
		} else {
			f = ""
			if err != nil {
				f = fix(modeNoNestedUserNS) + " (unshare --user inside: " + strings.Join(said, "; ") + ")"
			}
			check("nested user namespaces inside the sandbox", f)
		}
	}
	kind, why := nsexec.PidsLimitKind()
	check("a process limit for launches by this user (--pids-limit): "+kind, pidsLimitFix(why, warnings, rt))
	f := ""
	if !starts {
		return
	}
	if v := pingRangeProblem(realSys.readFile("/proc/sys/net/ipv4/ping_group_range"), os.Getgid()); v != "" {
		f = v + ": " + fix(modeNoPing)
	} else if procSysReadOnly() {
		f = "/proc/sys is read-only here, so the jail cannot allow ping in its namespace: " + fix(modeNoPing) + "; or " + modeFix(modeProcFallback, rt)
	}
	check("ping through the egress jail", f)
}

// pidsLimitFix is the process-limit line's FIX, or "": why is what
// nsexec.PidsLimitKind found wrong ("" when a limit applies), warnings
// the launch's (one a line; "" when none was started).
func pidsLimitFix(why, warnings string, rt runtimeKind) string {
	switch {
	case why != "":
		why = " (" + why + ")"
	case warnedMode(warnings, modeNoPidsLimit):
		why = " (the launch warned of it)"
	default:
		return ""
	}
	return modeCost(modeNoPidsLimit) + "; to fix: " + modeFix(modeNoPidsLimit, rt) + why
}

// pingRangeProblem says why net.ipv4.ping_group_range (its text) keeps
// group gid from unprivileged ping sockets, which the jail's ping relay
// uses on the host, or "".
func pingRangeProblem(text string, gid int) string {
	f := strings.Fields(text)
	if len(f) != 2 {
		return ""
	}
	lo, err1 := strconv.ParseInt(f[0], 10, 64)
	hi, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || (int64(gid) >= lo && int64(gid) <= hi) {
		return ""
	}
	return fmt.Sprintf("net.ipv4.ping_group_range is %q, without group %d", strings.Join(f, " "), gid)
}

// procSysReadOnly reports whether /proc/sys is mounted read-only.
func procSysReadOnly() bool {
	var st unix.Statfs_t
	return unix.Statfs("/proc/sys", &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// shadowPlaceFix says what is wrong at the shadow's place path (the shadow
// must be the program's bytes, a regular file), or "". A symlink there is
// a package manager's: npm update -g (or install -g) put its link into
// node_modules back over the shadow.
func shadowPlaceFix(path, program string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Sprintf("no shadow (%v): sudo claude-sandbox install", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		if strings.Contains(target, "node_modules") {
			return fmt.Sprintf("it is npm's link to %s again (npm update -g or npm install -g replaced the shadow): claude runs unwrapped; sudo claude-sandbox install puts the shadow back (and uninstall npm's link)", target)
		}
		return fmt.Sprintf("it is a link to %s, not the shadow (an updater replaced it?): claude runs unwrapped; sudo claude-sandbox install", target)
	}
	if !fi.Mode().IsRegular() {
		return "it is not a regular file: move it away, then sudo claude-sandbox install"
	}
	if same, err := install.SameFile(path, program); err == nil && !same {
		return "it is not claude-sandbox (an updater may have replaced it): sudo claude-sandbox install"
	}
	return ""
}

// realBinaryFix says what is wrong with the relocated real binary path,
// or "". It is a file, or (npm's layout) a link into the package.
func realBinaryFix(path string) string {
	if _, err := os.Stat(path); err == nil {
		return ""
	}
	if target, err := os.Readlink(path); err == nil {
		return fmt.Sprintf("it links to %s, which is gone (npm uninstall, or a package moved by an update?): install Claude Code again (npm install -g @anthropic-ai/claude-code), then sudo claude-sandbox install", target)
	}
	return "the real Claude Code is missing: install Claude Code, then sudo claude-sandbox install"
}

// tunProblem says what keeps path from being the TUN device users can
// open for the egress jail, or "".
func tunProblem(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return path + " is missing: modprobe tun (in a container: --device=/dev/net/tun)"
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return path + " is not a character device: remove it, then mknod -m 0666 /dev/net/tun c 10 200"
	}
	if maj, min := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)); maj != 10 || min != 200 {
		return fmt.Sprintf("%s is device %d:%d, not the TUN device 10:200: remove it, then mknod -m 0666 /dev/net/tun c 10 200", path, maj, min)
	}
	if st.Mode&0o006 != 0o006 {
		return fmt.Sprintf("%s is mode %04o: users cannot open it; chmod 0666 %s (as most distributions ship it)", path, st.Mode&0o7777, path)
	}
	return ""
}

// kernelFix says what is wrong with kernel release rel, or "".
func kernelFix(rel string) string {
	f := strings.FieldsFunc(rel, func(r rune) bool { return r == '.' || r == '-' })
	if len(f) < 2 {
		return ""
	}
	major, err1 := strconv.Atoi(f[0])
	minor, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return ""
	}
	if major > 5 || major == 5 && minor >= 12 {
		return ""
	}
	return "this kernel is older than 5.12: the sandbox needs mount_setattr; upgrade the kernel"
}
