#!/usr/bin/env bash
# Usage: sudo bash scripts/test-containers.sh [docker|podman]...
#
# claude-sandbox in real container runtimes, the way devcontainers run it:
# rootful Docker and rootless Podman, each with the documented flags
#   docker: --device /dev/net/tun --security-opt seccomp=unconfined
#           --security-opt systempaths=unconfined
#   podman: --device /dev/net/tun --security-opt unmask=ALL
#           --sysctl net.ipv4.ping_group_range="0 65535" (rootless Podman
#           does not open ping sockets to the container's groups; the
#           range must lie within the gids the container maps)
# and with the runtime's defaults, as container root and as a non-root
# user (uid 1000). In each: `claude-sandbox doctor`, `run --net=none --
# true`, the egress jail (a lab "internet" server reachable, a private lab
# device refused), and `verify` in the sandbox; with the documented flags
# also `install` over Claude Code in the npm layout (/usr/local/bin/claude
# a link into /usr/local/lib/node_modules; a fake "real" claude that runs
# `claude-sandbox verify`), `claude --version` and `claude -p` through the
# shadow (SANDBOX OK), and `uninstall` putting the link back.
#
# Nothing comes from a registry: the image is a Debian rootfs made with
# debootstrap from the mirror apt uses, imported with `docker import`
# (Podman loads it from `docker save`). The packages it needs (debootstrap,
# docker.io, podman, uidmap, slirp4netns, fuse-overlayfs) are installed with
# apt-get when missing; a dockerd is started (its own socket, data root
# and no bridge or iptables rules) when none answers, and stopped at the end.
# Rootless Podman runs as a user made for it (cs-podman, with a subuid and
# subgid range).
#
# Network safety: every container runs with --network=none. The lab is a
# network namespace this script creates (cs-lab-world), joined to the
# container's namespace by a veth pair: the container gets 192.0.2.2/24,
# default via 192.0.2.1; the lab holds the "internet" 203.0.113.10 and a
# private device 10.20.0.5, each with an HTTP server on port 8080. No
# packet leaves those two namespaces.
#
# /dev/net/tun: the script passes a node of its own (mode 0666, under the
# scratch directory) with --device, as most distributions ship the host's;
# the host's node is left as it is, and the script's is removed on exit.
#
# Not part of scripts/test.sh (minutes: debootstrap, two runtimes). Prints
# one PASS/FAIL/INFO line a check and a summary; exits 1 when a check
# failed. Rerunnable: the debootstrap rootfs is cached in
# /var/tmp/cs-containers/rootfs; containers, images, the lab and the dockerd
# it started are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test-containers.sh: run it as root" >&2
  exit 2
