#!/bin/sh
# Installs the build into a scratch root, then builds and runs example.c
# (and builds client/examples/session_owner.c) against the installed
# header, library and lease.pc only.
# Usage: test_install.sh BUILD_DIR [SANITIZER FLAGS]
set -eu
build=$1
sanitize=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(mktemp -d /tmp/leased-install-XXXXXX)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" --no-rebuild >/dev/null
pc=$(find "$root" -name lease.pc)
[ -n "$pc" ] || { echo "no lease.pc installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config \
  --define-variable=prefix="$root$prefix" --cflags --libs lease)
cc -std=c11 -Wall -Werror $sanitize -o "$root/example" "$here/example.c" $flags
# The complete example too, as a user builds it.
cc -std=c11 -Wall -Werror -D_POSIX_C_SOURCE=200809L $sanitize \
  -o "$root/session_owner" "$here/../../client/examples/session_owner.c" $flags
libdir=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config \
  --define-variable=prefix="$root$prefix" --variable=libdir lease)
LD_LIBRARY_PATH=$libdir "$root/example"
