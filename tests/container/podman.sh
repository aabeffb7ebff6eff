# shellcheck shell=bash
# What the container suites share; sourced (bash) by test_container.sh
# and test_fresh_machine.sh:
#
#   podman_init NAME WORK_DIR [NETWORK]   podman ready, or exit 77 (skipped)
#   podman_base_image                     debian:bookworm, made once
#
# podman_init installs podman, runc and debootstrap when they are missing,
# points podman at a configuration and storage of its own in WORK_DIR
# (nothing in /etc/containers changes) and then proves, in a few seconds,
# that podman can run a container here: it imports a tiny image (the
# host's /bin/sh and the libraries it needs) and runs it with
# --network=NETWORK (default host; any other network must give the
# container a default route). Storage is overlay, or vfs where overlay
# cannot work (overlay over overlayfs, as when the checkout sits inside a
# Docker container): the first driver under which the probe ran. When
# none does, or podman cannot be installed, or we are not root, it prints
# one line "NAME: SKIP: why" and exits 77, which meson counts as skipped:
# before the minute of debootstrap, never after it. Faults found later
# (an image that does not build or misbehaves) are failures.
#
# Sets: work (WORK_DIR, absolute), podman_driver; exports podman's
# CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and BUILDAH_ISOLATION.

podman_skip() {
  echo "$podman_name: SKIP: $*"
  exit 77
}

# podman_error_line FILE: the line of podman's (or apt's) output that says
# what went wrong: its first error, or else its last line.
podman_error_line() {
  { grep -m1 -E '^(Error|E):' "$1" || grep -v '^[[:space:]]*$' "$1" | tail -n1; } |
    cut -c1-300
}

podman_install() {
  export DEBIAN_FRONTEND=noninteractive
  timeout 900 apt-get install -y -qq --no-install-recommends "$@" && return
  timeout 300 apt-get update -qq &&
    timeout 900 apt-get install -y -qq --no-install-recommends "$@"
}

# podman_use DRIVER: podman's configuration for one storage driver. The
# overlay store keeps the paths it always had (storage, run), so that a
# WORK_DIR from before keeps its images.
podman_use() {
  local suffix=
  [ "$1" = overlay ] || suffix=-$1
  mkdir -p "$work/storage$suffix" "$work/run$suffix"
  cat >"$work/storage$suffix.conf" <<EOF
[storage]
driver = "$1"
graphroot = "$work/storage$suffix"
runroot = "$work/run$suffix"
EOF
  export CONTAINERS_STORAGE_CONF=$work/storage$suffix.conf
}

# podman_probe NETWORK: runs the tiny image; prints why it cannot.
podman_probe() {
  local log=$work/probe.log out
  if ! podman image exists localhost/leased-probe 2>/dev/null; then
    rm -rf "$work/probe-rootfs"
    mkdir -p "$work/probe-rootfs"
    local f
    for f in /bin/sh $(ldd /bin/sh | grep -o '/[^ ]*'); do
      cp --parents -L "$f" "$work/probe-rootfs"
    done
    if ! tar -C "$work/probe-rootfs" -c . |
         timeout 120 podman import -q - localhost/leased-probe >"$log" 2>&1
    then
      echo "cannot store an image: $(podman_error_line "$log")"
      return 1
    fi
  fi
  if ! out=$(timeout 120 podman run --rm --network="$1" \
               localhost/leased-probe /bin/sh -c \
               'echo ok; while read -r l; do echo "$l"; done </proc/net/route' \
               2>"$log"); then
    echo "cannot run a container: $(podman_error_line "$log")"
    return 1
  fi
  if [ "$(printf '%s\n' "$out" | head -n1)" != ok ]; then
    echo "a container ran but did not run its command"
    return 1
  fi
  if [ "$1" != host ] &&
     ! printf '%s\n' "$out" | awk '$2 == "00000000" { f = 1 } END { exit !f }'
  then
    echo "no default route in a container with --network=$1"
    return 1
  fi
}

podman_init() {
  podman_name=$1
  work=$(mkdir -p "$2" && cd "$2" && pwd)
  local network=${3:-host}

  [ "$(id -u)" -eq 0 ] || podman_skip "needs root (rootful podman)"
  local need=() p
  for p in podman runc debootstrap; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = \
      "install ok installed" ] || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "$podman_name: installing ${need[*]}"
    podman_install "${need[@]}" >"$work/apt.log" 2>&1 ||
      podman_skip "cannot install ${need[*]}: $(podman_error_line "$work/apt.log")"
  fi

  # crun, podman's default, fails where cgroups are in hybrid mode: runc.
  # Without the ulimits containers fail to start (setrlimit: EPERM).
  local nofile
  nofile=$(ulimit -Hn)
  cat >"$work/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_CONF=$work/containers.conf
  export BUILDAH_ISOLATION=chroot

  local driver why tried=()
  podman_driver=
  for driver in overlay vfs; do
    podman_use "$driver"
    if why=$(podman_probe "$network"); then
      podman_driver=$driver
      break
    fi
    tried+=("$driver: $why")
  done
  if [ -z "$podman_driver" ]; then
    why=$(printf '%s; ' "${tried[@]}")
    podman_skip "podman cannot work here (${why%; })"
  fi
  if [ "$podman_driver" != overlay ]; then
    echo "$podman_name: storage driver $podman_driver (${tried[0]})"
  fi
}

# The base image, made once per WORK_DIR: a minimal Debian 12
# (debootstrap --variant=minbase, whose apt sources hold only `bookworm
# main`), tagged so that `FROM debian:bookworm` resolves to it without a
# registry.
podman_base_image() {
  local lock
  exec {lock}>"$work/base.lock"
  flock "$lock"
  if ! podman image exists docker.io/library/debian:bookworm; then
    # The machine's own mirror: deb822 sources (Debian 12's installer) or
    # a sources.list (debootstrap).
    local mirror
    mirror=$({ sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources
               sed -n 's/^deb  *\(\[[^]]*\]  *\)\{0,1\}//p' /etc/apt/sources.list
             } 2>/dev/null | awk 'NR == 1 { print $1 }') || true
    mirror=${mirror:-http://deb.debian.org/debian}
    echo "$podman_name: debootstrap bookworm from $mirror"
    rm -rf "$work/rootfs"
    timeout 900 debootstrap --variant=minbase bookworm "$work/rootfs" \
      "$mirror" >"$work/debootstrap.log" 2>&1 ||
      { tail -n20 "$work/debootstrap.log"; exit 1; }
    tar -C "$work/rootfs" -c . |
      podman import -q - localhost/debian:bookworm >/dev/null
    podman tag localhost/debian:bookworm docker.io/library/debian:bookworm
    rm -rf "$work/rootfs"
  fi
  exec {lock}>&-
}
