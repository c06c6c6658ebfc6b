#!/usr/bin/env bash
# Usage: scripts/install-claude-cli.sh DIR
#
# Installs the real Claude Code CLI (npm package @anthropic-ai/claude-code,
# latest) into DIR with npm, unless it is already there, and prints the
# path of its directly runnable executable on stdout (everything else goes
# to stderr). Used by the tests that drive the CLI against a mock API
# (integration/mockapi_test.go).
#
# Layout (2.x): the package ships a native binary in a per-platform
# optional dependency, DIR/node_modules/@anthropic-ai/claude-code-linux-x64/claude
# (or -linux-arm64, -linux-x64-musl, ...); its postinstall hardlinks it over
# the stub DIR/node_modules/@anthropic-ai/claude-code/bin/claude.exe. Older
# versions (1.x) shipped a node entry point, cli.js, instead. The script
# prints the native binary when there is one, else the node entry point.
#
# The CLI is never run here: running it belongs in an isolated network
# namespace (it phones home otherwise).
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
pkg=@anthropic-ai/claude-code

find_cli() {
  local base="$dir/node_modules/$pkg" f
  # A native binary from the platform package (the wrapper's own
  # optionalDependencies list which one fits; the glob takes whichever
  # npm installed).
  for f in "$base"-linux-*/claude "$base"/bin/claude.exe; do
    if [ -f "$f" ] && [ -x "$f" ] && [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then
      printf '%s\n' "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
      return 0
    fi
  done
  # A node entry point.
  for f in "$base"/cli.js "$base"/cli-wrapper.cjs; do
    if [ -f "$f" ]; then
      printf '%s\n' "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
      return 0
    fi
  done
  return 1
}

if cli=$(find_cli); then
  echo "claude CLI already installed in $dir" >&2
  printf '%s\n' "$cli"
  exit 0
fi

command -v npm >/dev/null || { echo "npm is needed to install $pkg" >&2; exit 1; }
mkdir -p "$dir"
echo "installing $pkg into $dir" >&2
# --include=optional: the native binary is an optional dependency.
npm install --prefix "$dir" --no-audit --no-fund --include=optional "$pkg@latest" >&2

if ! cli=$(find_cli); then
  echo "installed $pkg into $dir but found no runnable CLI in it" >&2
  exit 1
fi
chmod a+rx "$cli" 2>/dev/null || true
printf '%s\n' "$cli"
