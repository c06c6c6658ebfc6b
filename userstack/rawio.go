package userstack

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// System calls on the relay's hot paths. Every descriptor they are used
// on is non-blocking (the TUN, the host sockets), so they return at once,
// and they are made without telling the Go scheduler (RawSyscall): its
// bookkeeping around an ordinary system call cost about as much as a short
// read, and a round trip makes six of these calls.

// rawCall makes one read, readv, write or writev system call on fd with
// the buffer or iovec array at p (n bytes or vectors; none: no call).
func rawCall(trap uintptr, fd int, p unsafe.Pointer, n int) (int, error) {
	if n == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(n))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// iovecs appends an iovec for each non-empty part.
func iovecs(iov []unix.Iovec, parts [][]byte) []unix.Iovec {
	for _, p := range parts {
		iov = appendIovec(iov, p)
	}
	return iov
}

// rawWritev writes parts to fd with one writev.
func rawWritev(fd int, parts [][]byte) (int, error) {
	var small [8]unix.Iovec
	return rawWriteIovec(fd, iovecs(small[:0], parts))
}

// rawWriteIovec writes iov to fd with one writev.
func rawWriteIovec(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	return rawCall(unix.SYS_WRITEV, fd, unsafe.Pointer(&iov[0]), len(iov))
}

// rawRead reads into b from fd.
func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return rawCall(unix.SYS_READ, fd, unsafe.Pointer(&b[0]), len(b))
}

// rawReadv reads into parts from fd with one readv.
func rawReadv(fd int, parts [][]byte) (int, error) {
	var small [4]unix.Iovec
	iov := iovecs(small[:0], parts)
	if len(iov) == 0 {
		return 0, nil
	}
	return rawCall(unix.SYS_READV, fd, unsafe.Pointer(&iov[0]), len(iov))
}
