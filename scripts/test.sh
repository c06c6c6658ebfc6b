#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what a newcomer runs.
# Installs what the tests need, checks formatting, vet and staticcheck, runs
# every test with the race detector (privileged tests included: run it as
# root, where a skipped privileged test counts as a failure), then the
# launch and shadow benchmarks, which print figures and assert nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
export PATH="$PATH:$(go env GOPATH)/bin"

step() { printf '\n== %s\n' "$*"; }

if [ "$(id -u)" = 0 ]; then
  export CLAUDE_SANDBOX_REQUIRE_PRIVILEGED=1
  need=()
  command -v bwrap >/dev/null || need+=(bubblewrap)
  command -v unshare >/dev/null && command -v setpriv >/dev/null || need+=(util-linux)
  command -v ip >/dev/null || need+=(iproute2) # the jail tests' lab network
  command -v jq >/dev/null || need+=(jq) # the --json-status-fd test reads the lines as a non-Go program
  command -v curl >/dev/null || need+=(curl ca-certificates) # the domain allowlist test speaks HTTPS through the jail
  command -v gcc >/dev/null || need+=(gcc) # the race detector needs cgo
  command -v npm >/dev/null || need+=(nodejs npm) # the real Claude Code CLI for the end-to-end tests
  command -v zsh >/dev/null || need+=(zsh) # the generated zsh completion is loaded and tried
  command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] && command -v ssh-agent >/dev/null || need+=(openssh-server openssh-client) # the --ssh-agent lab test: sshd as forge.test and other.test
  command -v fish >/dev/null || need+=(fish) # the generated fish completion is loaded and tried
  if [ ${#need[@]} -gt 0 ]; then
    step "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
else
  echo "note: not root: privileged tests will be skipped (CI runs as root)" >&2
fi

step "modules"
go mod download
if [ "$(id -u)" = 0 ]; then
  step "the real Claude Code CLI (npm), for the end-to-end tests"
  bash scripts/install-claude-cli.sh /var/cache/claude-sandbox-test/claude-cli >/dev/null
fi
if ! command -v staticcheck >/dev/null; then
  go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted"; exit 1; fi

step "go vet"
go vet ./...

step "staticcheck"
staticcheck ./...

step "build (static, CGO off)"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o bin/claude-sandbox ./cmd/claude-sandbox
if ldd bin/claude-sandbox >/dev/null 2>&1; then echo "bin/claude-sandbox is not static"; exit 1; fi

if [ "$(id -u)" = 0 ]; then
  step "packages: the .deb installed into a throwaway root (scripts/test-packages.sh)"
  bash scripts/test-packages.sh
fi

step "tests (race detector on)"
# A generous per-package timeout: the integration package runs for minutes
# and a loaded machine must not turn slowness into a failure.
go test -race -count=1 -timeout 45m ./...

step "coverage: mounts, nsexec and the installer, re-executed stages included (figures only)"
# The packages' unit tests, and the integration tests that exercise them
# (a subset, ~20 s) run against a claude-sandbox built with -cover: every
# process of a launch, the stages in their namespaces included (see
# internal/covrun and nsexec/cover_linux.go), writes its counters; the
# two are merged per package. It prints figures and fails nothing: the
# runs above are the tests.
mod=github.com/claude-sandbox/claude-sandbox
covpkgs=$mod/mounts,$mod/nsexec,$mod/cmd/claude-sandbox,$mod/internal/...
covdir=$(mktemp -d /var/tmp/claude-sandbox-cover-XXXXXX)
# Every uid a test runs the binary as writes there; no sticky bit, so a
# later process may replace the meta-data file an earlier one wrote.
chmod 0755 "$covdir"
mkdir -m 0777 "$covdir/unit" "$covdir/run" && chmod 0777 "$covdir/unit" "$covdir/run"
(
  set +e
  go test -count=1 -covermode=atomic -coverpkg="$covpkgs" ./mounts/ ./nsexec/ ./cmd/claude-sandbox/ \
    -args -test.gocoverdir="$covdir/unit" >"$covdir/unit.log" 2>&1 || { echo "note: a coverage unit run failed:"; grep -E -- '^(--- FAIL|FAIL|panic)|_test.go:' "$covdir/unit.log" | head -20; }
  CLAUDE_SANDBOX_COVERDIR="$covdir/run" go test -count=1 ./integration/ \
    -run 'TestInstall|TestUninstall|TestNoPrivilegeInside|TestReadOnlyHost|TestHomeAndMasks|TestBind|TestNamespaces|TestNoInheritedDescriptors|TestPrivateDev|TestExitStatus|TestMountFlags|TestShadowSharedConfig|TestJailPrepareFailureExits125|TestUserNamespacesUnavailable|TestProcFallback|TestEnvironmentIsCleared' \
    >"$covdir/run.log" 2>&1 || { echo "note: the coverage integration run failed:"; grep -E -- '^(--- FAIL|FAIL|panic)|_test.go:' "$covdir/run.log" | head -20; }
  go tool covdata percent -i="$covdir/unit,$covdir/run" -pkg="$mod/mounts,$mod/nsexec,$mod/cmd/claude-sandbox,$mod/internal/install" |
    sed "s|$mod/||; s/[[:space:]]\{1,\}coverage: / /"
) || true
rm -rf "$covdir"

step "fuzz: packets from the sandbox into the relay, its output into the host terminal (bounded)"
# The seed corpora run with the tests above; this explores beyond them. A
# crasher is written under the package's testdata/fuzz: commit it with the
# fix. The budgets are counts, not durations (30-90 s and 5-15 s here):
# with a duration, Go 1.26's fuzz coordinator can end a run with a bare
# "context deadline exceeded" and no failing input when a worker is slow
# to stop at the deadline (golang/go#75804, fixed in Go 1.27), which
# failed a full run of this script once.
go test -run '^$' -fuzz '^FuzzTUNInput$' -fuzztime 60000x ./userstack/
go test -run '^$' -fuzz '^FuzzSinkRefuse$' -fuzztime 90000x ./jail/
go test -run '^$' -fuzz '^FuzzTermFilter$' -fuzztime 200000x ./nsexec/

step "benchmarks (figures only)"
go test -run '^$' -bench 'BenchmarkLaunch$' -benchtime 200x -count 1 ./integration/
go test -run '^$' -bench 'BenchmarkLaunchJail$' -benchtime 100x -count 1 ./integration/
go test -run '^$' -bench 'BenchmarkShadowOverhead$' -benchtime 3x -count 1 ./integration/
# Page faults, CPU and wall time per launch, every path against its peer (issue 33).
go test -run '^$' -bench 'BenchmarkLaunchCost$' -benchtime 10x -count 1 ./integration/
