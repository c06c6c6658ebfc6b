// Package control is the control channel of a running sandbox: the
// launcher of every jailed or unjailed sandbox (claude-sandbox run, the
// shadow, an embedder) serves a Unix socket of its own, through which the
// caller lists its running sandboxes (claude-sandbox ps) and changes a
// sandbox's reach while it runs (claude-sandbox allow / revoke).
//
// Where: one directory per user, mode 0700, owned by the user, in the
// user's runtime directory ($XDG_RUNTIME_DIR/claude-sandbox when that is
// a directory the user owns and no one else may write, else
// /run/user/UID/claude-sandbox when /run/user/UID is such a directory,
// else /tmp/claude-sandbox-UID, made 0700 and refused when it exists
// with any other owner, type or mode: /tmp is sticky, so no other user can
// rename or remove it once it is ours). Each sandbox's socket is ID.sock
// there, mode 0600, a pathname socket: an abstract one would be reachable
// from every sandbox sharing the host's network namespace (--net=host),
// as abstract sockets belong to the network namespace and have no
// permissions.
//
// Who: the peer's credentials (SO_PEERCRED) must be the launcher's uid or
// root, and the peer must be in the launcher's own user namespace. Every
// sandbox runs in a user namespace of its own, so no process inside any
// sandbox is accepted even where the socket's path is visible to it (the
// sandbox's view covers /run and gives /tmp a fresh tmpfs; a --bare
// sandbox or one binding the directory could see the path).
//
// Protocol: one request per connection, one JSON object on one line each
// way, both carrying the protocol version "v" (a mismatch is an error).
package control

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/ask"
)

// Version is the protocol version this package speaks.
const Version = 1

// Ops a request may ask for.
const (
	OpStatus = "status"
	OpAllow  = "allow"
	OpRevoke = "revoke"
	// The ask mode (issue 31): list the pending requests, answer one.
	OpRequests = "requests"
	OpApprove  = "approve"
	OpDeny     = "deny"
)

// Request is one request to a sandbox's launcher.
type Request struct {
	V  int    `json:"v"`
	Op string `json:"op"`
	// What to allow or revoke: addresses or CIDRs (--ip), names with an
	// optional :PORT (--domain), host loopback ports (--host-port).
	IP       []string `json:"ip,omitempty"`
	Domain   []string `json:"domain,omitempty"`
	HostPort []string `json:"host_port,omitempty"`
	// Req is the request an approve or deny answers; Scope how far an
	// approval reaches ("once", "session", "always").
	Req   int    `json:"req,omitempty"`
	Scope string `json:"scope,omitempty"`
	// Watch: the requests are asked for by claude-sandbox watch, which
	// shows them (the launcher then prints no notice of its own).
	Watch bool `json:"watch,omitempty"`
}

// Status describes a running sandbox (claude-sandbox ps).
type Status struct {
	ID        string    `json:"id"`
	PID       int       `json:"pid"` // the launcher's
	Command   []string  `json:"command"`
	Cwd       string    `json:"cwd"`
	Workspace string    `json:"workspace,omitempty"`
	Net       string    `json:"net"`
	Started   time.Time `json:"started"`
	// Blocked is how many flows the jail refused so far.
	Blocked int `json:"blocked"`
	// Pending is how many requests for reach wait for an answer (the
	// ask mode).
	Pending int `json:"pending"`
	// Ask says whether the sandbox runs in the ask mode.
	Ask bool `json:"ask,omitempty"`
	// Allowed are the entries allowed while the sandbox runs.
	Allowed []string `json:"allowed,omitempty"`
	// Revoked are launch-time entries revoked while it runs.
	Revoked []string `json:"revoked,omitempty"`
	// Names says whether the sandbox has a domain allowlist.
	Names bool `json:"names"`
}

// Response is a launcher's answer.
type Response struct {
	V      int     `json:"v"`
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
	// Changes are the policy changes a request made, one line each.
	Changes []string `json:"changes,omitempty"`
	// Requests are the pending requests (requests), or the one answered
	// (approve, deny).
	Requests []ask.Request `json:"requests,omitempty"`
}

// Handler answers one request from an accepted peer.
type Handler func(Request) Response

// maxLine bounds a request line; maxAnswer a response line (the
// pending requests of a sandbox: 64, each naming its process).
const (
	maxLine   = 64 << 10
	maxAnswer = 4 << 20
)

// readLine reads one line of at most max bytes from r (a bufio
// buffer's ReadSlice would stop at the buffer's size).
func readLine(r io.Reader, max int64) ([]byte, error) {
	return bufio.NewReader(io.LimitReader(r, max)).ReadBytes('\n')
}

