package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/claude-sandbox/claude-sandbox/internal/install"
	"github.com/claude-sandbox/claude-sandbox/shadow"
)

const promoteHelp = `Usage: claude-sandbox promote TARGET

Makes the workspace TARGET install the sandbox by itself when its dev
container is created:
  .devcontainer/claude-sandbox/claude-sandbox       this binary
  .devcontainer/claude-sandbox/claude-sandbox.conf  the configuration (only
                                                    when TARGET has none)
  .claude/commands/verify-sandbox.md                the /verify-sandbox command
  .devcontainer/postCreate.sh                       created, or extended by a
                                                    marked block that runs install
It never edits devcontainer.json: it prints the postCreateCommand line to
add. Running it again changes nothing; edits of yours outside the marked
block (and inside it) survive.
`

// postCreate block markers: a re-run finds its block and leaves it alone.
const (
	blockBegin = "# >>> claude-sandbox >>>"
	blockEnd   = "# <<< claude-sandbox <<<"
)

const postCreateBlock = blockBegin + `
# Installs the Claude Code sandbox (written by claude-sandbox promote):
# as root directly (a root container, often without sudo), else with sudo.
claude_sandbox_sudo=
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    claude_sandbox_sudo=sudo
  else
    echo "installing the sandbox needs root: run this script as root, or install sudo" >&2
    false
  fi
fi && $claude_sandbox_sudo .devcontainer/claude-sandbox/claude-sandbox install --config .devcontainer/claude-sandbox/claude-sandbox.conf
` + blockEnd + "\n"

const defaultConf = `# claude-sandbox configuration (see docs/configuration.md).
# Installed to /etc/claude-sandbox.conf by claude-sandbox install.
#
# allow-ip = 10.1.2.3          # a lab device the sandbox may reach
# allow-write = /data/scratch   # an extra writable path
# pass-env = EPICS_CA_ADDR_LIST
# gitlab-host = gitlab.example.org
# no-forge
# egress-jail = 0               # only to turn the network jail off
`

// VerifyCommand is the /verify-sandbox slash command file.
const verifyCommandFile = `---
description: Prove that this session runs inside claude-sandbox
---
Run ` + "`claude-sandbox verify`" + ` (it is at /usr/libexec/claude-sandbox/claude-sandbox) with the
Bash tool and report its result line and every FAIL or ESCAPED line, verbatim.
Do not try to fix anything; just report.
`

func promoteMain(args []string, stdout, stderr io.Writer) int {
	if wantsHelp(args) {
		fmt.Fprint(stdout, promoteHelp)
		return 0
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	} else if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		return usageLine(stderr, "promote", "unknown option "+args[0])
	}
	if len(args) != 1 {
		return usageLine(stderr, "promote", "give one TARGET directory")
	}
	if err := promote(args[0], stdout); err != nil {
		fmt.Fprintln(stderr, "claude-sandbox promote:", err)
		return 1
	}
	return 0
}

func promote(target string, stdout io.Writer) error {
	fi, err := os.Stat(target)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not an existing directory", target)
	}
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	self, err := filepath.EvalSymlinks("/proc/self/exe")
	if err != nil {
		return err
	}
	dest := filepath.Join(abs, ".devcontainer/claude-sandbox/claude-sandbox")
	if real, err := filepath.EvalSymlinks(abs); err == nil && strings.HasPrefix(self, real+string(filepath.Separator)) {
		return fmt.Errorf("refusing to promote %s into itself (this binary lives there)", target)
	}
	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	if same, _ := install.SameFile(self, dest); !same {
		if err := copyFile(self, dest, 0o755); err != nil {
			return err
		}
		say("copied the binary to %s", dest)
	}
	conf := filepath.Join(abs, ".devcontainer/claude-sandbox/claude-sandbox.conf")
	if _, err := os.Stat(conf); errors.Is(err, fs.ErrNotExist) {
		content := []byte(defaultConf)
		if b, err := os.ReadFile(shadow.ConfigPath); err == nil {
			content = b // this host's configuration, the one in force here
		}
		if _, err := writeIfDifferent(conf, content, 0o644); err != nil {
			return err
		}
		say("wrote %s", conf)
	}
	cmdFile := filepath.Join(abs, ".claude/commands/verify-sandbox.md")
	if _, err := os.Stat(cmdFile); errors.Is(err, fs.ErrNotExist) {
		if _, err := writeIfDifferent(cmdFile, []byte(verifyCommandFile), 0o644); err != nil {
			return err
		}
		say("wrote %s", cmdFile)
	}
	pc := filepath.Join(abs, ".devcontainer/postCreate.sh")
	old, err := os.ReadFile(pc)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := writeIfDifferent(pc, []byte("#!/usr/bin/env bash\nset -euo pipefail\n"+postCreateBlock), 0o755); err != nil {
			return err
		}
		say("wrote %s", pc)
	case err != nil:
		return err
	case !strings.Contains(string(old), blockBegin):
		next := string(old)
		if next != "" && !strings.HasSuffix(next, "\n") {
			next += "\n"
		}
		if _, err := writeIfDifferent(pc, []byte(next+postCreateBlock), 0o755); err != nil {
			return err
		}
		say("extended %s", pc)
	}
	say(`Add to .devcontainer/devcontainer.json, if it does not run it yet:
  "postCreateCommand": "bash .devcontainer/postCreate.sh"`)
	return nil
}
