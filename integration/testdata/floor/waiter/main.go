// Command waiter starts a child (its arguments) and waits for it in
// wait4, as a PID 1 that reaps does.
package main

import (
	"os"
	"runtime"
	"syscall"
)

func main() {
	runtime.GOMAXPROCS(1)
	pid, err := syscall.ForkExec(os.Args[1], os.Args[1:], &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	if err != nil {
		os.Exit(1)
	}
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, 0, nil)
}
