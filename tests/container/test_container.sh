#!/usr/bin/env bash
# The Dockerfile, for real: podman (rootful, no registry) builds the image
# from a Debian 12 base made here with debootstrap, runs it, waits for
# `podman healthcheck run` to say healthy, acquires a lease through it,
# and checks what the image promises: a non-root user, the data volume
# (leases survive a new container), port 7443, leasectl, no build tools.
#
#   tests/container/test_container.sh SOURCE_DIR WORK_DIR
#
# WORK_DIR keeps podman's storage and the base image between runs (the
# first run takes a few minutes: packages, debootstrap, the build). Needs
# root and Debian's mirror (apt sources); skips (exit 77) where podman
# cannot run a container. See docs/testing.md, "The container suites".
set -euo pipefail

src=$(cd "$1" && pwd)
python=/usr/bin/python3
name=leased-test-$$
volume=leased-test-data-$$

# podman, its configuration in WORK_DIR, and the check that it can run a
# container here: skips (exit 77) when it cannot (podman.sh).
# shellcheck source=tests/container/podman.sh
. "$(dirname "$0")/podman.sh"
podman_init container "$2"

cleanup() {
  podman rm -f "$name" "$name-2" >/dev/null 2>&1 || true
  podman volume rm -f "$volume" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The base image, made once: `FROM debian:bookworm` resolves to it.
podman_base_image

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
     'command -v gcc || command -v cc || command -v meson || command -v ninja || command -v protoc-c' \
     2>>"$work/podman.log"; then
  fail "build tools in the final image"
fi

port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run() {
  # (podman prints harmless errors about systemd timers for health
  # checks here: there is no systemd; `podman healthcheck run` works.)
  # A 10 s TTL: each check below is a new Python process, slow on a
  # loaded machine, and must come before the lease (or the restart
  # quarantine) ends.
  podman run -d --name "$1" --network=host -e LEASED_LISTEN=127.0.0.1:$port \
    -e LEASED_TTL=10s -v "$volume:/var/lib/leased" leased:test \
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
# leasectl ships in the image, for operators: it sees the lease.
ctl() { podman exec "$name" leasectl --url "127.0.0.1:$port" "$@"; }
ctl get s1 --json | grep -q '"owner": *"alice"' ||
  fail "leasectl get s1 in the container: $(ctl get s1 --json 2>&1)"
ctl snapshot save /tmp/leased.db | grep -q '^saved /tmp/leased.db: ' ||
  fail "leasectl snapshot save in the container"

# SIGTERM drains and exits 0; a new container on the same volume keeps
# the lease (restart quarantine) and its token.
podman stop -t 10 "$name" >/dev/null 2>>"$work/podman.log"
[ "$(podman inspect --format '{{.State.ExitCode}}' "$name")" = 0 ] ||
  fail "exit code $(podman inspect --format '{{.State.ExitCode}}' "$name")"
run "$name-2"
wait_healthy "$name-2"
[ "$(lease s1 bob)" = FAILED_PRECONDITION ] || fail "lease lost across containers"
sleep 10.5
[ "$(lease s1 bob)" = 2 ] || fail "token did not continue after the quarantine"
echo "container: ok (image leased:test, port $port)"
