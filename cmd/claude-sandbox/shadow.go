package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/claude-sandbox/claude-sandbox/internal/install"
	"github.com/claude-sandbox/claude-sandbox/shadow"
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
	if v, _ := os.LookupEnv(shadow.MarkerEnv); v != "1" {
		in.GitName, in.GitEmail = gitIdentity()
	}
	l, err := shadow.Build(in)
	if err != nil {
		fmt.Fprintln(stderr, "claude:", err)
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
			fmt.Fprintln(stderr, "claude: warning:", err)
		}
		for _, err := range createBindTargets(in.Home, in.UID, in.GID, l.CreateDirs, l.CreateFiles, os.Geteuid() == 0) {
			fmt.Fprintln(stderr, "claude: warning:", err)
		}
		for _, w := range l.Warnings {
			fmt.Fprintln(stderr, "claude-sandbox: warning:", w)
		}
		if l.PersistWarning != "" && notePersistWarning(in.Home) {
			fmt.Fprintln(stderr, "claude-sandbox: warning:", l.PersistWarning)
		}
	}
	// What stayed outside, as salted digests, for verify's P12.
	l.Options.SetEnv = append(l.Options.SetEnv, [2]string{shadow.ScrubbedEnv, shadow.Scrubbed(in.Environ, nil)})
	if dryRun {
		return launch("claude", l.Options, runExtras{debug: cfg.Debug, debugFile: cfg.DebugFile, osc52: cfg.OSC52}, dryRun, stdout, stderr)
	}
	// The watched files are the session's to change: read them as
	// readRegular does (Claude Code's ~/.claude.json grows large).
	host := shadow.Host{ReadFile: func(p string) ([]byte, error) { return readRegular(p, 256<<20) }, Walk: walkTree, Home: in.Home,
		Exists: func(p string) bool { _, err := os.Lstat(p); return err == nil }, Readlink: os.Readlink}
	before := shadow.Take(l.Watch, host)
	code := launch("claude", l.Options, runExtras{debug: cfg.Debug, debugFile: cfg.DebugFile, osc52: cfg.OSC52}, dryRun, stdout, stderr)
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

// reportChanges tells the user, on stderr and in the log under
// ~/.local/state (never bound inside), which command-bearing settings the
// session changed: they run when Claude Code (or git, or glab) starts
// outside the sandbox.
func reportChanges(home string, changes []string, stderr io.Writer) {
	if len(changes) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s this session changed settings that run commands outside the sandbox (review them before starting Claude Code, git or glab outside it):\n", time.Now().UTC().Format(time.RFC3339))
	for _, c := range changes {
		fmt.Fprintf(&b, "  %s\n", c)
	}
	fmt.Fprint(stderr, "claude-sandbox: warning: "+b.String())
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
	_, _ = f.WriteString(b.String())
	fmt.Fprintf(stderr, "claude-sandbox: recorded in %s\n", log)
}

func readDirNames(dir string) ([]string, error) {
	// O_DIRECTORY: a FIFO put in place of a directory is refused, never
	// waited on.
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// readSmallFile reads a host file the shadow parses (a git config, a .git
// file, .gitmodules), refusing anything large.
func readSmallFile(p string) ([]byte, error) {
	return readRegular(p, 1<<20)
}

// readRegular reads the host file p, which a session may have replaced:
// only a regular file (a symlink to one is fine) of at most limit bytes.
// A FIFO does not block the open, and a device (a link to /dev/zero) or a
// huge sparse file is refused instead of read without end.
func readRegular(p string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: p, Err: errors.New("not a regular file")}
	}
	if fi.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: p, Err: fmt.Errorf("larger than %d bytes", limit)}
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// walkTree lists the files below dir with their size, mode and mtime
// (at most 20000 entries; symlinks are not followed).
func walkTree(dir string) map[string]string {
	out := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= 20000 {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fmt.Sprintf("%d %v %d", fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		return nil
	})
	return out
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
