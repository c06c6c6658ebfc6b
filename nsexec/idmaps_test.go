package nsexec

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// A stage in a new user namespace is cloned sharing the launcher's memory
// and its id maps are written once it has exec'd (stageCmd.Start), not by
// syscall.ForkExec before: by the time Start returns they must be in
// place, with setgroups denied, exactly as ForkExec wrote them. The child
// here waits on its stdin, as a stage waits for its start message, and
// then reports its maps.
func TestStageIDMapsWrittenByStart(t *testing.T) {
	testutil.NeedsUserNS(t)
	uid, gid := os.Getuid(), os.Getgid()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	c := &stageCmd{
		Path:   "/bin/sh",
		Args:   []string{"sh", "-c", "read x; cat /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups"},
		Stdin:  inR,
		Stdout: outW,
		Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		},
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	if _, err := inW.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(outR)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil || c.ProcessState.ws.ExitStatus() != 0 {
		t.Fatalf("child: %v; output %q", err, out)
	}
	f := strings.Fields(string(out))
	want := []string{strconv.Itoa(uid), strconv.Itoa(uid), "1", strconv.Itoa(gid), strconv.Itoa(gid), "1", "deny"}
	if strings.Join(f, " ") != strings.Join(want, " ") {
		t.Fatalf("maps and setgroups %q, want %q", f, want)
	}
}
