package flowowner

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Owner is the process behind a flow, as the sandbox's /proc shows it:
// its pid in the sandbox's PID namespace, its argv and its working
// directory, each bounded and escaped (Escape).
type Owner struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
}

// Bounds of what is read from /proc.
const (
	maxCmdline = 4096 // bytes of /proc/PID/cmdline read
	maxArgs    = 64   // arguments kept
	maxArg     = 512  // bytes of one argument kept (before escaping)
	maxPath    = 4096 // bytes of the working directory
)

// Bounds of one scan, variables so that tests can lower them (a sandbox
// may hold this many processes and descriptors; the tests build a /proc
// of their own).
var (
	maxPIDs     = 8192    // processes looked at
	maxReadlink = 1 << 17 // links read (and directory entries listed)
)

// Escape renders s for a terminal or a log: printable UTF-8 as it is; a
// backslash doubled; control characters, other non-printing runes and
// invalid bytes as \xHH, \uHHHH escapes.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || !strconv.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x80 && !strconv.IsPrint(r):
			b.WriteString(`\x`)
			b.WriteString(hex2(byte(r)))
		case !strconv.IsPrint(r):
			q := strconv.QuoteRuneToASCII(r) // '\u2028'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// ParseCmdline splits a /proc/PID/cmdline (NUL-separated) into at most
// maxArgs arguments, each cut to maxArg bytes and escaped.
func ParseCmdline(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	var out []string
	for _, a := range bytes.Split(b, []byte{0}) {
		if len(out) == maxArgs {
			out = append(out, "...")
			break
		}
		if len(a) > maxArg {
			out = append(out, Escape(string(a[:maxArg]))+"...")
			continue
		}
		out = append(out, Escape(string(a)))
	}
	return out
}

// FindSocket scans the /proc whose directory is open at procFD (the
// sandbox's: its pids are the sandbox's) for the process holding the
// socket inode, and returns it with its argv and working directory. Only
// numeric entries are looked at; nothing is followed: the fd links are
// read, not opened. ok is false when no process holds it (any more).
//
// hint, when not 0, is a pid to look at first (the process that owned
// the last flow: most flows come from a few processes).
func FindSocket(procFD int, inode uint32, hint int) (o Owner, ok bool) {
	want := "socket:[" + strconv.FormatUint(uint64(inode), 10) + "]"
	links := 0
	if hint > 0 && holds(procFD, hint, want, &links) {
		return Describe(procFD, hint), true
	}
	pids, err := listPIDs(procFD)
	if err != nil {
		return Owner{}, false
	}
	for _, pid := range pids {
		if pid == hint {
			continue
		}
		if holds(procFD, pid, want, &links) {
			return Describe(procFD, pid), true
		}
		if links > maxReadlink {
			break
		}
	}
	return Owner{}, false
}

// Describe reads pid's argv and working directory from procFD.
func Describe(procFD, pid int) Owner {
	o := Owner{PID: pid}
	p := strconv.Itoa(pid)
	if fd, err := unix.Openat(procFD, p+"/cmdline", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0); err == nil {
		buf := make([]byte, maxCmdline)
		n := 0
		for n < len(buf) {
			m, err := unix.Read(fd, buf[n:])
			if m <= 0 || err != nil {
				break
			}
			n += m
		}
		unix.Close(fd)
		o.Argv = ParseCmdline(buf[:n])
	}
	if cwd, ok := readlink(procFD, p+"/cwd", maxPath); ok {
		o.Cwd = Escape(cwd)
	}
	return o
}

// listPIDs returns the numeric entries of procFD, at most maxPIDs, in
// increasing order.
func listPIDs(procFD int) ([]int, error) {
	names, err := readDir(procFD, ".")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 && n[0] != '0' && n[0] != '+' {
			pids = append(pids, pid)
		}
	}
	// The lowest pids first (a /proc lists them so; the order is the
	// scan's, and which ones the bound leaves out).
	slices.Sort(pids)
	return pids[:min(len(pids), maxPIDs)], nil
}

// holds reports whether pid has an fd that is the socket want
// ("socket:[N]"); links counts the links read.
func holds(procFD, pid int, want string, links *int) bool {
	dir := strconv.Itoa(pid) + "/fd"
	names, err := readDir(procFD, dir)
	if err != nil {
		return false
	}
	buf := make([]byte, len(want)+1)
	for _, n := range names {
		*links++
		if *links > maxReadlink {
			return false
		}
		if k, err := unix.Readlinkat(procFD, dir+"/"+n, buf); err == nil && k == len(want) && string(buf[:k]) == want {
			return true
		}
	}
	return false
}

// readlink reads the link at path under dirfd; a target longer than max
// bytes is refused.
func readlink(dirfd int, path string, max int) (string, bool) {
	buf := make([]byte, max+1)
	n, err := unix.Readlinkat(dirfd, path, buf)
	if err != nil || n > max {
		return "", false
	}
	return string(buf[:n]), true
}

// readDir lists the names in the directory path under dirfd.
func readDir(dirfd int, path string) ([]string, error) {
	fd, err := unix.Openat(dirfd, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		if len(names) > maxReadlink {
			return names, nil
		}
	}
}
