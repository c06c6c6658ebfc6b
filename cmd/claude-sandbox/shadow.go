package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/beneath"
	"github.com/claude-sandbox/claude-sandbox/internal/install"
	"github.com/claude-sandbox/claude-sandbox/shadow"
	"github.com/claude-sandbox/claude-sandbox/sshagent"
)

// shadowMain is `claude`: the real Claude Code CLI, launched inside the
// sandbox. dryRun prints the plan instead (claude-sandbox plan --json
// --shadow).
func shadowMain(args []string, dryRun bool, stdout, stderr io.Writer) int {
	cfg, err := loadConfig(shadow.ConfigPath)
	if err == nil {
		err = cfg.ApplyEnv(os.LookupEnv)
	}
	if err != nil {
		fmt.Fprintln(stderr, "claude:", err)
		return 1
	}
	in := shadow.Inputs{
		Args:     args,
		Environ:  os.Environ(),
		Home:     os.Getenv("HOME"),
		User:     userName(),
		UID:      os.Getuid(),
		GID:      os.Getgid(),
		Config:   cfg,
		Real:     shadow.RealBinary,
		Stat:     os.Stat,
		Lstat:    os.Lstat,
		Readable: func(p string) bool { return unix.Access(p, unix.R_OK) == nil },
		ReadDir:  readDirNames,
		ReadFile: readSmallFile,
		Resolve:  filepath.EvalSymlinks,
		InContainer: shadow.InContainer(os.Environ(), func(p string) bool {
			fi, err := os.Lstat(p)
			return err == nil && fi.Mode().IsRegular()
		}),
	}
	if wd, err := os.Getwd(); err == nil {
		in.Cwd = wd
	}
	// What the plan reads in trees a session writes (the workspace's
	// .git files, .gitmodules, ~/.claude) is read beneath them.
	in.ReadFile = sessionTreeReader(append([]string{in.Home + "/.claude", cfg.WorkspaceRoot, in.Cwd}, cfg.AllowWrite...))
	if v, _ := os.LookupEnv(shadow.MarkerEnv); v != "1" {
		in.GitName, in.GitEmail = gitIdentity()
	}
	l, err := shadow.Build(in)
	if err != nil {
		fmt.Fprintln(stderr, "claude:", safeText(err.Error()))
		return 1
	}
	if l.Direct {
		// Already inside the sandbox: the real binary, no second sandbox.
		if dryRun {
			fmt.Fprintf(stdout, "{\"direct\": %q}\n", strings.Join(l.Argv, " "))
			return 0
		}
		err := syscall.Exec(l.Argv[0], l.Argv, os.Environ())
		fmt.Fprintf(stderr, "claude: exec %s: %v\n", l.Argv[0], err)
		return 1
	}
	if !dryRun {
		for _, err := range createState(in.Home, in.UID, in.GID, l.State) {
			fmt.Fprintln(stderr, "claude: warning:", safeText(err.Error()))
		}
		for _, err := range createBindTargets(in.Home, in.UID, in.GID, l.CreateDirs, l.CreateFiles, os.Geteuid() == 0) {
			fmt.Fprintln(stderr, "claude: warning:", safeText(err.Error()))
		}
		for _, w := range l.Warnings {
			fmt.Fprintln(stderr, "claude-sandbox: warning:", safeText(w))
		}
		if l.PersistWarning != "" && notePersistWarning(in.Home) {
			fmt.Fprintln(stderr, "claude-sandbox: warning:", l.PersistWarning)
		}
	}
	// What stayed outside, as salted digests, for verify's P12.
	l.Options.SetEnv = append(l.Options.SetEnv, [2]string{shadow.ScrubbedEnv, shadow.Scrubbed(in.Environ, nil)})
	if dryRun {
		return launch("claude", l.Options, shadowExtras(cfg, in.Home, l.Workspace), dryRun, stdout, stderr)
	}
	// The watched files are the session's to change: read beneath their
	// tree, bounded (internal/beneath).
	host := watchHost(in.Home, l.Workspace)
	before := shadow.Take(l.Watch, host)
	code := launch("claude", l.Options, shadowExtras(cfg, in.Home, l.Workspace), dryRun, stdout, stderr)
	reportChanges(in.Home, shadow.Changes(before, shadow.Take(l.Watch, host)), stderr)
	return code
}

