// Package mounts describes and builds the sandbox's filesystem view.
//
// A view is an ordered list of [Op] values: the host root bound read-only,
// a private /dev, a /proc, then the caller's tmpfs, bind and mask operations.
// The list is plain data, built and validated by pure code elsewhere (package
// plan) and printable as JSON; [Setup] applies it inside a fresh mount
// namespace and pivots into the result.
//
// What it does not do: it never creates namespaces (package nsexec does),
// never changes anything in the caller's mount namespace, and never decides
// policy (which paths to hide is the product's business). Setup must run in
// a process that owns a private mount namespace and holds CAP_SYS_ADMIN in
// that namespace's user namespace; calling it anywhere else is a bug.
package mounts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/internal/exact"
)

// Kind names one filesystem operation.
type Kind string

// The operations a view is made of, applied in order.
const (
	// RootRO binds the host's whole root at "/", every submount read-only,
	// nosuid and nodev.
	RootRO Kind = "root-ro"
	// Dev mounts a private /dev: a small tmpfs with null, zero, full,
	// random, urandom and tty bound from the host, a new devpts instance
	// with its own ptmx, and a tmpfs /dev/shm.
	Dev Kind = "dev"
	// Cgroup mounts, at Dst (/sys/fs/cgroup), a fresh read-only cgroup2
	// hierarchy rooted at the sandbox's own cgroup namespace, so the
	// host's cgroup tree (its services, other containers' ids) is not
	// seen. Where the sandbox has no cgroup namespace of its own, or the
	// kernel refuses the mount, an empty read-only tmpfs hides Dst
	// instead. A Dst that does not exist is left alone.
	Cgroup Kind = "cgroup"
	// Proc mounts a fresh procfs for the sandbox's PID namespace; where the
	// kernel refuses (a container that masks parts of /proc), the host's
	// /proc is bound read-only instead and a warning is reported.
	Proc Kind = "proc"
	// Tmpfs mounts an empty writable tmpfs at Dst with permissions Mode.
	Tmpfs Kind = "tmpfs"
	// Bind binds the host path Src at Dst, writable, nosuid and nodev. Src
	// resolves as on the host (symlinks too, absolute ones included).
	Bind Kind = "bind"
	// ROBind binds the host path Src at Dst, read-only (submounts too).
	ROBind Kind = "ro-bind"
	// Mask hides Dst: /dev/null over a file, an empty read-only tmpfs over
	// a directory. A Dst that does not exist is left alone.
	Mask Kind = "mask"
	// File places a read-only file holding Data at Dst (a generated
	// resolv.conf or gitconfig): nothing is written on the host.
	File Kind = "file"
	// Overlay shows the host directory Src at Dst with a per-session
	// layer on top: reads see the host's files, writes land in a tmpfs
	// that is gone when the sandbox ends, and nothing reaches Src. Where
	// the kernel refuses an overlay (before Linux 5.11, or a filesystem it
	// cannot stack on), Src is bound read-only instead, with a warning.
	Overlay Kind = "overlay"
	// Symlink creates a symbolic link at Dst pointing to Target (the host's
	// own links re-created on a tmpfs that covers their directory).
	Symlink Kind = "symlink"
	// DevBind binds the host device node Src (or a directory of device
	// nodes, such as /dev/dri) at Dst with device access left on (no
	// nodev, unlike every other bind), read-only and nosuid: the device
	// reads and writes, its host inode cannot be changed (devbind_linux.go).
	DevBind Kind = "dev-bind"
	// MaskSocket covers the host socket at Dst with an empty read-only
	// regular file, so connect() finds no socket there. A Dst that no
	// longer exists, or is now a directory, is left alone.
	MaskSocket Kind = "mask-socket"
	// SocketDir shows the directory Dst, as the view has it, through a
	// read-only overlay of itself: its files read as before, but no
	// socket in it can be connected to (connect() through an overlay
	// never reaches the socket's own inode), neither one there at launch
	// nor one the host binds there later: a service restart, whose unlink
	// detaches a MaskSocket laid on the old inode, or a new name. Where the
	// kernel refuses the overlay, the directory is left as it is (its
	// sockets' masks still apply), with a warning.
	SocketDir Kind = "socket-dir"
)

