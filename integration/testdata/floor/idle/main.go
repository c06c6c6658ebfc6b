// Command idle is the least a Go process can be: one P, then asleep.
// BenchmarkGoProcessFloor measures what it keeps.
package main

import (
	"runtime"
	"time"
)

func main() {
	runtime.GOMAXPROCS(1)
	time.Sleep(time.Hour)
}
