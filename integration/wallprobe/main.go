// Command wallprobe is a test helper run inside the sandbox by the
// integration tests of the walls around host sockets: `wallprobe connect
// PATH...` tries connect() on each Unix socket path and prints one line a
// path, "PATH ok" or "PATH err:EXXX". `wallprobe listen PATH...` binds a
// stream socket at each path, open to every uid (mode 0777), prints
// "ready" once all listen, and accepts until it is killed: another user's
// daemon, for the tests that plant one. It is never shipped.
package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "listen" {
		listen(os.Args[2:])
		return
	}
	if len(os.Args) < 3 || os.Args[1] != "connect" {
		fmt.Fprintln(os.Stderr, "usage: wallprobe connect|listen PATH...")
		os.Exit(2)
	}
	for _, p := range os.Args[2:] {
		fmt.Println(p, result(connect(p)))
	}
}

func connect(p string) error {
	for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET} {
		fd, err := unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: p})
		unix.Close(fd)
		if !errors.Is(err, unix.EPROTOTYPE) {
			return err
		}
	}
	return unix.EPROTOTYPE
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return "err:" + unix.ErrnoName(errno)
	}
	return "err:" + err.Error()
}

func listen(paths []string) {
	var fds []int
	for _, p := range paths {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrUnix{Name: p})
		}
		if err == nil {
			err = unix.Chmod(p, 0o777)
		}
		if err == nil {
			err = unix.Listen(fd, 16)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "wallprobe listen %s: %v\n", p, err)
			os.Exit(1)
		}
		fds = append(fds, fd)
	}
	fmt.Println("ready")
	for _, fd := range fds[1:] {
		go accept(fd)
	}
	accept(fds[0])
}

func accept(fd int) {
	for {
		c, _, err := unix.Accept(fd)
		if err != nil && !errors.Is(err, unix.EINTR) {
			os.Exit(1)
		}
		if err == nil {
			unix.Close(c)
		}
	}
}
