package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/guard"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

// doctorMain checks every prerequisite and the installed layout, one line
// each: OK, or FIX with the exact remedy. Exit 1 when anything needs a fix.
func doctorMain(stdout io.Writer) int {
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

	var uts unix.Utsname
	_ = unix.Uname(&uts)
	rel := unix.ByteSliceToString(uts.Release[:])
	check("kernel "+rel+" (5.12 or later: the new mount API)", kernelFix(rel))

	fix := ""
	if v, ok := sysctl("user.max_user_namespaces"); ok && v == "0" {
		fix = "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)"
	}
	check("user.max_user_namespaces", fix)
	fix = ""
	if v, ok := sysctl("kernel.unprivileged_userns_clone"); ok && v == "0" {
		fix = "sysctl -w kernel.unprivileged_userns_clone=1"
	}
	check("kernel.unprivileged_userns_clone", fix)
	for _, k := range []string{"kernel.apparmor_restrict_unprivileged_userns", "kernel.apparmor_restrict_unprivileged_unconfined"} {
		fix = ""
		if v, ok := sysctl(k); ok && v == "1" {
			if _, err := os.Stat("/etc/apparmor.d/claude-sandbox"); err != nil {
				fix = "AppArmor restricts user namespaces: claude-sandbox install --apparmor (a profile for this binary only), or sysctl -w " + k + "=0"
			}
		}
		check(k, fix)
	}
	// A real sandbox start as an unprivileged user says more than sysctls.
	fix = ""
	cmd := exec.Command("/proc/self/exe", "run", "--net=none", "--bare", "--", "/bin/true")
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		fix = "a sandbox does not start: " + strings.TrimSpace(string(out))
	}
	check("a sandbox starts for an unprivileged user", fix)

	fix = ""
	if fi, err := os.Stat("/dev/net/tun"); err != nil {
		fix = "/dev/net/tun is missing: modprobe tun (in a container: --device=/dev/net/tun), or egress-jail = 0"
	} else if fi.Mode()&os.ModeCharDevice == 0 {
		fix = "/dev/net/tun is not a character device"
	} else if fi.Mode().Perm()&0o006 != 0o006 {
		fix = fmt.Sprintf("/dev/net/tun is mode %04o: chmod 0666 /dev/net/tun (as most distributions ship it)", fi.Mode().Perm())
	}
	check("/dev/net/tun for the egress jail", fix)

	// The installed layout.
	prog, progErr := os.ReadFile(guard.Program)
	fix = ""
	if progErr != nil {
		fix = "not installed: sudo claude-sandbox install"
	}
	check(guard.Program, fix)
	fix = ""
	if sh, err := os.ReadFile("/usr/local/bin/claude"); err != nil {
		fix = "no shadow: sudo claude-sandbox install"
	} else if progErr == nil && !bytes.Equal(sh, prog) {
		fix = "it is not claude-sandbox (an updater may have replaced it): sudo claude-sandbox install"
	}
	check("the shadow /usr/local/bin/claude", fix)
	fix = ""
	if _, err := os.Stat(shadow.RealBinary); err != nil {
		fix = "the real Claude Code is missing: install Claude Code, then sudo claude-sandbox install"
	}
	check("the real binary "+shadow.RealBinary, fix)
	fix = ""
	if home, err := os.UserHomeDir(); err == nil {
		if _, err := os.Lstat(home + "/.local/bin/claude"); err == nil {
			fix = home + "/.local/bin/claude exists again (the auto-updater?): it runs Claude unwrapped; sudo claude-sandbox install moves it away"
		}
	}
	check("no stray ~/.local/bin/claude", fix)
	fix = ""
	if b, err := os.ReadFile(guard.ManagedSettings); err != nil {
		fix = "no managed settings: sudo claude-sandbox install"
	} else if !bytes.Contains(b, []byte(guard.GateCommand)) || !bytes.Contains(b, []byte(guard.VerifyCommand)) {
		fix = "the integrity guard's hooks are missing: sudo claude-sandbox install"
	}
	check("the integrity guard in "+guard.ManagedSettings, fix)
	fix = ""
	if _, err := loadConfig(shadow.ConfigPath); err != nil {
		fix = err.Error()
	}
	check("the configuration "+shadow.ConfigPath, fix)

	if bad > 0 {
		fmt.Fprintf(stdout, "%d to fix\n", bad)
		return 1
	}
	fmt.Fprintln(stdout, "all good")
	return 0
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