fi
runtimes=("$@")
[ ${#runtimes[@]} -gt 0 ] || runtimes=(docker podman)
repo=$(pwd)
scratch=/var/tmp/cs-containers
mkdir -p "$scratch"
image=cs-test-debian:latest
puser=cs-podman
lab=cs-lab-world
log=$scratch/log
: >"$log"
export GOTOOLCHAIN=local

step() { printf '\n== %s\n' "$*"; }
passes=0 fails=0
results=()
pass() { passes=$((passes + 1)); results+=("PASS $*"); echo "PASS $*"; }
fail() { fails=$((fails + 1)); results+=("FAIL $*"); echo "FAIL $*"; }
info() { results+=("INFO $*"); echo "INFO $*"; }

# --- what the script needs ---------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v dockerd >/dev/null || need+=(docker.io)
for r in "${runtimes[@]}"; do
  [ "$r" != podman ] && continue
  command -v podman >/dev/null || need+=(podman)
  command -v newuidmap >/dev/null || need+=(uidmap)
  command -v slirp4netns >/dev/null || need+=(slirp4netns)
  command -v fuse-overlayfs >/dev/null || need+=(fuse-overlayfs)
done
command -v ip >/dev/null || need+=(iproute2)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  step "installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- cleanup -------------------------------------------------------------
started_dockerd=
labpids=()
# dockerd (and rootless Podman's network setup) turn net.ipv4.ip_forward on
# in the initial namespace, which every new namespace then inherits: put
# back what the machine had.
ip_forward_was=$(cat /proc/sys/net/ipv4/ip_forward)
cleanup() {
  set +e
  echo "$ip_forward_was" >/proc/sys/net/ipv4/ip_forward
  for c in cs-test-docker-flags cs-test-docker-default; do docker rm -f "$c" >/dev/null 2>&1; done
  if id "$puser" >/dev/null 2>&1 && command -v podman >/dev/null; then
    for c in cs-test-podman-flags cs-test-podman-default; do pod rm -f --time 0 "$c" >/dev/null 2>&1; done
    pod rmi -f "$image" >/dev/null 2>&1
    # rootless podman's pause process (it holds the user's namespaces)
    [ -f "/run/$puser/libpod/tmp/pause.pid" ] && kill "$(cat "/run/$puser/libpod/tmp/pause.pid")" 2>/dev/null
  fi
  docker rmi -f "$image" >/dev/null 2>&1
  # The world-usable TUN node lives only while the containers do: left
  # behind, it would open TUN to every local user of the machine, whatever
  # mode the host gives /dev/net/tun.
  rm -f "$scratch/tun"
  lab_down
  if [ -n "$started_dockerd" ]; then
    kill "$started_dockerd" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.2; done
  fi
}
trap cleanup EXIT
trap 'echo "test-containers.sh: a command failed at line $LINENO (exit $?)" >&2' ERR

# --- dockerd -------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  step "starting dockerd (own socket and data root, no bridge, no iptables)"
  export DOCKER_HOST=unix:///run/cs-containers-docker.sock
  dockerd --host "$DOCKER_HOST" --data-root "$scratch/docker" --exec-root /run/cs-containers-docker \
    --pidfile /run/cs-containers-docker.pid --bridge=none --iptables=false --ip6tables=false \
    --ip-masq=false >"$scratch/dockerd.log" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 150); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { tail -20 "$scratch/dockerd.log"; echo "test-containers.sh: dockerd did not start" >&2; exit 1; }
fi
docker version --format 'docker {{.Server.Version}}' 2>/dev/null || true

# --- the image -------------------------------------------------------------
rootfs=$scratch/rootfs
if [ ! -x "$rootfs/usr/bin/setpriv" ]; then
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  step "debootstrap bookworm from $mirror (once; cached in $rootfs)"
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$scratch/debootstrap.log" 2>&1 || { tail -20 "$scratch/debootstrap.log"; exit 1; }
  if chroot "$rootfs" sh -c 'command -v useradd' >/dev/null; then
    chroot "$rootfs" useradd -m -u 1000 -s /bin/bash dev
  else
    echo 'dev:x:1000:1000::/home/dev:/bin/bash' >>"$rootfs/etc/passwd"
    echo 'dev:x:1000:' >>"$rootfs/etc/group"
    mkdir -p "$rootfs/home/dev" && chown 1000:1000 "$rootfs/home/dev"
  fi
fi
step "the image: claude-sandbox, a fake Claude Code in the npm layout"
CGO_ENABLED=0 go build -trimpath -o "$rootfs/usr/local/bin/claude-sandbox" ./cmd/claude-sandbox
pkg=$rootfs/usr/local/lib/node_modules/@anthropic-ai/claude-code
rm -rf "$rootfs/usr/local/lib/node_modules" "$rootfs/usr/local/bin/claude" "$rootfs/usr/libexec/claude-sandbox" \
  "$rootfs/etc/claude-sandbox.conf" "$rootfs/etc/claude-code"
mkdir -p "$pkg" "$rootfs/work" "$rootfs/root/work"
# The "real" Claude Code: answers --version, and otherwise runs verify
# (through the shadow that is verify inside the sandbox).
cat >"$pkg/cli.js" <<'EOF'
#!/bin/sh
case "$1" in
--version) echo "9.9.9 (Claude Code, fake)" ;;
*) exec claude-sandbox verify ;;
esac
EOF
chmod 0755 "$pkg/cli.js"
ln -s ../lib/node_modules/@anthropic-ai/claude-code/cli.js "$rootfs/usr/local/bin/claude"
printf '# test-containers.sh\negress-jail = on\n' >"$rootfs/work/claude-sandbox.conf"
chroot "$rootfs" chown 1000:1000 /work
printf '[user]\n\tname = Tester\n\temail = t@example.org\n' >"$rootfs/home/dev/.gitconfig"
printf '[user]\n\tname = Tester\n\temail = t@example.org\n' >"$rootfs/root/.gitconfig"
chroot "$rootfs" chown 1000:1000 /home/dev/.gitconfig
tar -C "$rootfs" -c . | docker import -c 'CMD ["sleep", "infinity"]' -c 'WORKDIR /work' - "$image" >/dev/null
rm -f "$scratch/tun"
mknod -m 0666 "$scratch/tun" c 10 200
chmod 0666 "$scratch/tun"

