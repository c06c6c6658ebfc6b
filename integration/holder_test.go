package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
)

// stageProcs returns the live stage processes (argv[0] the stage marker)
// among pid's descendants, with their parents.
func stageProcs(pid int) map[int]int {
	t := procTable()
	out := map[int]int{}
	var walk func(int)
	walk = func(p int) {
		for _, c := range t {
			if c.ppid != p {
				continue
			}
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.pid) + "/cmdline")
			if strings.HasPrefix(string(b), "claude-sandbox:stage\x00") {
				out[c.pid] = c.ppid
			}
			walk(c.pid)
		}
	}
	walk(pid)
	return out
}

// A running jailed sandbox keeps one stage process, init, the launcher's
// own child: the holder, which builds the jail's namespace, is gone once
// it has (nothing of it waits for the sandbox's life). And killing the
// launcher still ends everything inside: init's parent-death signal now
// follows the launcher itself.
func TestJailHolderGoneLauncherDeathEndsAll(t *testing.T) {
	jailUsers(t, func(t *testing.T, l *lab, uid int) {
		bin := testutil.Build(t, "./cmd/claude-sandbox")
		token := fmt.Sprintf("holderless-%d-%d", uid, time.Now().UnixNano())
		cmd := l.jailCmd(uid, bin, "run", "--net=jail", "--", "/bin/sh", "-c", "sleep 1414 & echo ready; while :; do sleep 1; done", token)
		startReady(t, cmd, token)
		launcher := cmd.Process.Pid
		// The holder exits right after handing over the jail; poll,
		// bounded, for it to be gone.
		var stages map[int]int
		for i := 0; i < 250; i++ {
			if stages = stageProcs(launcher); len(stages) <= 1 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(stages) != 1 {
			t.Fatalf("stage processes of a running jailed sandbox: %v (pid: parent), want init alone", stages)
		}
		for pid, parent := range stages {
			if parent != launcher {
				t.Errorf("init (pid %d) is a child of %d, not of the launcher %d", pid, parent, launcher)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		var left []string
		for i := 0; i < 250; i++ {
			left = append(processesWith(token), processesWith("sleep\x001414")...)
			if len(left) == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(left) > 0 {
			t.Errorf("sandbox processes outlived the killed launcher: %v", left)
		}
		for pid := range stages {
			// Dead is enough: whoever it was re-parented to reaps it.
			for i := 0; i < 250 && alive(pid); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			if alive(pid) {
				t.Errorf("init (pid %d) outlived the killed launcher", pid)
			}
		}
	})
}

// alive reports a process that exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}
