#!/usr/bin/env bash
# Build the static binary and show, from inside a sandbox, what it isolates.
set -euo pipefail
cd "$(dirname "$0")/.."
CGO_ENABLED=0 GOTOOLCHAIN=local go build -trimpath -ldflags="-s -w" -o bin/claude-sandbox ./cmd/claude-sandbox
echo "built bin/claude-sandbox; running a shell inside it:"
echo
exec bin/claude-sandbox run --net=none --keep-env HOME --bind "$PWD" "$PWD" -- /bin/sh -c '
echo "who am I:          $(id -un) (uid $(id -u))"
grep -E "^(CapEff|CapBnd|NoNewPrivs)" /proc/self/status | sed "s/^/privileges:        /"
echo "processes I see:   $(ls /proc | grep -c "^[0-9]") (my own PID namespace)"
echo "home ($HOME):     [$(ls -A "$HOME" | tr "\n" " ")] (an empty tmpfs)"
echo "network devices:   $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" " ")"
printf "write to /usr:     "; touch /usr/demo 2>&1 | sed "s/^touch: //" || true
printf "write to the repo: "; touch ./demo-write && echo "ok (bound read-write)" && rm ./demo-write
'