# --- rootless podman's user ----------------------------------------------
pod() { runuser -u "$puser" -- env HOME="/home/$puser" XDG_RUNTIME_DIR="/run/$puser" \
  podman --cgroup-manager=cgroupfs --events-backend=file "$@"; }
for r in "${runtimes[@]}"; do
  [ "$r" = podman ] || continue
  if ! id "$puser" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$puser"
  fi
  grep -q "^$puser:" /etc/subuid || echo "$puser:300000:65536" >>/etc/subuid
  grep -q "^$puser:" /etc/subgid || echo "$puser:300000:65536" >>/etc/subgid
  mkdir -p "/run/$puser" && chown "$puser:" "/run/$puser" && chmod 0700 "/run/$puser"
  step "podman (rootless, as $puser): loading the image"
  docker save "$image" | pod load >/dev/null
  pod version --format 'podman {{.Client.Version}}' || true
done

# --- the lab ---------------------------------------------------------------
lab_down() {
  for p in "${labpids[@]}"; do kill "$p" 2>/dev/null || true; done
  labpids=()
  ip netns del "$lab" 2>/dev/null || true
  return 0
}
# lab_up PID: a veth from the lab namespace into the container's.
lab_up() {
  local pid=$1
  lab_down
  ip netns add "$lab"
  ip -n "$lab" link set lo up
  ip -n "$lab" addr add 203.0.113.10/32 dev lo
  ip -n "$lab" addr add 10.20.0.5/32 dev lo
  ip -n "$lab" link add cs-lab type veth peer name eth-lab
  ip -n "$lab" link set eth-lab netns "/proc/$pid/ns/net"
  ip -n "$lab" addr add 192.0.2.1/24 dev cs-lab
  ip -n "$lab" link set cs-lab up
  nsenter -t "$pid" -n ip link set lo up
  nsenter -t "$pid" -n ip addr add 192.0.2.2/24 dev eth-lab
  nsenter -t "$pid" -n ip link set eth-lab up
  nsenter -t "$pid" -n ip route add default via 192.0.2.1
  mkdir -p "$scratch/www" && echo lab-ok >"$scratch/www/index.html"
  ip netns exec "$lab" python3 -m http.server 8080 --bind 0.0.0.0 --directory "$scratch/www" >/dev/null 2>&1 &
  labpids+=($!)
  for _ in $(seq 50); do ip netns exec "$lab" bash -c 'exec 3<>/dev/tcp/203.0.113.10/8080' 2>/dev/null && break; sleep 0.1; done
}

# --- the checks --------------------------------------------------------------
# ex RUNTIME NAME USER CMD...: run CMD in the container, output to $out, rc to $rc.
out= rc=0
ex() {
  local rt=$1 name=$2 u=$3
  shift 3
  local tool=(docker)
  [ "$rt" = podman ] && tool=(pod)
  set +e
  out=$("${tool[@]}" exec -u "$u" -w "$( [ "$u" = 0 ] && echo /root/work || echo /work)" -e HOME="$( [ "$u" = 0 ] && echo /root || echo /home/dev)" -e PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin "$name" "$@" 2>&1)
  rc=$?
  set -e
  printf '%s\n' "--- [$name u$u] $* (rc $rc)" "$out" >>"$log"
}

