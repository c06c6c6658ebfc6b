package jail

import (
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// The lookups a second are bounded in number and in time.
func TestOwnerBound(t *testing.T) {
	j := &Jail{}
	n := 0
	for j.ownerAllowed() {
		n++
		if n > maxOwnerLookups+1 {
			break
		}
	}
	if n > maxOwnerLookups {
		t.Errorf("%d lookups allowed in a second, want at most %d", n, maxOwnerLookups)
	}
	j = &Jail{}
	j.own.window.Store(time.Now().Unix())
	j.own.spent.Store(int64(maxOwnerTime))
	if j.ownerAllowed() && j.own.spent.Load() != 0 { // (allowed only if a new second began)
		t.Error("a lookup allowed past the second's time bound")
	}
	if _, ok := j.FlowOwner("tcp", netipAddrPort(), netipAddrPort()); ok {
		t.Error("an owner found by a jail never attached")
	}
}

func netipAddrPort() netip.AddrPort { return netip.MustParseAddrPort("10.0.0.2:1000") }

// TestSandboxProcRefusesHost tries the threat model's claim that the
// owner lookup reads only a procfs in which the launcher has no pid: a
// jail told an init whose /proc is the host's (this test's own) must not
// use it (the host's processes would answer for the sandbox's), while a
// process in a PID namespace of its own with its own /proc is used.
func TestSandboxProcRefusesHost(t *testing.T) {
	testutil.NeedsRoot(t)
	j := &Jail{}
	j.SetInitPID(os.Getpid())
	if fd := j.sandboxProc(); fd >= 0 {
		unix.Close(fd)
		t.Fatal("the host's /proc (this process has a pid there) was taken for the sandbox's")
	}

	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo up; exec cat")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	if _, err := out.Read(make([]byte, 3)); err != nil { // /proc is mounted
		t.Fatal(err)
	}
	j = &Jail{}
	j.SetInitPID(cmd.Process.Pid)
	defer j.closeOwners()
	if j.sandboxProc() < 0 {
		t.Fatal("a PID namespace's own /proc was refused")
	}
}
