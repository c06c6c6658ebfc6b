// Command rusageprobe is a test helper for BenchmarkLaunchCost: it runs
// its arguments as a command, waits for it, and prints on stderr one line
// "rusage WALL_NS CPU_NS MINFLT MAJFLT MAXRSS_KIB" from the waited child's
// rusage (wait4: the child and every descendant reaped below it; the peak
// RSS is the largest one process reached). It exits with
// the command's status. It is never shipped.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rusageprobe COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "rusageprobe:", err)
		os.Exit(127)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Fprintf(os.Stderr, "rusage %d %d %d %d %d\n", wall.Nanoseconds(), cpu.Nanoseconds(), ru.Minflt, ru.Majflt, ru.Maxrss)
	os.Exit(cmd.ProcessState.ExitCode())
}
