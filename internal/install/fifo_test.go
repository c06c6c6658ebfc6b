package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// failsafe runs op in a goroutine and waits for it, up to a minute (an op
// that blocks on a FIFO never returns on its own): then it reports the
// failure and unblocks the op with unblock, so the test ends either way.
// The minute is no timing assertion: a working op returns at once, a
// broken one never.
func failsafe(t *testing.T, what string, op func() error, unblock func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Errorf("%s blocked on a FIFO", what)
		unblock()
		return <-done
	}
}

// A session replaces ~/.claude/commands/verify-sandbox.md with a FIFO:
// the root uninstaller neither blocks reading it (after its point of no
// return) nor removes it; the rest of the uninstall is done.
func TestUninstallFIFOCommand(t *testing.T) {
	s := newScratch(t)
	o := s.opts()
	_, err := Install(s.l, o)
	must(t, err)
	cmd := s.l.Command()
	must(t, os.Remove(cmd))
	must(t, unix.Mkfifo(cmd, 0o644))
	err = failsafe(t, "uninstall", func() error { _, err := Uninstall(s.l, o); return err }, func() {
		// The blocked reader gets EOF once a writer comes and goes.
		if fd, err := unix.Open(cmd, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	must(t, err)
	if fi, err := os.Lstat(cmd); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO (not the command install wrote) was removed: %v %v", fi, err)
	}
	if _, err := os.Lstat(s.l.Shadow()); err == nil {
		t.Errorf("uninstall did not finish: %s is still there", s.l.Shadow())
	}
}

// SeedEmpty and ReadFile refuse a FIFO at once, naming it; neither blocks.
func TestFIFORefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "f")
	must(t, unix.Mkfifo(fifo, 0o666))
	d, err := OpenTrusted(dir)
	must(t, err)
	defer d.Close()
	err = failsafe(t, "SeedEmpty", func() error { return d.SeedEmpty("f", "{}\n") }, func() {
		if fd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			defer unix.Close(fd)
			time.Sleep(100 * time.Millisecond)
		}
	})
	if err == nil || !errors.Is(err, errNotRegular) || !strings.Contains(err.Error(), fifo) {
		t.Errorf("SeedEmpty on a FIFO: %v; want a refusal naming it", err)
	}
	err = failsafe(t, "ReadFile", func() error { _, err := d.ReadFile("f"); return err }, func() {
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	if err == nil || !errors.Is(err, errNotRegular) {
		t.Errorf("ReadFile on a FIFO: %v; want a refusal", err)
	}
	// A directory opened as a file to read is refused too; one walked to is not.
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	if _, err := d.ReadFile("sub"); err == nil {
		t.Error("ReadFile read a directory")
	}
	sub, _, err := d.Walk("sub", 0, -1, -1, false)
	must(t, err)
	sub.Close()
}