// createState makes Claude Code's state in home that is missing (see
// shadow.Launch.State), as uid:gid, with the installer's safe steps: from
// a descriptor of the home directory, never through a symlink, never
// replacing anything. An existing empty file is given its seed (an empty
// ~/.claude.json left by an older shadow, which Claude Code calls
// corrupted).
func createState(home string, uid, gid int, state []shadow.StateEntry) []error {
	if len(state) == 0 {
		return nil
	}
	d, err := install.OpenTrusted(home)
	if err != nil {
		return []error{err}
	}
	defer d.Close()
	var errs []error
	for _, e := range state {
		st, err := d.Lstat(e.Name)
		switch {
		case err == nil:
			if !e.Dir && e.Data != "" && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0 {
				if err := d.SeedEmpty(e.Name, e.Data); err != nil {
					errs = append(errs, err)
				}
			}
		case !errors.Is(err, unix.ENOENT):
			errs = append(errs, &fs.PathError{Op: "lstat", Path: filepath.Join(home, e.Name), Err: err})
		case e.Dir:
			if err := d.Mkdir(e.Name, 0o700, uid, gid); err != nil {
				errs = append(errs, err)
			}
		default:
			if err := d.Create(e.Name, []byte(e.Data), 0o600, uid, gid); err != nil && !errors.Is(err, fs.ErrExist) {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// notePersistWarning records in home that the persistence warning is
// being shown, and reports whether it is the first time (no record yet,
// or none can be made: better twice than never).
func notePersistWarning(home string) bool {
	p := filepath.Join(home, shadow.PersistNotedFile)
	if _, err := os.Lstat(p); err == nil {
		return false
	}
	if os.MkdirAll(filepath.Dir(p), 0o700) == nil {
		if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600); err == nil {
			f.Close()
		}
	}
	return true
}

// watchHost reads what the watch compares: beneath each watched path's
// tree, never following a link out of it, never blocking, bounded.
func watchHost(home, ws string) shadow.Host {
	return shadow.Host{
		ReadFile: func(root, rel string, limit int64) ([]byte, error) {
			b, err := beneath.ReadFile(root, rel, limit)
			var tl *beneath.TooLargeError
			if errors.As(err, &tl) {
				return nil, tooLargeErr{tl}
			}
			return b, err
		},
		Walk: func(root, rel string) (map[string]string, bool) {
			m, trunc, err := beneath.Walk(root, rel, beneath.DefaultLimits)
			if err != nil {
				// A tree replaced by a link (~/.claude/commands -> /etc)
				// or a file is compared by what it is.
				st, lerr := beneath.Lstat(root, rel)
				if lerr != nil {
					return nil, false
				}
				v := fmt.Sprintf("not a directory: %o", st.Mode)
				if t, err := beneath.Readlink(root, rel); err == nil {
					v += " -> " + t
				}
				return map[string]string{"": v}, false
			}
			return m, trunc
		},
		Exists: func(root, rel string) bool { _, err := beneath.Lstat(root, rel); return err == nil },
		Readlink: func(root, rel string) (string, error) {
			if rel == "." {
				return os.Readlink(root)
			}
			return beneath.Readlink(root, rel)
		},
		Home: home, Workspace: ws,
	}
}

// tooLargeErr says a watched file's size to the shadow package.
type tooLargeErr struct{ *beneath.TooLargeError }

func (e tooLargeErr) TooLarge() int64 { return e.Size }

// Report bounds: the terminal shows reportTerminalLines changes then
// "and N more"; changes.log keeps up to reportLogLines of one session.
const (
	reportTerminalLines = 20
	reportLogLines      = 10000
)

// reportChanges tells the user, on stderr and in the log under
// ~/.local/state (never bound inside), which command-bearing settings the
// session changed: they run when Claude Code (or git, or glab) starts
// outside the sandbox. Every path and key is the session's to choose:
// on the terminal each is shown escaped (control characters, escape
// sequences and newlines as \xNN, \n: never acted on by the terminal),
// and the log holds one JSON object per line.
func reportChanges(home string, changes []shadow.Change, stderr io.Writer) {
	if len(changes) == 0 {
		return
	}
	now := time.Now().UTC().Format(time.RFC3339)
	var b strings.Builder
	fmt.Fprintf(&b, "claude-sandbox: warning: %s this session changed settings that run commands outside the sandbox (review them before starting Claude Code, git or glab outside it):\n", now)
	for i, c := range changes {
		if i == reportTerminalLines {
			fmt.Fprintf(&b, "  and %d more\n", len(changes)-i)
			break
		}
		line := escapeReport(c.Path)
		if c.Key != "" {
			line += ": " + escapeReport(c.Key)
		}
		fmt.Fprintf(&b, "  %s (%s)\n", line, escapeReport(c.Change))
	}
	fmt.Fprint(stderr, b.String())
	log := filepath.Join(home, shadow.LogFile)
	if err := os.MkdirAll(filepath.Dir(log), 0o700); err != nil {
		fmt.Fprintln(stderr, "claude-sandbox: warning:", err)
		return
	}
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		fmt.Fprintln(stderr, "claude-sandbox: warning:", err)
		return
	}
	defer f.Close()
	_, _ = f.Write(changeLog(now, changes, reportLogLines))
	fmt.Fprintf(stderr, "claude-sandbox: recorded in %s\n", log)
}

// logLine is one line of changes.log.
type logLine struct {
	Time   string `json:"time"`
	Path   string `json:"path,omitempty"`
	Key    string `json:"key,omitempty"`
	Change string `json:"change"`
	More   int    `json:"more,omitempty"`
}

// changeLog renders changes as JSON lines, at most limit of them and then
// one {"more": N}. encoding/json escapes every control character, so a
// newline in a name stays inside its line.
func changeLog(now string, changes []shadow.Change, limit int) []byte {
	var out []byte
	for i, c := range changes {
		l := logLine{Time: now, Path: c.Path, Key: c.Key, Change: c.Change}
		if i == limit {
			l = logLine{Time: now, Change: "not recorded", More: len(changes) - i}
		}
		j, _ := json.Marshal(l)
		out = append(append(out, j...), '\n')
		if i == limit {
			break
		}
	}
	return out
}

// safeText escapes, in a message the launcher prints, every rune that is
// not printable (an escape sequence, a carriage return, a bidi control)
// but newlines and tabs: messages name paths a session chose (a gitdir
// under .git/modules, a directory of the workspace), and the terminal
// must show them, not act on them (a title report or an OSC 52 write
// would type into the user's shell once the launcher exits).
func safeText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (!unicode.IsPrint(r) && r != '\n' && r != '\t') {
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
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unicode.IsPrint(r) && r != '\n' && r != '\t':
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// escapeReport shows a session-chosen string on the terminal: as it is
// when every rune is printable (and no quote or backslash could make it
// read as an escaped one), else Go-quoted (\x1b, \n, \u202e visible).
func escapeReport(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) || r == '"' || r == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}

func readDirNames(dir string) ([]string, error) {
	// O_DIRECTORY: a FIFO put in place of a directory is refused, never
	// waited on.
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Bounded: a workspace a session filled with a million names must
	// not cost the launch their memory; the planning lists (the
	// workspace's repositories, ~/.cache's entries) are far shorter.
	names, err := f.Readdirnames(maxDirNames)
	if err == io.EOF {
		err = nil
	}
	return names, err
}

const maxDirNames = 100000

// sessionTreeReader reads a host file as readSmallFile does, except that
// a file below one of the trees (a session's writable places) is read
// beneath the deepest tree that holds it: no link leads the read out of
// it (a .git file naming a gitdir through a link to /etc reads nothing).
func sessionTreeReader(trees []string) func(string) ([]byte, error) {
	var roots []string
	for _, t := range trees {
		if t == "" || !filepath.IsAbs(t) {
			continue
		}
		roots = append(roots, filepath.Clean(t))
		if r, err := filepath.EvalSymlinks(t); err == nil && r != filepath.Clean(t) {
			roots = append(roots, r)
		}
	}
	return func(p string) ([]byte, error) {
		p = filepath.Clean(p)
		best := ""
		for _, r := range roots {
			if (p == r || strings.HasPrefix(p, r+"/") || r == "/") && len(r) > len(best) {
				best = r
			}
		}
		if best == "" {
			return readSmallFile(p)
		}
		rel, _ := filepath.Rel(best, p)
		if rel == "." {
			return nil, &fs.PathError{Op: "read", Path: p, Err: beneath.ErrNotRegular}
		}
		return beneath.ReadFile(best, rel, 1<<20)
	}
}

// readSmallFile reads a host file the shadow parses (a git config, a .git
// file, .gitmodules) outside every session tree, which a session may
// still have replaced (a repository's include naming a FIFO): only a
// regular file (a symlink to one is fine) of at most 1 MiB, refused by
// its size before a byte is read; a FIFO does not block the open, a
// device (a link to /dev/zero) is refused. beneath.ReadFile of the path
// itself: its links are followed, as the user's own.
func readSmallFile(p string) ([]byte, error) {
	return beneath.ReadFile(p, ".", 1<<20)
}

// loadConfig reads the shadow's configuration, refusing a file that a
// non-root user could have written (the sandbox's own user among them).
func loadConfig(name string) (shadow.Config, error) {
	f, err := os.Open(name)
	if os.IsNotExist(err) {
		return shadow.DefaultConfig(), nil
	}
	if err != nil {
		return shadow.Config{}, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return shadow.Config{}, err
	}
	if st.Uid != 0 || st.Mode&0o022 != 0 {
		return shadow.Config{}, fmt.Errorf("refusing %s: it is writable by a user other than root (owner uid %d, mode %04o); fix it with: chown root:root %s && chmod 0644 %s", name, st.Uid, st.Mode&0o7777, name, name)
	}
	return shadow.ParseConfig(name, f)
}

func userName() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprint(os.Getuid())
}

// gitIdentity reads user.name and user.email from the host's git
// configuration, in one git call; no git means no identity.
func gitIdentity() (name, email string) {
	// In the workspace, git also reads the repository's config, which a
	// session may have written (a repository it created): an include of a
	// FIFO there would block git, and the launch with it. Past the
	// deadline the session gets no identity (verify's V16 warns).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "config", "--get-regexp", `^user\.(name|email)$`).Output()
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "user.name":
			name = v
		case "user.email":
			email = v
		}
	}
	return name, email
}

// shadowExtras are the launch's choices the configuration makes besides
// the plan.
func shadowExtras(cfg shadow.Config, home, workspace string) runExtras {
	x := runExtras{debug: cfg.Debug, debugFile: cfg.DebugFile, osc52: cfg.OSC52, workspace: workspace, auditLog: cfg.AuditLog, ask: cfg.Ask, askTimeout: cfg.AskTimeout, sshConfirm: cfg.SSHConfirm, shadow: true}
	if len(cfg.SSHAgent) > 0 {
		x.sshAgent = &sshagent.Config{Hosts: cfg.SSHAgent, Keys: cfg.SSHKey, HostKeys: cfg.SSHHostKey, KeyFiles: cfg.SSHKeyFile, KnownHosts: sshagent.KnownHostsFiles(home)}
	}
	return x
}