// Op is one step of a filesystem view. Paths are absolute and clean; Src is
// a path on the host, Dst a path inside the sandbox.
type Op struct {
	Kind Kind   `json:"kind"`
	Src  string `json:"src,omitempty"`
	Dst  string `json:"dst"`
	// Mode is the permission bits of a tmpfs root or a File.
	Mode Mode `json:"mode,omitempty"`
	// Data is the content of a File.
	Data string `json:"data,omitempty"`
	// Target is what a Symlink points to.
	Target string `json:"target,omitempty"`
	// Optional makes a missing Src a skip instead of an error (the
	// --bind-try and --ro-bind-try forms).
	Optional bool `json:"optional,omitempty"`
	// Size bounds a writable tmpfs's contents in bytes: a Tmpfs, the
	// /dev/shm of a Dev, the per-session layer of an Overlay. 0 leaves
	// the kernel's default (half the RAM); plans always set it.
	Size int64 `json:"size,omitempty"`
	// Exact makes Src resolve with no symlink in any component (binds and
	// overlays alike): the planner resolved it already, and a symlink
	// found there when the sandbox is built was put in since (a
	// concurrent session racing a gitdir in its workspace, or a directory
	// below ~/.claude, into a link to /etc). The mount then fails.
	Exact bool `json:"exact,omitempty"`
}

// Mode is a permission mode, written in octal in JSON ("1777").
type Mode uint32

// MarshalText writes the mode in octal.
func (m Mode) MarshalText() ([]byte, error) { return []byte(fmt.Sprintf("%04o", uint32(m))), nil }

// UnmarshalText reads an octal mode.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 8, 32)
	if err != nil || v > 0o7777 {
		return fmt.Errorf("mode %q: want octal permission bits like 0755", b)
	}
	*m = Mode(v)
	return nil
}

// HasSource reports whether the kind reads a host path.
func (k Kind) HasSource() bool { return k == Bind || k == ROBind || k == Overlay || k == DevBind }

// String renders the op the way a user would have written it on the
// command line, for error messages and logs.
func (o Op) String() string {
	switch o.Kind {
	case Bind, ROBind, Overlay, DevBind:
		s := fmt.Sprintf("%s %s -> %s", o.Kind, o.Src, o.Dst)
		if o.Optional {
			s += " (try)"
		}
		return s
	case Tmpfs:
		if o.Size > 0 {
			return fmt.Sprintf("tmpfs %s (mode %04o, size %d)", o.Dst, o.Mode, o.Size)
		}
		return fmt.Sprintf("tmpfs %s (mode %04o)", o.Dst, o.Mode)
	case File:
		return fmt.Sprintf("file %s (%d bytes)", o.Dst, len(o.Data))
	case Symlink:
		return fmt.Sprintf("symlink %s -> %s", o.Dst, o.Target)
	default:
		return fmt.Sprintf("%s %s", o.Kind, o.Dst)
	}
}

// Within reports whether p is dir itself or lies below it. Both must be
// absolute and clean.
func Within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// CleanAbs returns the cleaned form of an absolute path, or an error that
// names what is wrong with it.
func CleanAbs(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	if !path.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%q contains a NUL byte", p)
	}
	return path.Clean(p), nil
}

// OpJSON is Op as JSON: its paths, Data and Target keep their exact bytes
// (a valid UTF-8 string as usual, any other as {"base64": ...}). Every
// other field travels through the embedded opFields as it is, so a field
// added to Op crosses to the stages without a change here. A plan carries
// its operations as OpJSON (see [Op.JSON]), so that the decoder of the
// whole plan decodes them, its refusal of unknown fields included, where
// Op's UnmarshalJSON needs a decoder of its own for each operation
// (fresh memory, in a stage where every page is a page fault: issue 33).
type OpJSON struct {
	Kind   Kind         `json:"kind"`
	Src    exact.String `json:"src,omitempty"`
	Dst    exact.String `json:"dst"`
	Mode   Mode         `json:"mode,omitempty"`
	Data   exact.String `json:"data,omitempty"`
	Target exact.String `json:"target,omitempty"`
	opFields
}

// opFields is Op without its methods (OpJSON's own fields, named first
// to keep the order `plan --json` has always printed, win over these).
type opFields Op

// MarshalJSON writes the op with its strings byte for byte.
func (o Op) MarshalJSON() ([]byte, error) {
	return json.Marshal(o.JSON())
}

// JSON returns o as it travels.
func (o Op) JSON() OpJSON {
	return OpJSON{Kind: o.Kind, Src: exact.String(o.Src), Dst: exact.String(o.Dst), Mode: o.Mode,
		Data: exact.String(o.Data), Target: exact.String(o.Target), opFields: opFields(o)}
}

// Op returns the operation j carries.
func (j OpJSON) Op() Op {
	o := Op(j.opFields)
	o.Kind, o.Mode = j.Kind, j.Mode
	o.Src, o.Dst, o.Data, o.Target = string(j.Src), string(j.Dst), string(j.Data), string(j.Target)
	return o
}

// UnmarshalJSON reads what MarshalJSON writes, and refuses a field it
// does not know (see plan.Plan's).
func (o *Op) UnmarshalJSON(b []byte) error {
	var j OpJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil {
		return err
	}
	*o = j.Op()
	return nil
}

// UnescapeMountinfo undoes the \ooo escapes /proc/PID/mountinfo writes in
// its paths (space, tab, newline, backslash); anything else is kept as it
// is.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
