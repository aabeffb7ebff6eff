#!/usr/bin/env bash
# The Dockerfile, for real: podman (rootful, no registry) builds the image
# from a Debian 12 base made here with debootstrap, runs it, waits for
# `podman healthcheck run` to say healthy, acquires a lease through it,
# and checks what the image promises: a non-root user, the data volume
# (leases survive a new container), port 7443, no build tools.
#
#   tests/container/test_container.sh SOURCE_DIR WORK_DIR
#
# WORK_DIR keeps podman's storage and the base image between runs (the
# first run takes a few minutes: packages, debootstrap, the build). Needs
# root, and Debian's mirror (apt sources). See container-notes in docs.
set -euo pipefail

src=$(cd "$1" && pwd)
work=$(mkdir -p "$2" && cd "$2" && pwd)
python=/usr/bin/python3
name=leased-test-$$
volume=leased-test-data-$$

need=()
for p in podman runc debootstrap; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = \
    "install ok installed" ] || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "container: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq \
    --no-install-recommends "${need[@]}" >/dev/null
fi

# podman's configuration, all of it in WORK_DIR: nothing in /etc changes.
mkdir -p "$work/storage" "$work/run"
cat >"$work/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
EOF
nofile=$(ulimit -Hn)
cat >"$work/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_STORAGE_CONF=$work/storage.conf
export CONTAINERS_CONF=$work/containers.conf
export BUILDAH_ISOLATION=chroot

cleanup() {
  podman rm -f "$name" "$name-2" >/dev/null 2>&1 || true
  podman volume rm -f "$volume" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The base image, made once: `FROM debian:bookworm` resolves to it.
if ! podman image exists docker.io/library/debian:bookworm; then
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources \
             2>/dev/null | head -n1)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "container: debootstrap bookworm from $mirror"
  rm -rf "$work/rootfs"
  timeout 900 debootstrap --variant=minbase bookworm "$work/rootfs" \
    "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; exit 1; }
  tar -C "$work/rootfs" -c . | podman import - localhost/debian:bookworm >/dev/null
  podman tag localhost/debian:bookworm docker.io/library/debian:bookworm
  rm -rf "$work/rootfs"
fi

echo "container: building the image"
timeout 1800 podman build --pull=never --format docker --network=host \
  -t leased:test "$src" >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; exit 1; }

fail() { echo "container: FAIL: $*"; podman logs "$name" 2>&1 | tail -20; exit 1; }

# What the image says about itself.
[ "$(podman image inspect --format '{{.Config.User}}' leased:test)" = \
  "10001:10001" ] || fail "not user 10001"
podman image inspect --format '{{json .Config.Volumes}}' leased:test |
  grep -q '"/var/lib/leased"' || fail "no /var/lib/leased volume"
podman image inspect --format '{{json .Config.ExposedPorts}}' leased:test |
  grep -q '"7443/tcp"' || fail "7443 not exposed"
podman image inspect --format '{{json .Config.Healthcheck}}' leased:test |
  grep -q 'leased-probe' || fail "no HEALTHCHECK"
if podman run --rm --entrypoint /bin/sh leased:test -c \
     'command -v gcc || command -v cc || command -v meson || command -v ninja || command -v protoc-c'; then
  fail "build tools in the final image"
fi

port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run() {
  # (podman prints harmless errors about systemd timers for health
  # checks here: there is no systemd; `podman healthcheck run` works.)
  podman run -d --name "$1" --network=host -e LEASED_LISTEN=127.0.0.1:$port \
    -e LEASED_TTL=2s -v "$volume:/var/lib/leased" leased:test \
    >/dev/null 2>>"$work/podman.log"
}
wait_healthy() {
  for _ in $(seq 60); do
    if podman healthcheck run "$1" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  fail "$1 never became healthy"
}

run "$name"
wait_healthy "$name"
[ "$(podman exec "$name" id -u)" = 10001 ] || fail "runs as $(podman exec "$name" id -u)"

# A lease through the container, with the Python client of the tests.
lease() {
  PYTHONPATH=$src/tests/integration $python - "$port" "$@" <<'PY'
import sys
import grpc
import harness
c = harness.Client(grpc.insecure_channel("127.0.0.1:" + sys.argv[1]))
try:
    print(c.acquire(sys.argv[2], sys.argv[3]).token)
except grpc.RpcError as e:
    print(e.code().name)
PY
}
[ "$(lease s1 alice)" = 1 ] || fail "acquire through the container"
[ "$(lease s1 bob)" = FAILED_PRECONDITION ] || fail "second owner not refused"

# SIGTERM drains and exits 0; a new container on the same volume keeps
# the lease (restart quarantine) and its token.
podman stop -t 10 "$name" >/dev/null 2>>"$work/podman.log"
[ "$(podman inspect --format '{{.State.ExitCode}}' "$name")" = 0 ] ||
  fail "exit code $(podman inspect --format '{{.State.ExitCode}}' "$name")"
run "$name-2"
wait_healthy "$name-2"
[ "$(lease s1 bob)" = FAILED_PRECONDITION ] || fail "lease lost across containers"
sleep 2.5
[ "$(lease s1 bob)" = 2 ] || fail "token did not continue after the quarantine"
echo "container: ok (image leased:test, port $port)"
