#!/usr/bin/env bash
# Installs the Debian 12 packages a command needs, when they are missing.
# Run as root. Prints nothing when all are there.
#
#   tools/deps.sh run    building and running leased and leasectl
#                        (tools/run.sh): a compiler, meson, the libraries
#   tools/deps.sh test   all of that, and what the test command
#                        (tests/run.sh) uses besides: Python's and Go's
#                        gRPC, Node.js, PostgreSQL, valgrind, strace,
#                        clang, systemd…
set -eu
set -o pipefail

case "${1:-}" in
run) for_what="building and running leased" ;;
test) for_what="the tests" ;;
*)
  echo "usage: tools/deps.sh run|test" >&2
  exit 2
  ;;
esac

# dpkg-dev: meson asks its dpkg-architecture for Debian's multiarch
# library directory; without it `meson install` puts liblease in
# /usr/local/lib64, where neither pkg-config nor the loader look.
# libpq-dev: leased's PostgreSQL storage links libpq.
packages=(
  gcc libc6-dev pkg-config meson ninja-build dpkg-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev
  libuv1-dev libsqlite3-dev libssl-dev libmicrohttpd-dev libpq-dev
)
if [ "$1" = test ]; then
  # procps: kill(1), which systemd-analyze checks the unit's
  # ExecReload= against. iproute2: `ip`, for the tests that run leased
  # in a network namespace of their own. podman, runc and debootstrap:
  # the container suites. ca-certificates: npm's TLS to its registry
  # (Debian's nodejs only recommends it). postgresql-15: the PostgreSQL
  # tests start servers of their own from its binaries.
  # python3-setuptools, -wheel, -pip and -venv: the Python package's
  # build (client/python/setup.py), and README's `pip install` of it
  # into a venv.
  packages+=(
    protobuf-compiler libhiredis-dev openssl
    python3 python3-grpcio python3-protobuf python3-prometheus-client
    python3-setuptools python3-wheel python3-pip python3-venv
    golang-go golang-google-grpc-dev golang-google-protobuf-dev
    libfaketime valgrind strace clang libclang-rt-14-dev
    systemd procps iproute2 git podman runc debootstrap ca-certificates
    postgresql-15 groff-base
  )
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
# Node.js and npm for the Node interop client: Debian's, unless a node
# and an npm are there already (some machines carry NodeSource's, which
# Debian's npm package would conflict with).
if [ "$1" = test ] && { ! command -v node >/dev/null || ! command -v npm >/dev/null; }; then
  missing+=(nodejs npm)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi
# Installing postgresql-15 also creates and starts a system cluster,
# 15/main, unless /etc/postgresql-common/createcluster.conf says
# create_main_cluster = false. That file is postgresql-common's (not a
# dpkg conffile: its postinst installs it with ucf), so write it before
# the package comes, and have ucf keep it (UCF_FORCE_CONFFOLD; dpkg's
# --force-confold does not reach ucf).
pg_common=$(dpkg-query -W -f='${Status}' postgresql-common 2>/dev/null || true)
if [ "$1" = test ] && [ "$pg_common" != "install ok installed" ]; then
  mkdir -p /etc/postgresql-common
  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
fi
start=$SECONDS
echo "deps: installing ${#missing[@]} packages for $for_what: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive UCF_FORCE_CONFFOLD=1
echo "deps: apt-get update"
apt-get update -qq
# apt's own output is long; its errors still reach stderr. A line for the
# total, then one every 25 packages downloaded, unpacked and set up.
apt-get install -y --no-install-recommends "${missing[@]}" | awk '
  function step(what, n) { if (n % 25 == 0) print "deps: " n " of " total " " what }
  / newly installed/ { total = $3 + $1
                       print "deps: " total " packages to install, with what they need" }
  /^Get:/ { step("downloaded", ++got) }
  /^Unpacking / { step("unpacked", ++unpacked) }
  /^Setting up / { step("set up", ++set) }
  { fflush() }'
echo "deps: done in $((SECONDS - start)) s"
