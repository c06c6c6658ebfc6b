// Command signals is idle, but catches the signals a launcher forwards
// (os/signal), as any per-sandbox process that passes them on must.
package main

import (
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

func main() {
	runtime.GOMAXPROCS(1)
	c := make(chan os.Signal, 4)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGWINCH)
	go func() {
		for range c {
		}
	}()
	time.Sleep(time.Hour)
}