one() { # one RUNTIME MODE
  local rt=$1 mode=$2 name=cs-test-$1-$2 flags=() tool=(docker) pid fixflag
  case $rt/$mode in
  docker/flags) flags=(--device "$scratch/tun:/dev/net/tun" --security-opt seccomp=unconfined --security-opt systempaths=unconfined) ;;
  docker/default) flags=(); fixflag="seccomp=unconfined|systempaths=unconfined" ;;
  podman/flags) flags=(--device "$scratch/tun:/dev/net/tun" --security-opt unmask=ALL --sysctl "net.ipv4.ping_group_range=0 65535") ;;
  podman/default) flags=(); fixflag="unmask=ALL" ;;
  esac
  [ "$rt" = podman ] && tool=(pod)
  step "$rt, ${mode} (${flags[*]:-runtime defaults})"
  "${tool[@]}" rm -f "$name" >/dev/null 2>&1 || true
  if ! "${tool[@]}" run -d --name "$name" --network=none "${flags[@]}" "$image" >"$scratch/run.out" 2>&1; then
    fail "$rt/$mode: the container does not start: $(tail -3 "$scratch/run.out")"
    return
  fi
  pid=$("${tool[@]}" inspect -f '{{.State.Pid}}' "$name")
  lab_up "$pid"
  local u who
  for u in 0 1000; do
    who="$rt/$mode/uid$u"
    ex "$rt" "$name" "$u" claude-sandbox doctor
    if [ "$mode" = flags ]; then
      if [ $rc = 0 ]; then pass "$who doctor: all good"; else fail "$who doctor (rc $rc): $(grep -Ei 'fix|warn|fail' <<<"$out" | head -3 | tr '\n' ' ')"; fi
    else
      if [ $rc != 0 ] && grep -Eq -- "$fixflag" <<<"$out"; then
        pass "$who doctor: exits $rc and names $(grep -Eo -- "$fixflag" <<<"$out" | sort -u | tr '\n' ' ')"
      else
        fail "$who doctor (rc $rc) does not name $fixflag with the defaults: $(grep -Ei 'fix|warn|fail|ok' <<<"$out" | head -3 | tr '\n' ' ')"
      fi
    fi
    ex "$rt" "$name" "$u" claude-sandbox run --net=none -- true
    if [ $rc = 0 ]; then
      pass "$who run --net=none -- true"
      [ -z "$out" ] || info "$who run --net=none printed: $(head -3 <<<"$out" | tr '\n' ' ')"
    elif [ "$mode" = default ] && grep -Eq -- "$fixflag" <<<"$out"; then
      pass "$who run --net=none refused with the defaults, naming $(grep -Eo -- "$fixflag" <<<"$out" | sort -u | tr '\n' ' ')"
    else
      fail "$who run --net=none -- true (rc $rc): $(tail -2 <<<"$out" | tr '\n' ' ')"
    fi
    ex "$rt" "$name" "$u" timeout 60 claude-sandbox run -- bash -c 'exec 3<>/dev/tcp/203.0.113.10/8080 && printf "GET / HTTP/1.0\r\n\r\n" >&3 && cat <&3'
    if [ $rc = 0 ] && grep -q lab-ok <<<"$out"; then
      pass "$who jail: the lab internet 203.0.113.10 reachable"
    elif [ "$mode" = default ]; then
      info "$who jail: no internet through the jail with the defaults (rc $rc): $(tail -1 <<<"$out")"
    else
      fail "$who jail: the lab internet (rc $rc): $(tail -2 <<<"$out" | tr '\n' ' ')"
    fi
    ex "$rt" "$name" "$u" timeout 60 claude-sandbox run -- bash -c 'exec 3<>/dev/tcp/10.20.0.5/8080 && printf "%s%s\n" CONN ECTED'
    if grep -qx CONNECTED <<<"$out"; then
      fail "$who jail: the private lab device 10.20.0.5 was reached"
    else
      pass "$who jail: the private lab device 10.20.0.5 refused (rc $rc)"
    fi
    # The control: without the jail (--net=host is the container's own
    # --network=none namespace plus the lab's veth) the private device
    # answers, so "refused" above is the jail's doing.
    ex "$rt" "$name" "$u" timeout 60 claude-sandbox run --net=host -- bash -c 'exec 3<>/dev/tcp/10.20.0.5/8080 && printf "%s%s\n" CONN ECTED'
    if grep -qx CONNECTED <<<"$out"; then
      pass "$who control: with --net=host the private lab device answers"
    elif [ "$mode" = default ]; then
      info "$who control with --net=host (rc $rc): $(tail -1 <<<"$out" | cut -c1-160)"
    else
      fail "$who control: with --net=host the private lab device does not answer (rc $rc): $(tail -1 <<<"$out" | cut -c1-160)"
    fi
    # verify outside the shadow's sandbox: what it says (the shadow's
    # sandbox is checked below, after install).
    ex "$rt" "$name" "$u" claude-sandbox run --net=none -- claude-sandbox verify
    local res
    res=$(grep -o 'RESULT: .*' <<<"$out" | tail -1 || true)
    info "$who verify in run --net=none (rc $rc): $(head -1 <<<"$out" | cut -c1-60) ${res:-no result} $(grep -E ' FAIL |ESCAPED' <<<"$out" | head -3 | tr -s ' ' | tr '\n' ';' || true)"
  done
  local iflags=() layout real want
  [ "$mode" = default ] && iflags=(--skip-checks)
  # Two layouts of the real Claude Code: a plain binary, and npm's link.
  for layout in plain npm; do
    # Each layout alone: the plain binary without npm's link, the npm
    # link put back (install and uninstall of the plain one remove it).
    if [ $layout = plain ]; then
      real=/opt/claude-plain
      "${tool[@]}" exec "$name" sh -c "rm -f /usr/local/bin/claude && cp /usr/local/lib/node_modules/@anthropic-ai/claude-code/cli.js $real"
    else
      real=/usr/local/bin/claude
      "${tool[@]}" exec "$name" sh -c "rm -f $real && ln -s ../lib/node_modules/@anthropic-ai/claude-code/cli.js $real"
    fi
    ex "$rt" "$name" 0 claude-sandbox install "${iflags[@]}" --config /work/claude-sandbox.conf --real "$real"
    if [ $rc = 0 ]; then pass "$rt/$mode/$layout install ${iflags[*]} --real $real"; else fail "$rt/$mode/$layout install ${iflags[*]} --real $real (rc $rc): $(tail -2 <<<"$out" | tr '\n' ' ')"; fi
    for u in 0 1000; do
      who="$rt/$mode/$layout/uid$u"
      ex "$rt" "$name" "$u" claude --version
      if [ $rc = 0 ] && grep -q '9.9.9' <<<"$out"; then
        pass "$who claude --version through the shadow"
      elif [ "$mode" = default ]; then
        info "$who claude --version with the defaults (rc $rc): $(tail -1 <<<"$out" | cut -c1-160)"
      else
        fail "$who claude --version (rc $rc): $(tail -1 <<<"$out" | cut -c1-160)"
      fi
      ex "$rt" "$name" "$u" timeout 120 claude -p x
      res=$(grep -o 'RESULT: .*' <<<"$out" | tail -1 || true)
      local bad
      bad=$(grep -E ' FAIL |ESCAPED|WARN ' <<<"$out" | head -4 | tr -s ' ' | cut -c1-100 | tr '\n' ';' || true)
      if [ "$mode" = flags ]; then
        if [ $rc = 0 ] && grep -q 'SANDBOX OK' <<<"$res"; then pass "$who verify through the shadow (jail on): $res"; else fail "$who verify through the shadow (rc $rc): ${res:-no result} $bad $(tail -1 <<<"$out" | cut -c1-160)"; fi
      else
        if grep -q 'SANDBOX OK' <<<"$res"; then
          fail "$who verify through the shadow with the defaults says $res (a degraded sandbox called healthy?) $bad"
        else
          info "$who verify through the shadow with the defaults (rc $rc): ${res:-no result} $bad $(tail -1 <<<"$out" | cut -c1-160)"
        fi
      fi
    done
    ex "$rt" "$name" 0 claude-sandbox uninstall
    local link
    if [ $layout = plain ]; then
      link=$("${tool[@]}" exec "$name" sh -c "test -f $real && ! test -L $real && $real --version" 2>&1 || true)
      if [ $rc = 0 ] && grep -q 9.9.9 <<<"$link"; then pass "$rt/$mode/$layout uninstall: $real is back"; else fail "$rt/$mode/$layout uninstall (rc $rc): $real: ${link:-missing} $(tail -1 <<<"$out")"; fi
    else
      want=../lib/node_modules/@anthropic-ai/claude-code/cli.js
      link=$("${tool[@]}" exec "$name" readlink /usr/local/bin/claude 2>/dev/null || true)
      if [ $rc = 0 ] && [ "$link" = $want ]; then
        pass "$rt/$mode/$layout uninstall: /usr/local/bin/claude is the npm link again"
      else
        fail "$rt/$mode/$layout uninstall (rc $rc): /usr/local/bin/claude -> '${link:-not a link}' $(tail -1 <<<"$out")"
        # put the layout back for the next run in this container
        "${tool[@]}" exec "$name" sh -c "rm -f /usr/local/bin/claude; ln -s $want /usr/local/bin/claude" || true
      fi
    fi
  done
  lab_down
  if [ "$rt" = podman ]; then pod rm -f --time 0 "$name" >/dev/null 2>&1 || true; else docker rm -f "$name" >/dev/null 2>&1 || true; fi
}

for r in "${runtimes[@]}"; do
  for m in flags default; do one "$r" "$m"; done
done

step "summary ($passes passed, $fails failed; full output in $log)"
printf '%s\n' "${results[@]}"
if [ "$fails" != 0 ]; then exit 1; fi
