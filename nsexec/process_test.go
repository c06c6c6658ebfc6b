package nsexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claude-sandbox/claude-sandbox/plan"
)

func TestStatusPids(t *testing.T) {
	status := "Name:\tsh\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t4200\nTracerPid:\t0\nNSpid:\t4242\t17\t2\n"
	if ppid, nspid := statusPids(status); ppid != 4200 || nspid != 2 {
		t.Errorf("statusPids = %d, %d; want 4200, 2 (the innermost NSpid)", ppid, nspid)
	}
	if ppid, nspid := statusPids("PPid:\t1\nNSpid:\t99\n"); ppid != 1 || nspid != 99 {
		t.Errorf("no nesting: %d, %d", ppid, nspid)
	}
}

// A stage binary that never runs the stage and never exits (a server
// whose main forgot Init) is stopped once the hello wait runs out, and the
// start fails naming the fix; nothing of it is left.
func TestSilentStageTimesOut(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CLAUDE_SANDBOX_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("needs root")
		}
		t.Skip("needs root")
	}
	dir := t.TempDir()
	// The stage runs as a sleep of this test's own, by a path in its
	// temporary directory: the look for it below must not find a silent
	// stage of another run of this test on the same host (a second test
	// binary, another checkout's run), whose one second may overlap this
	// one's. Named sleep all the same: a multi-call binary picks its
	// applet by the name.
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	sleep := filepath.Join(dir, "sleep")
	if err := os.Symlink(sleepBin, sleep); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "silent")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexec "+sleep+" 1717\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { helloTimeout = d }(helloTimeout)
	helloTimeout = time.Second
	p := &plan.Plan{Argv: []string{"/bin/true"}, Net: plan.NetNone, UID: 0, GID: 0, HostRoot: CallerIsHostRoot()}
	_, err = Start(context.Background(), p, Options{StageExe: exe, Stdin: devNull(t), Stdout: devNull(t), Stderr: devNull(t)})
	if err == nil || !strings.Contains(err.Error(), "said nothing for 1s") || !strings.Contains(err.Error(), "sandbox.Init()") {
		t.Fatalf("silent stage: %v", err)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(string(b), sleep+"\x001717\x00") {
			t.Errorf("the silent stage outlived the failed start: pid %s", e.Name())
		}
	}
}

func devNull(t *testing.T) *os.File {
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
