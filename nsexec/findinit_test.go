package nsexec

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/plan"
)

// findInit names, among this process's children, the one holding init's
// end of its channel at fd 3 (how the launcher finds an init whose holder
// died before saying its pid), and no other child.
func TestFindInitByChannel(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer ours.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fds[1], &st); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "30") // a child without the channel
	initProc := exec.Command("sleep", "30")
	initProc.ExtraFiles = []*os.File{theirs}
	for _, c := range []*exec.Cmd{other, initProc} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func(c *exec.Cmd) { _ = c.Process.Kill(); _ = c.Wait() }(c)
	}
	theirs.Close()
	l := &launch{p: &plan.Plan{Net: plan.NetJail}, initFD: -1, initChan: st.Ino}
	if got := l.findInit(); got != initProc.Process.Pid {
		t.Errorf("findInit = %d, want %d (the child holding the channel; the other is %d)", got, initProc.Process.Pid, other.Process.Pid)
	}
	l.initChan = st.Ino + 1
	if got := l.findInit(); got != 0 {
		t.Errorf("findInit for another channel = %d, want 0", got)
	}
}
