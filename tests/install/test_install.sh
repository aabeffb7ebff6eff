#!/bin/sh
# What docs/client.md and the README tell a C user, for real: `meson
# install` as root, then `cc … $(pkg-config --cflags --libs lease)` and run
# the program, with no PKG_CONFIG_PATH or LD_LIBRARY_PATH. To leave this
# machine as it was, it runs in a mount namespace of its own, where
# /usr/local is an empty tmpfs and /etc an overlay (ldconfig writes its
# cache there); nothing outside sees either. It builds and runs
# example.c, and builds client/examples/session_owner.c.
# Usage: test_install.sh BUILD_DIR [SANITIZER FLAGS]
set -eu
build=$(cd "$1" && pwd)
sanitize=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/leased-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [ "$(id -u)" -ne 0 ] || ! unshare --mount true 2>/dev/null; then
  echo "skipped: needs root and mount namespaces (unshare --mount)"
  exit 77
fi
export build sanitize here tmp
unshare --mount --propagation private sh -eu -c '
  mount -t tmpfs tmpfs /usr/local
  # The overlay keeps its changes on a tmpfs: an overlay cannot have them
  # on another overlay (as /tmp is inside a container).
  mkdir "$tmp/etc" && mount -t tmpfs tmpfs "$tmp/etc"
  mkdir "$tmp/etc/upper" "$tmp/etc/work"
  mount -t overlay overlay \
    -o "lowerdir=/etc,upperdir=$tmp/etc/upper,workdir=$tmp/etc/work" /etc
  unset PKG_CONFIG_PATH LD_LIBRARY_PATH
  meson install -C "$build" --no-rebuild >"$tmp/install.log" ||
    { cat "$tmp/install.log"; exit 1; }
  # Where Debian looks: the multiarch directory, not lib64.
  libdir=$(pkg-config --variable=libdir lease)
  case $libdir in
  /usr/local/lib/*-linux-gnu) ;;
  *) echo "liblease installed in $libdir, not /usr/local/lib/<multiarch>"; exit 1 ;;
  esac
  ldconfig -p | grep -q "liblease.so.0 .*=> $libdir/" ||
    { echo "ldconfig did not run: the loader cache has no liblease"; exit 1; }
  cc -std=c11 -Wall -Werror $sanitize -o "$tmp/example" "$here/example.c" \
    $(pkg-config --cflags --libs lease)
  # The complete example too, as a user builds it.
  cc -std=c11 -Wall -Werror -D_POSIX_C_SOURCE=200809L $sanitize \
    -o "$tmp/session_owner" "$here/../../client/examples/session_owner.c" \
    $(pkg-config --cflags --libs lease)
  "$tmp/example"
  command -v leased leasectl
'
