package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// Claude Code installed with npm (the usual devcontainer layout):
// /usr/local/bin/claude a link into the package in node_modules, where
// its native binary lives. install (for real, at /, in a throwaway view of
// /etc, /usr/libexec and /usr/local/bin) puts the shadow in the link's
// place and links the relocated place to the package's binary; `claude
// --version` through the shadow prints the real CLI's version; uninstall
// puts npm's link back, same target. The package is not touched.
func TestInstallNPMLayoutRealCLI(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	claudeCLI(t)
	pkgBin := filepath.Join(claudeCLIDir, "node_modules/@anthropic-ai/claude-code/bin/claude.exe")
	if _, err := os.Stat(pkgBin); err != nil {
		t.Fatalf("the npm package's binary: %v", err)
	}
	direct, err := exec.Command(pkgBin, "--version").Output()
	if err != nil || !strings.Contains(string(direct), "Claude Code") {
		t.Fatalf("the real CLI's own --version: %q %v", direct, err)
	}
	pkgBefore, err := os.Stat(pkgBin)
	must(t, err)
	bin := testutil.Build(t, "./cmd/claude-sandbox")
	l := newLab(t)
	view := testutil.MkdirFor(t, 0)
	var binds []string
	for _, d := range []string{"/etc", "/usr/libexec", "/usr/local/bin"} {
		c := filepath.Join(view, strings.ReplaceAll(d, "/", "_"))
		copyHostDir(t, d, c)
		binds = append(binds, fmt.Sprintf("mkdir -p %s && mount --bind %s %s", d, c, d))
	}
	home := testutil.MkdirFor(t, 0)
	ws := testutil.MkdirFor(t, 0)
	script := strings.Join(binds, " && ") + fmt.Sprintf(
		" && mount -t tmpfs none /dev/net && mknod -m 666 /dev/net/tun c 10 200"+
			" && rm -f /usr/local/bin/claude && ln -s %[1]s /usr/local/bin/claude"+
			" && %[2]s install --skip-checks >/dev/null"+
			" && echo \"REAL=$(readlink /usr/libexec/claude-sandbox/claude)\""+
			" && test ! -L /usr/local/bin/claude && cmp -s /usr/local/bin/claude %[2]s && echo SHADOW=ok"+
			" && (cd %[3]s && env -i HOME=%[4]s USER=root PATH=/usr/local/bin:/usr/bin:/bin claude --version | sed 's/^/VERSION=/')"+
			" && %[2]s uninstall >/dev/null"+
			" && echo \"AFTER=$(readlink /usr/local/bin/claude)\"",
		pkgBin, bin, ws, home)
	cmd := exec.Command("ip", "netns", "exec", l.host, "sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	r := testutil.Run(t, cmd)
	if r.Code != 0 {
		t.Fatalf("install, claude --version, uninstall: %v", r)
	}
	for _, want := range []string{
		"REAL=" + pkgBin + "\n",
		"SHADOW=ok\n",
		"VERSION=" + string(direct),
		"AFTER=" + pkgBin + "\n",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("output %q lacks %q", r.Stdout, want)
		}
	}
	if fi, err := os.Stat(pkgBin); err != nil || !os.SameFile(fi, pkgBefore) || fi.ModTime() != pkgBefore.ModTime() {
		t.Errorf("npm's package binary changed: %v %v", fi, err)
	}
}
