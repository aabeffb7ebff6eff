#!/usr/bin/env bash
# The run command: installs what is missing, builds, and starts leased in
# the foreground with its defaults (127.0.0.1:7443, SQLite under
# ./leased-data). Extra arguments go to leased, e.g. `tools/run.sh --ttl 10s`.
set -eu
cd "$(dirname "$0")/.."
tools/deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build daemon/leased:executable >/dev/null
exec build/daemon/leased "$@"
