package sandbox_test

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/claude-sandbox/claude-sandbox/internal/control"
	"github.com/claude-sandbox/claude-sandbox/sandbox"
)

// TestControlSocket: an embedded sandbox serves its control socket while
// it runs (claude-sandbox ps finds it by its ID), and removes it at the
// end; without the jail, Allow says why it cannot.
func TestControlSocket(t *testing.T) {
	in, w := io.Pipe()
	defer w.Close()
	sb, err := sandbox.Start(context.Background(), sandbox.Spec{Command: []string{"/bin/sh", "-c", "read x"}, Net: sandbox.NetNone, Stdin: in})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID()
	s, err := control.Lookup(os.Getuid(), os.Getenv, id)
	if err != nil {
		sb.Kill()
		sb.Wait()
		t.Fatalf("ps cannot find sandbox %q: %v", id, err)
	}
	r, err := control.Call(s.Path, control.Request{Op: control.OpStatus})
	if err != nil || !r.OK || r.Status.ID != id || r.Status.Net != "none" {
		t.Errorf("status: %+v, %v", r, err)
	}
	if _, err := sb.Allow([]string{"10.1.2.3"}, nil); err == nil {
		t.Error("Allow without a jail succeeded")
	}
	w.Close()
	sb.Wait()
	if _, err := os.Lstat(s.Path); !os.IsNotExist(err) {
		t.Errorf("socket left after Wait: %v", err)
	}
}