// NewID returns a new sandbox id: 8 lowercase letters and digits.
func NewID() string {
	const alpha = "abcdefghijkmnpqrstuvwxyz23456789"
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; a pid-based id otherwise.
		return "p" + strconv.Itoa(os.Getpid())
	}
	for i := range b {
		b[i] = alpha[int(b[i])%len(alpha)]
	}
	return string(b[:])
}

// ValidID reports whether id can name a sandbox (no path in it).
func ValidID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// Candidates returns the control directories to look in, best first:
// where a launcher with this environment puts its socket, then the
// others (a launcher started from another environment may have chosen
// another). getenv is os.Getenv in use.
func Candidates(uid int, getenv func(string) string) []string {
	var out []string
	if x := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) && safeBase(x, uid) == nil {
		out = append(out, filepath.Join(filepath.Clean(x), "claude-sandbox"))
	}
	run := "/run/user/" + strconv.Itoa(uid)
	if safeBase(run, uid) == nil {
		out = append(out, filepath.Join(run, "claude-sandbox"))
	}
	out = append(out, tmpDir(uid))
	// Without duplicates ($XDG_RUNTIME_DIR is usually /run/user/UID).
	seen := map[string]bool{}
	uniq := out[:0]
	for _, d := range out {
		if !seen[d] {
			seen[d] = true
			uniq = append(uniq, d)
		}
	}
	return uniq
}

func tmpDir(uid int) string { return "/tmp/claude-sandbox-" + strconv.Itoa(uid) }

// ownedDir checks that dir is a directory (not a link) owned by uid and
// returns its mode bits.
func ownedDir(dir string, uid int) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("%s is not a directory", dir)
	}
	if int(st.Uid) != uid {
		return 0, fmt.Errorf("%s is owned by uid %d, not %d", dir, st.Uid, uid)
	}
	return st.Mode & 0o7777, nil
}

// safeBase checks that dir is a directory (not a link) owned by uid that
// no one else may write to.
func safeBase(dir string, uid int) error {
	mode, err := ownedDir(dir, uid)
	if err == nil && mode&0o022 != 0 {
		err = fmt.Errorf("%s is writable by others (mode %04o)", dir, mode)
	}
	return err
}

// checkDir checks a control directory: a directory (not a link) owned by
// uid, mode 0700.
func checkDir(dir string, uid int) error {
	mode, err := ownedDir(dir, uid)
	if err == nil && mode != 0o700 {
		err = fmt.Errorf("%s has mode %04o, not 0700", dir, mode)
	}
	return err
}

// EnsureDir returns the control directory for uid, made if missing: the
// first of Candidates. An existing one must be a 0700 directory owned by
// uid (a directory someone else made first is refused, never used).
func EnsureDir(uid int, getenv func(string) string) (string, error) {
	dir := Candidates(uid, getenv)[0]
	// Mkdir does not follow a link at dir; umask cannot widen 0700.
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := checkDir(dir, uid); err != nil {
		return "", fmt.Errorf("control directory: %w", err)
	}
	return dir, nil
}

// Server is a launcher's control socket.
type Server struct {
	ID   string
	Path string
	ln   *net.UnixListener
	h    Handler
	wg   sync.WaitGroup
	once sync.Once
	uid  int
	ns   string // the launcher's user namespace (readlink /proc/self/ns/user)
}

// Listen serves h on a new socket named by id in the caller's control
// directory.
func Listen(id string, h Handler) (*Server, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("invalid sandbox id %q", id)
	}
	uid := os.Getuid()
	dir, err := EnsureDir(uid, os.Getenv)
	if err != nil {
		return nil, err
	}
	return listenIn(dir, id, uid, h)
}

func listenIn(dir, id string, uid int, h Handler) (*Server, error) {
	ns, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		return nil, fmt.Errorf("own user namespace: %w", err)
	}
	path := filepath.Join(dir, id+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	// The directory is 0700 already: no one else could reach the socket
	// between bind and chmod.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{ID: id, Path: path, ln: ln, h: h, uid: uid, ns: ns}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Close stops serving and removes the socket.
func (s *Server) Close() {
	s.once.Do(func() {
		s.ln.Close()
		s.wg.Wait()
	})
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off rather than spin.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		// One at a time: requests are rare and cheap, and a peer that
		// sends nothing is cut off by the deadline.
		s.handle(c)
	}
}

