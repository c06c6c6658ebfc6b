// Command verifyprobe is a test helper: it runs one check or probe of
// package verify against the environment its flags describe and prints
// "STATUS evidence". Tests run it where an escape is possible, to prove
// each probe can see one. It is never shipped.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/verify"
)

// targets collects -target kind=addr,addr flags.
type targets map[string][]string

func (t targets) String() string { return fmt.Sprint(map[string][]string(t)) }
func (t targets) Set(v string) error {
	k, list, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want kind=addr,addr")
	}
	t[k] = strings.Split(list, ",")
	return nil
}

func main() {
	verify.InitNested()
	e := &verify.Env{Getenv: os.Getenv}
	tg := targets{}
	flag.Var(tg, "target", "kind=addr,addr: network probe targets")
	flag.BoolVar(&e.NoNestedUserNS, "no-nested-userns", false, "run nested attempts without the nested user namespace")
	flag.StringVar(&e.Home, "home", os.Getenv("HOME"), "home directory")
	flag.StringVar(&e.Workspace, "workspace", "", "workspace")
	flag.StringVar(&e.Root, "root", "", "fixture root prepended to paths")
	flag.IntVar(&e.HostPID, "hostpid", 0, "a host process id")
	flag.IntVar(&e.InitPID, "initpid", 0, "the ptrace target")
	flag.BoolVar(&e.Jail, "jail", false, "expect the egress jail")
	flag.Parse()
	if len(tg) > 0 {
		e.NetTargets = tg
	}
	id := flag.Arg(0)
	if id == "openings" {
		for _, r := range verify.Openings(e) {
			fmt.Printf("%s %s %s: %s\n", r.ID, r.Status, r.Name, r.Evidence)
		}
		return
	}
	for _, it := range append(verify.Checks(), verify.Probes()...) {
		if it.ID == id {
			st, ev := it.Run(e)
			fmt.Println(st, ev)
			return
		}
	}
	fmt.Fprintln(os.Stderr, "unknown id", id)
	os.Exit(2)
}
