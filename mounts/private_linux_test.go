package mounts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The walk's bound fails closed: with a budget of 30 entries, a directory
// of 50 world-readable files is masked whole, unread, with a warning,
// while a small world-readable directory beside it stays visible and a
// root-only file is masked. A tmpfs the plan places through a symlink
// (a home at /root -> /var/roothome) is the sandbox's own and stays
// writable. Run in a child process with a mount namespace of its own
// (Setup pivots into the view). Seen failing (the 50 files visible, no
// warning) with the budget check in list removed, and (the home tmpfs
// masked read-only) without resolveKeep.
func TestPrivateWalkBound(t *testing.T) {
	if dir := os.Getenv("MOUNTS_TEST_WALK_TREE"); dir != "" {
		walkBoundChild(dir)
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the child makes a mount namespace and masks root-only files")
	}
	tree, err := os.MkdirTemp("/var/tmp", "mounts-walk-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tree)
	if err := os.Chmod(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"big", "small"} {
		if err := os.Mkdir(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ {
		if err := os.WriteFile(filepath.Join(tree, "big", fmt.Sprint("pub-", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "small", "visible.txt"), []byte("VISIBLE"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "secret"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(tree, "realhome"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("realhome", filepath.Join(tree, "linkhome")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrivateWalkBound$")
	cmd.Env = append(os.Environ(), "MOUNTS_TEST_WALK_TREE="+tree)
	cmd.SysProcAttr = &unix.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{"big: 0 entries", "small: VISIBLE", "secret: ", "home write: <nil>", "warning: the walk for files only root may read stopped at its bound"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in the child's report:\n%s", want, got)
		}
	}
	if strings.Contains(got, "SECRET") {
		t.Errorf("the root-only file read:\n%s", got)
	}
}

func walkBoundChild(tree string) {
	PrivateWalkBudget = 30
	warnings, err := Setup([]Op{{Kind: RootRO, Dst: "/"}, {Kind: Tmpfs, Dst: tree + "/linkhome", Mode: 0o700}, {Kind: HidePrivate, Dst: tree}})
	if err != nil {
		fmt.Println("setup:", err)
		os.Exit(1)
	}
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	ents, _ := os.ReadDir(tree + "/big")
	fmt.Printf("big: %d entries\n", len(ents))
	b, _ := os.ReadFile(tree + "/small/visible.txt")
	fmt.Printf("small: %s\n", b)
	b, _ = os.ReadFile(tree + "/secret")
	fmt.Printf("secret: %s\n", b)
	fmt.Printf("home write: %v\n", os.WriteFile(tree+"/linkhome/x", []byte("x"), 0o600))
	os.Exit(0)
}

// ancestors answers what the walk once asked every kept destination
// (Within per destination, for each directory): whether a directory lies
// strictly above one of them.
func TestKeepAncestors(t *testing.T) {
	keep := map[string]bool{"/": true, "/root": true, "/var/lib/x/y": true, "/var/lib/z": true, "/home/u/ws": true}
	above := ancestors(keep)
	for _, p := range []string{"/", "/root", "/var", "/var/lib", "/var/lib/x", "/var/lib/x/y", "/var/lib/z", "/var/li", "/home", "/home/u", "/home/u/ws", "/home/u/ws/a", "/etc", "/var/lib/x/y/z"} {
		want := false
		for k := range keep {
			if k != p && Within(k, p) {
				want = true
			}
		}
		if above[p] != want {
			t.Errorf("ancestors[%q] = %v, want %v", p, above[p], want)
		}
	}
}

// The listing is judged in place: direntAt and countDirents find every
// name getdents gives, but "." and "..", with its type, as os.ReadDir does.
func TestDirentsInPlace(t *testing.T) {
	dir := t.TempDir()
	want := map[string]uint8{}
	for i := 0; i < 300; i++ {
		n := fmt.Sprintf("f%d-%s", i, strings.Repeat("x", i%40))
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want[n] = unix.DT_REG
	}
	for _, n := range []string{"d", ".hidden", "..x"} {
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
		want[n] = unix.DT_DIR
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 1024) // several reads
	got, counted := map[string]uint8{}, 0
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		counted += countDirents(buf[:n])
		for list := buf[:n]; len(list) > 0; {
			end, typ, reclen := direntAt(list)
			if reclen == 0 {
				t.Fatalf("a record left unparsed: %q", list)
			}
			if end >= 0 {
				got[string(list[direntName:end])] = typ
				if list[end] != 0 {
					t.Fatalf("name not NUL-ended")
				}
			}
			list = list[reclen:]
		}
	}
	if counted != len(want) || len(got) != len(want) {
		t.Fatalf("counted %d, parsed %d, want %d", counted, len(got), len(want))
	}
	for n, typ := range want {
		if got[n] != typ {
			t.Errorf("%q: type %d, want %d", n, got[n], typ)
		}
	}
}

// A listing longer than the walk's one-page buffer is judged piece by
// piece, with entered directories (their own long listings, read through
// the deeper buffers) between the pieces: every root-only file of a
// directory of 400 entries, and of a subdirectory of 300 met midway, is
// masked, every world-readable one stays. Run in a child process with a
// mount namespace of its own. Seen failing (secrets past the first piece
// readable) with dir's loop over the further pieces removed, and with
// list's rewind removed.
func TestPrivateWalkLongListing(t *testing.T) {
	if dir := os.Getenv("MOUNTS_TEST_LONG_TREE"); dir != "" {
		longListingChild(dir)
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the child makes a mount namespace and masks root-only files")
	}
	tree, err := os.MkdirTemp("/var/tmp", "mounts-long-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tree)
	if err := os.Chmod(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	fill := func(dir string, n int) {
		for i := 0; i < n; i++ {
			name, mode, body := fmt.Sprintf("pub-%03d-%s", i, strings.Repeat("n", 40)), os.FileMode(0o644), "PUBLIC"
			if i%37 == 5 {
				name, mode, body = fmt.Sprintf("sec-%03d-%s", i, strings.Repeat("n", 40)), 0o600, "SECRET"
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	big := filepath.Join(tree, "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(big, 400)
	for _, sub := range []string{"sub-a", "sub-m", "sub-z"} {
		d := filepath.Join(big, sub)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		fill(d, 300)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrivateWalkLongListing$")
	cmd.Env = append(os.Environ(), "MOUNTS_TEST_LONG_TREE="+tree)
	cmd.SysProcAttr = &unix.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := string(out)
	// 400 entries: 11 secrets (i%37 == 5), 389 public; 300: 8 and 292.
	for _, want := range []string{"big: public 389 secrets 11 readable secrets 0",
		"sub-a: public 292 secrets 8 readable secrets 0",
		"sub-m: public 292 secrets 8 readable secrets 0",
		"sub-z: public 292 secrets 8 readable secrets 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in the child's report:\n%s", want, got)
		}
	}
}

func longListingChild(tree string) {
	if _, err := Setup([]Op{{Kind: RootRO, Dst: "/"}, {Kind: HidePrivate, Dst: tree}}); err != nil {
		fmt.Println("setup:", err)
		os.Exit(1)
	}
	report := func(name, dir string) {
		ents, _ := os.ReadDir(dir)
		pub, sec, readable := 0, 0, 0
		for _, e := range ents {
			if e.IsDir() {
				continue
			}
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			switch {
			case strings.HasPrefix(e.Name(), "pub-") && string(b) == "PUBLIC":
				pub++
			case strings.HasPrefix(e.Name(), "sec-"):
				sec++
				if strings.Contains(string(b), "SECRET") {
					readable++
				}
			}
		}
		fmt.Printf("%s: public %d secrets %d readable secrets %d\n", name, pub, sec, readable)
	}
	report("big", tree+"/big")
	for _, sub := range []string{"sub-a", "sub-m", "sub-z"} {
		report(sub, tree+"/big/"+sub)
	}
	os.Exit(0)
}

// The last walk, of "/", meets a workspace bound below a top-level
// directory no list names (/work/x, /workspaces/x), here a root-only one
// (0700), with the walk's budget spent before it starts: the directory
// leads to the bind, so it is entered, never masked, and the workspace
// stays reachable and writable; its root-only file beside the workspace
// is masked, and its other directory, left unread, is hidden whole (deny
// by default). Seen failing (the workspace masked: "ws write: ... no
// such file or directory") with the lead check taken out of entry's
// budget case.
func TestRootWalkWorkspaceUnderUnlistedTop(t *testing.T) {
	if top := os.Getenv("MOUNTS_TEST_ROOT_TOP"); top != "" {
		rootTopChild(top)
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the child makes a mount namespace and plants at the root's top")
	}
	top := fmt.Sprintf("/cs-mounts-top-%d", os.Getpid())
	if err := os.Mkdir(top, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(top)
	for _, d := range []string{"ws", "sibling"} {
		if err := os.Mkdir(filepath.Join(top, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(top, "sibling", "pub"), []byte("PUBLIC"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, "secret"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRootWalkWorkspaceUnderUnlistedTop$")
	cmd.Env = append(os.Environ(), "MOUNTS_TEST_ROOT_TOP="+top)
	cmd.SysProcAttr = &unix.SysProcAttr{Unshareflags: unix.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{"ws write: <nil>", "ws read: INSIDE", "sibling: 0 entries", "secret: \n", "warning: the walk for files only root may read stopped at its bound"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in the child's report:\n%s", want, got)
		}
	}
	if strings.Contains(got, "SECRET") {
		t.Errorf("the root-only file read:\n%s", got)
	}
	if b, err := os.ReadFile(filepath.Join(top, "ws", "w")); err != nil || string(b) != "INSIDE" {
		t.Errorf("the workspace's file on the host: %q, %v", b, err)
	}
}

func rootTopChild(top string) {
	PrivateWalkBudget = 1
	ws := top + "/ws"
	warnings, err := Setup([]Op{{Kind: RootRO, Dst: "/"}, {Kind: Bind, Src: ws, Dst: ws}, {Kind: HidePrivate, Dst: "/"}})
	if err != nil {
		fmt.Println("setup:", err)
		os.Exit(1)
	}
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	fmt.Printf("ws write: %v\n", os.WriteFile(ws+"/w", []byte("INSIDE"), 0o600))
	b, _ := os.ReadFile(ws + "/w")
	fmt.Printf("ws read: %s\n", b)
	ents, _ := os.ReadDir(top + "/sibling")
	fmt.Printf("sibling: %d entries\n", len(ents))
	b, _ = os.ReadFile(top + "/secret")
	fmt.Printf("secret: %s\n", b)
	os.Exit(0)
}