func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	reply := func(r Response) {
		r.V = Version
		b, _ := json.Marshal(r)
		_, _ = c.Write(append(b, '\n'))
	}
	if err := s.checkPeer(c); err != nil {
		reply(Response{Error: "refused: " + err.Error()})
		return
	}
	line, err := readLine(c, maxLine)
	if err != nil {
		reply(Response{Error: "bad request: " + err.Error()})
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		reply(Response{Error: "bad request: " + err.Error()})
		return
	}
	if req.V != Version {
		reply(Response{Error: fmt.Sprintf("protocol version %d, this sandbox speaks %d (claude-sandbox binaries differ)", req.V, Version)})
		return
	}
	reply(s.h(req))
}

// checkPeer accepts the launcher's uid or root, from the launcher's own
// user namespace only.
func (s *Server) checkPeer(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != s.uid && cred.Uid != 0 {
		return fmt.Errorf("uid %d is neither the sandbox's owner nor root", cred.Uid)
	}
	// The peer's pid as this namespace sees it (0: from a pid namespace
	// that cannot be named here, which a sandbox's is not: refuse).
	if cred.Pid <= 0 {
		return errors.New("the peer's process cannot be identified")
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(int(cred.Pid)) + "/ns/user")
	if err != nil {
		return fmt.Errorf("the peer's user namespace: %w", err)
	}
	if ns != s.ns {
		return errors.New("the peer runs in another user namespace (inside a sandbox)")
	}
	return nil
}

// staleAge is how old a refusing socket must be to be removed (a
// variable for tests).
var staleAge = 2 * time.Second

// ErrStale is returned by Call when no launcher listens on the socket.
var ErrStale = errors.New("no sandbox listens there (its launcher has ended)")

// Call sends req to the socket at path and returns the answer.
func Call(path string, req Request) (Response, error) {
	req.V = Version
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return Response{}, ErrStale
		}
		return Response{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b, _ := json.Marshal(req)
	// A launcher that refuses the peer answers before reading: the
	// answer is read even when the write failed.
	_, werr := c.Write(append(b, '\n'))
	line, err := readLine(c, maxAnswer)
	if err != nil {
		if werr != nil {
			return Response{}, werr
		}
		return Response{}, fmt.Errorf("no answer: %w", err)
	}
	var r Response
	if err := json.Unmarshal(line, &r); err != nil {
		return Response{}, fmt.Errorf("bad answer: %w", err)
	}
	if r.V != Version {
		return r, fmt.Errorf("protocol version %d, this claude-sandbox speaks %d", r.V, Version)
	}
	return r, nil
}

// Sandbox is a socket found in a control directory.
type Sandbox struct {
	ID   string
	Path string
}

// Find lists the sockets in the caller's control directories (every
// candidate that is a safe directory). It removes nothing: a caller whose
// Call on one returns ErrStale removes it with RemoveStale.
func Find(uid int, getenv func(string) string) []Sandbox {
	var out []Sandbox
	seen := map[string]bool{}
	for _, dir := range Candidates(uid, getenv) {
		if checkDir(dir, uid) != nil {
			continue
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), ".sock")
			if !ok || !ValidID(id) || seen[id] || e.Type()&os.ModeSocket == 0 {
				continue
			}
			seen[id] = true
			out = append(out, Sandbox{ID: id, Path: filepath.Join(dir, e.Name())})
		}
	}
	return out
}

// Lookup returns the socket of sandbox id.
func Lookup(uid int, getenv func(string) string, id string) (Sandbox, error) {
	if !ValidID(id) {
		return Sandbox{}, fmt.Errorf("%q is not a sandbox id (see claude-sandbox ps)", id)
	}
	for _, s := range Find(uid, getenv) {
		if s.ID == id {
			return s, nil
		}
	}
	return Sandbox{}, fmt.Errorf("no running sandbox %s (see claude-sandbox ps)", id)
}

// RemoveStale removes a socket no launcher listens on: only a socket,
// owned by uid, in a control directory (0700, so no one else can swap it
// between the check and the removal).
func RemoveStale(s Sandbox, uid int) {
	if c, err := net.Dial("unix", s.Path); err == nil {
		c.Close()
		return
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		return
	}
	var st unix.Stat_t
	if unix.Lstat(s.Path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != uid {
		return
	}
	// A socket bound this instant refuses connections until its listen:
	// only one older than that is stale.
	if time.Since(time.Unix(st.Ctim.Unix())) < staleAge {
		return
	}
	if checkDir(filepath.Dir(s.Path), uid) != nil {
		return
	}
	_ = os.Remove(s.Path)
}
