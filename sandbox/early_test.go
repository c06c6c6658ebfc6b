package sandbox_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/testutil"
	"github.com/claude-sandbox/claude-sandbox/nsexec"
	"github.com/claude-sandbox/claude-sandbox/plan"
	"github.com/claude-sandbox/claude-sandbox/sandbox"
)

// An init started ahead of its plan (nsexec.Prestart, which the CLI uses
// for --net=none and --net=host) runs only a plan it was started for: its
// namespaces and id maps are fixed at its clone. One started without a
// network namespace of its own (host) taken for a plan that asks for an
// empty network (none) would run the command on the launcher's network;
// one started for another uid would run it as that uid. Start must stop
// such an init and start the right one.
func TestPrestartTakenOnlyWhenItSuits(t *testing.T) {
	testutil.NeedsRoot(t)
	testutil.NeedsUserNS(t)
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	// run starts "id -u; readlink /proc/self/ns/net" for a plan of net and
	// uid, with an init prestarted for earlyNet and earlyUID, and returns
	// the command's uid and network namespace.
	run := func(earlyNet, net plan.Net, earlyUID, uid int) (string, string) {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		o := nsexec.Options{Stdin: devNull, Stdout: w, Stderr: devNull, TTY: nsexec.TTYNever, StageExe: sandbox.DefaultStageExe()}
		o.Early = nsexec.Prestart(earlyNet, earlyUID, earlyUID, o)
		p, err := plan.Build(plan.Options{Command: []string{"/bin/sh", "-c", "id -u; readlink /proc/self/ns/net"},
			Net: net, UID: uid, GID: uid, HostRoot: nsexec.CallerIsHostRoot()})
		if err != nil {
			t.Fatal(err)
		}
		pr, err := nsexec.Start(context.Background(), p, o)
		w.Close()
		if err != nil {
			t.Fatalf("start (init prestarted for %s, uid %d; plan %s, uid %d): %v", earlyNet, earlyUID, net, uid, err)
		}
		out, _ := io.ReadAll(r)
		if code, err := pr.Wait(); code != 0 || err != nil {
			t.Fatalf("exit %d, %v (output %q)", code, err, out)
		}
		f := strings.Fields(string(out))
		if len(f) != 2 {
			t.Fatalf("output %q", out)
		}
		return f[0], f[1]
	}
	if _, ns := run(plan.NetHost, plan.NetNone, 0, 0); ns == self {
		t.Errorf("plan none, init prestarted for host: the command ran on the launcher's network (%s)", ns)
	}
	if _, ns := run(plan.NetNone, plan.NetHost, 0, 0); ns != self {
		t.Errorf("plan host, init prestarted for none: the command's network is %s, want the launcher's %s", ns, self)
	}
	if uid, ns := run(plan.NetNone, plan.NetNone, 0, 0); uid != "0" || ns == self {
		t.Errorf("plan none, init prestarted for it: uid %s, network %s (launcher's %s)", uid, ns, self)
	}
	if uid, _ := run(plan.NetNone, plan.NetNone, testutil.Nobody, 0); uid != "0" {
		t.Errorf("plan for uid 0, init prestarted for uid %d: the command ran as uid %s", testutil.Nobody, uid)
	}
}
