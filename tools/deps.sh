#!/usr/bin/env bash
# Installs the Debian 12 packages leased needs to build, run and test,
# when they are missing. Run as root. Prints nothing when all are there.
set -eu

packages=(
  gcc libc6-dev pkg-config meson ninja-build
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libprotobuf-dev protobuf-compiler
  libuv1-dev libsqlite3-dev libhiredis-dev libssl-dev openssl
  libmicrohttpd-dev python3-prometheus-client systemd
  golang-go golang-google-grpc-dev golang-google-protobuf-dev
  python3 python3-grpcio python3-protobuf libfaketime valgrind strace
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
# Node.js and npm for the Node interop client: Debian's, unless a node
# and an npm are there already (some machines carry NodeSource's, which
# Debian's npm package would conflict with).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
