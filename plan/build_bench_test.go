package plan

import (
	"os"
	"testing"
)

// BenchmarkBuildOnHost builds the plan of `run --net=none -- /bin/true`
// against this machine (its sockets, mount table, /run): the planning
// part of every launch. It prints the time per plan; the figure depends
// on the host's sockets and mounts.
func BenchmarkBuildOnHost(b *testing.B) {
	home, _ := os.UserHomeDir()
	opts := Options{Command: []string{"/bin/true"}, Net: NetNone, Home: home, Cwd: "/", HostRoot: os.Geteuid() == 0}
	if _, err := Build(opts); err != nil {
		b.Skipf("no plan on this host: %v", err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Build(opts); err != nil {
			b.Fatal(err)
		}
	}
}
