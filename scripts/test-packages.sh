#!/usr/bin/env bash
# Usage: bash scripts/test-packages.sh   (root; scripts/test.sh runs it)
#
# The .deb from scripts/release.sh, installed for real: builds the package
# for this machine's architecture (installing nfpm as release.sh does),
# installs it with `dpkg --root` into a throwaway root that has only an
# empty dpkg database, and checks every file, its mode and owner, that the
# package carries no maintainer script (installing it never runs
# `claude-sandbox install`: no shadow `claude`, no /etc/claude-sandbox.conf,
# no /usr/libexec/claude-sandbox appear), that the binary in it runs, and
# that building it again, at another time with another umask, gives the
# same bytes. The .rpm is checked with rpm when rpm is installed (its
# scripts and file list). Takes ~10-30 s once nfpm is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
fail() { echo "test-packages.sh: FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then
  echo "test-packages.sh: run it as root (dpkg --root installs as root)" >&2
  exit 2
fi
command -v dpkg >/dev/null || fail "dpkg is not installed"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cs-packages.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
arch=$(go env GOARCH)
case $arch in amd64 | arm64) ;; *) echo "test-packages.sh: no packages for $arch"; exit 0 ;; esac
epoch=$(git log -1 --format=%ct)

kinds=deb
command -v rpm >/dev/null && kinds=deb,rpm
SOURCE_DATE_EPOCH=$epoch bash scripts/release.sh --out "$tmp/a" --arch "$arch" --version v1.2.3-4-gabcdef --packages "$kinds" >/dev/null
deb=$tmp/a/claude-sandbox_1.2.3+4.gabcdef-1_$arch.deb
[ -f "$deb" ] || fail "no $deb (built: $(ls "$tmp/a"))"

# Reproducible: another run, later (every file it stages is made again,
# with other times) and with another umask, gives the same package.
(umask 077 && SOURCE_DATE_EPOCH=$epoch bash scripts/release.sh --out "$tmp/b" --arch "$arch" --version v1.2.3-4-gabcdef --packages "$kinds" >/dev/null)
for f in "$tmp"/a/*.deb "$tmp"/a/*.rpm; do
  [ -e "$f" ] || continue
  cmp -s "$f" "$tmp/b/${f##*/}" || fail "${f##*/} differs between two builds of the same commit"
done

# No maintainer script: the control archive holds control and md5sums only.
members=$(dpkg-deb --ctrl-tarfile "$deb" | tar -t | sed 's|^\./||' | grep -v '^$' | sort | tr '\n' ' ')
[ "$members" = "control md5sums " ] || fail "control archive holds more than control and md5sums: $members"
[ "$(dpkg-deb -f "$deb" Package)" = claude-sandbox ] || fail "Package: $(dpkg-deb -f "$deb" Package)"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] || fail "Architecture: $(dpkg-deb -f "$deb" Architecture)"

# Install into a throwaway root with an empty dpkg database.
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
: >"$root/var/lib/dpkg/status"
: >"$root/var/lib/dpkg/available"
dpkg --root="$root" --log=/dev/null --force-script-chrootless -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i --root"; }
grep -q '^Status: install ok installed' "$root/var/lib/dpkg/status" || fail "dpkg does not record the package as installed"

want=(
  "755 root root /usr/bin/claude-sandbox"
  "644 root root /usr/share/man/man1/claude-sandbox.1.gz"
  "644 root root /usr/share/bash-completion/completions/claude-sandbox"
  "644 root root /usr/share/zsh/vendor-completions/_claude-sandbox"
  "644 root root /usr/share/fish/vendor_completions.d/claude-sandbox.fish"
  "644 root root /usr/share/doc/claude-sandbox/LICENSE"
  "644 root root /usr/share/doc/claude-sandbox/NOTICE"
  "644 root root /usr/share/doc/claude-sandbox/README.md"
)
for d in docs/*.md; do want+=("644 root root /usr/share/doc/claude-sandbox/$d"); done
for w in "${want[@]}"; do
  p=${w##* }
  [ -f "$root$p" ] && [ ! -L "$root$p" ] || fail "$p is not installed as a file"
  got="$(stat -c '%a %U %G' "$root$p") $p"
  [ "$got" = "$w" ] || fail "want $w, got $got"
done
# Nothing else: every regular file the package installed is one of those.
extra=$(cd "$root" && find . -type f ! -path './var/lib/dpkg/*' | sed 's|^\.||' | sort)
[ "$(echo "$extra" | wc -l)" = "${#want[@]}" ] || fail "unexpected files installed: $(echo "$extra" | tr '\n' ' ')"
# What install would have made is not there.
for p in /usr/local/bin/claude /usr/libexec/claude-sandbox /etc/claude-sandbox.conf /etc/claude-code; do
  [ ! -e "$root$p" ] && [ ! -L "$root$p" ] || fail "$p exists after installing the package: a maintainer script ran install"
done
ls "$root/var/lib/dpkg/info/" | grep -Eq '\.(preinst|postinst|prerm|postrm|config)$' && fail "dpkg recorded a maintainer script"
# The contents match what the tree generates.
cmp -s "$root/usr/share/doc/claude-sandbox/LICENSE" LICENSE || fail "LICENSE differs"
"$root/usr/bin/claude-sandbox" version | grep -q 'v1.2.3-4-gabcdef' || fail "the installed binary does not say its version: $("$root/usr/bin/claude-sandbox" version 2>&1)"
gzip -dc "$root/usr/share/man/man1/claude-sandbox.1.gz" | grep -q '^\.TH' || fail "the man page is no roff page"
cmp -s "$root/usr/share/bash-completion/completions/claude-sandbox" <("$root/usr/bin/claude-sandbox" completion bash) || fail "the bash completion differs from the binary's"
# Times are the commit's.
[ "$(stat -c %Y "$root/usr/bin/claude-sandbox")" = "$epoch" ] || fail "mtime of /usr/bin/claude-sandbox is not SOURCE_DATE_EPOCH ($epoch)"
dpkg --root="$root" --log=/dev/null --force-script-chrootless -r claude-sandbox >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -r --root"; }
[ ! -e "$root/usr/bin/claude-sandbox" ] || fail "dpkg -r left /usr/bin/claude-sandbox"
echo "deb: installed into a throwaway root, files and modes right, no maintainer scripts, reproducible"

if command -v rpm >/dev/null; then
  rarch=x86_64
  [ "$arch" = amd64 ] || rarch=aarch64
  r=$tmp/a/claude-sandbox-1.2.3+4.gabcdef-1.$rarch.rpm
  [ -f "$r" ] || fail "no $r (built: $(ls "$tmp/a"))"
  scripts=$(rpm -qp --scripts "$r" 2>/dev/null)
  [ -z "$scripts" ] || fail "the rpm has scripts: $scripts"
  rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME} %{FILENAMES}\n]' "$r" 2>/dev/null | grep -q '^-rwxr-xr-x root /usr/bin/claude-sandbox$' || fail "the rpm lacks /usr/bin/claude-sandbox 0755 root"
  rpm -qpl "$r" 2>/dev/null | grep -qx /usr/share/zsh/site-functions/_claude-sandbox || fail "the rpm lacks the zsh completion"
  echo "rpm: no scripts, binary 0755 root"
fi
