#!/usr/bin/env bash
# Usage: sudo bash scripts/test-installed.sh [GO-TEST-ARGS...]
#
# Runs the README's test command on a machine where `claude-sandbox
# install` has run, without changing the real machine: in a private mount
# namespace whose /usr, /etc, /root, /var/cache, /opt (and /home) are
# overlayfs mounts with their upper layers in a scratch directory. Inside
# it, as a user would: the real Claude Code CLI (npm) at ~/.local/bin/claude,
# claude-sandbox built to /usr/local/bin, `claude-sandbox install` (the
# shadow `claude` first in PATH, the real binary relocated to
# /usr/libexec/claude-sandbox/claude, /etc/claude-sandbox.conf, the
# integrity guard in /etc/claude-code/managed-settings.json,
# ~/.claude/commands/verify-sandbox.md), `claude-sandbox doctor`, then
# `bash scripts/test.sh` with the shadow first in PATH.
#
# With arguments, runs `go test -race -count=1 ARGS...` instead of the
# whole of scripts/test.sh (to repeat one failing test), e.g.
#   sudo bash scripts/test-installed.sh ./integration/ -run 'TestShadow'
#
# Leaving the namespace drops every mount; the scratch directory is removed.
# Slow (the whole suite), so it is not part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test-installed.sh: run it as root (it mounts overlays in a private mount namespace)" >&2
  exit 2
fi
repo=$(pwd)
case "$repo" in
/usr/* | /etc/* | /root/* | /var/cache/* | /opt/* | /home/*)
  echo "test-installed.sh: the checkout ($repo) must lie outside the overlaid trees (/usr /etc /root /var/cache /opt /home)" >&2
  exit 2
  ;;
esac
scratch=$(mktemp -d "${TMPDIR:-/var/tmp}/cs-installed.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

export CS_SCRATCH=$scratch CS_REPO=$repo CS_GOTEST_ARGS="$*"
# --propagation private: nothing mounted here reaches the host.
unshare -m --propagation private bash -euo pipefail -c '
step() { printf "\n== [installed] %s\n" "$*"; }
for d in usr etc root var/cache opt home; do
  [ -d "/$d" ] || continue
  mkdir -p "$CS_SCRATCH/$d/u" "$CS_SCRATCH/$d/w"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$CS_SCRATCH/$d/u,workdir=$CS_SCRATCH/$d/w" "/$d"
done
# install wants /dev/net/tun usable by users (mode 0666, as most
# distributions ship it); a node of our own bound over it, not a chmod of
# the host'"'"'s.
if [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
  mknod -m 0666 "$CS_SCRATCH/tun" c 10 200
  mount --bind "$CS_SCRATCH/tun" /dev/net/tun
fi
cd "$CS_REPO"
export GOTOOLCHAIN=local
step "the real Claude Code CLI (npm) at ~/.local/bin/claude"
cli=$(bash scripts/install-claude-cli.sh /var/cache/claude-sandbox-test/claude-cli)
mkdir -p "$HOME/.local/bin"
cp "$cli" "$HOME/.local/bin/claude"
step "claude-sandbox to /usr/local/bin"
CGO_ENABLED=0 go build -o /usr/local/bin/claude-sandbox ./cmd/claude-sandbox
conf=$CS_SCRATCH/claude-sandbox.conf
printf "# written by scripts/test-installed.sh\negress-jail = on\n" >"$conf"
step "claude-sandbox install (docs/install.md)"
/usr/local/bin/claude-sandbox install --config "$conf"
export PATH="/usr/local/bin:$PATH"
hash -r
step "where things are"
command -v claude claude-sandbox
ls -l /usr/libexec/claude-sandbox /etc/claude-code/managed-settings.json /etc/claude-sandbox.conf
step "claude-sandbox doctor"
claude-sandbox doctor || echo "(doctor reported problems; see above)"
if [ -n "$CS_GOTEST_ARGS" ]; then
  step "go test -race -count=1 $CS_GOTEST_ARGS"
  export CLAUDE_SANDBOX_REQUIRE_PRIVILEGED=1
  # shellcheck disable=SC2086
  go test -race -count=1 $CS_GOTEST_ARGS
else
  step "bash scripts/test.sh"
  bash scripts/test.sh
fi
'
echo "test-installed.sh: passed; the host is unchanged (the overlays went with the namespace)"
