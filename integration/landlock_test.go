package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// Issue 28: under --net=host the sandbox shares the host's network
// namespace, and with it the host's abstract Unix sockets (X11, D-Bus):
// Landlock's abstract socket scope refuses a connection to one created
// outside the sandbox. The "host" is a network namespace of the test's
// own (abstract names are per network namespace): a listener there, and
// the launcher with --net=host in the same namespace. Fails without the
// fix: the connection from inside succeeds ("ok").
func TestLandlockAbstractSocketScoped(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		name := "claude-sandbox-test-abstract-" + strconv.Itoa(s.uid)
		c := s.cmd("--net=host", "--", s.probe, "abstract-connect", name)
		launcher := c.Args
		if s.uid != 0 {
			launcher = append([]string{"setpriv", "--reuid=" + strconv.Itoa(s.uid), "--regid=" + strconv.Itoa(s.uid), "--clear-groups"}, launcher...)
		}
		// The listener, the control (the same probe outside the sandbox),
		// then the sandbox; the listener ends with the namespace's shell.
		script := `"$0" abstract-listen "$1" >/dev/null & l=$!
while ! grep -q "@$1\$" /proc/net/unix; do sleep 0.02; done
echo "outside:$("$0" abstract-connect "$1")"
shift; echo "inside:$("$@")"; kill $l`
		w := exec.Command("unshare", append([]string{"--net", "sh", "-c", script, s.probe, name}, launcher...)...)
		w.Env, w.Dir = c.Env, c.Dir
		r := testutil.Run(t, w)
		if !strings.Contains(r.Stdout, "outside:ok") {
			t.Fatalf("control: the listener could not be reached from outside the sandbox: %v", r)
		}
		if !strings.Contains(r.Stdout, "inside:err:EPERM") {
			t.Errorf("the host's abstract socket under --net=host: %v; want inside:err:EPERM", r)
		}
	})
}

// Issue 28: a signal from inside to a process outside the sandbox fails
// with EPERM. The only host processes a command inside can name are those
// that join the sandbox's PID namespace from the host (a debugger,
// nsenter): the test starts one, and the command finds it and sends it
// SIGTERM. Fails without the fix: the signal is delivered ("ok") and the
// host process dies.
func TestLandlockSignalScoped(t *testing.T) {
	users(t, func(t *testing.T, s *sandbox) {
		const victimCmd = "sleep 987654"
		c := s.cmd("--json-status-fd", "3", "--", s.probe, "signal-cmdline", victimCmd)
		sr, sw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer sr.Close()
		c.ExtraFiles = []*os.File{sw}
		out := &strings.Builder{}
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		sw.Close()
		var started struct {
			Event   string `json:"event"`
			InitPID int    `json:"init-pid"`
		}
		line, err := bufio.NewReader(sr).ReadBytes('\n')
		if err != nil || json.Unmarshal(line, &started) != nil || started.Event != "started" {
			_ = c.Process.Kill()
			_ = c.Wait()
			t.Fatalf("status %q (%v); launcher said %q", line, err, out)
		}
		// A host process, of the sandbox's user, that joins its PID
		// namespace (nsenter forks: the child has a pid inside).
		victim := exec.Command("nsenter", "--target", strconv.Itoa(started.InitPID), "--pid", "--",
			"setpriv", "--reuid="+strconv.Itoa(s.uid), "--regid="+strconv.Itoa(s.uid), "--clear-groups", "sleep", "987654")
		if err := victim.Start(); err != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
			t.Fatal(err)
		}
		victimDone := make(chan struct{})
		go func() {
			_ = victim.Wait()
			close(victimDone)
		}()
		launcherDone := make(chan error, 1)
		go func() { launcherDone <- c.Wait() }()
		var werr error
		select {
		case werr = <-launcherDone:
		case <-victimDone:
			// Ended first. Killed (SIGKILL) by the end of the sandbox's
			// PID namespace, the launcher is ending too; otherwise
			// (nsenter failed, or the signal got through) the probe
			// inside might wait for it forever.
			if victim.ProcessState.String() != "signal: killed" {
				_ = c.Process.Kill()
			}
			werr = <-launcherDone
		}
		res := strings.TrimSpace(out.String())
		// The sandbox's end took the victim with its PID namespace
		// (SIGKILL); nsenter re-raises how its child ended.
		<-victimDone
		how := victim.ProcessState.String()
		if !strings.Contains(res, "err:EPERM") {
			t.Errorf("SIGTERM from inside to a host process in the sandbox's PID namespace: %q; want err:EPERM", res)
		}
		if how == "signal: terminated" {
			t.Errorf("the host process was killed from inside (%s)", how)
		}
		if werr != nil && strings.Contains(res, "err:EPERM") {
			t.Errorf("launcher: %v: %q", werr, res)
		}
	})
}
