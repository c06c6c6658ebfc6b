package mounts

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A socket directory (SocketDir) that is the workspace's ancestor, with
// thousands of entries: through its read-only overlay no socket in it
// connects (the test's listener, with no mask on it), its files and
// every entry still list and read, it stays read-only as the root was,
// and the workspace bound below it after the overlay stays writable.
// Run in a child with a mount namespace of its own. Seen failing (the
// socket connected) with socketDir returning before the overlay.
func TestSocketDirOverWorkspaceAncestor(t *testing.T) {
	if dir := os.Getenv("MOUNTS_TEST_SOCKET_DIR"); dir != "" {
		socketDirChild(dir)
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the child makes a mount namespace")
	}
	dir, err := os.MkdirTemp("/var/tmp", "mounts-sockdir-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("DATA-OK"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3000; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", filepath.Join(dir, "a.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSocketDirOverWorkspaceAncestor$")
	cmd.Env = append(os.Environ(), "MOUNTS_TEST_SOCKET_DIR="+dir)
	cmd.SysProcAttr = &unix.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{"connect: refused", "data: DATA-OK", "entries: 3003", "dir write: refused", "ws write: <nil>"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in the child's report:\n%s", want, got)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ws", "w")); err != nil || string(b) != "INSIDE" {
		t.Errorf("the workspace's file on the host: %q, %v", b, err)
	}
}

func socketDirChild(dir string) {
	ws := dir + "/ws"
	warnings, err := Setup([]Op{{Kind: RootRO, Dst: "/"}, {Kind: SocketDir, Dst: dir}, {Kind: Bind, Src: ws, Dst: ws}})
	if err != nil {
		fmt.Println("setup:", err)
		os.Exit(1)
	}
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	if c, err := net.Dial("unix", dir+"/a.sock"); err == nil {
		c.Close()
		fmt.Println("connect: CONNECTED")
	} else {
		fmt.Println("connect: refused:", err)
	}
	b, _ := os.ReadFile(dir + "/data.txt")
	fmt.Printf("data: %s\n", b)
	ents, _ := os.ReadDir(dir)
	fmt.Printf("entries: %d\n", len(ents))
	if err := os.WriteFile(dir+"/x", nil, 0o644); err != nil {
		fmt.Println("dir write: refused:", err)
	} else {
		fmt.Println("dir write: WRITTEN")
	}
	fmt.Printf("ws write: %v\n", os.WriteFile(ws+"/w", []byte("INSIDE"), 0o600))
	os.Exit(0)
}
