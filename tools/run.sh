#!/usr/bin/env bash
# The run command: installs what is missing, builds leased and leasectl,
# and starts leased in the foreground with its defaults (127.0.0.1:7443,
# SQLite under ./leased-data). Extra arguments go to leased, e.g.
# `tools/run.sh --ttl 10s`.
set -eu
cd "$(dirname "$0")/.."
tools/deps.sh run
if [ ! -f build/build.ninja ]; then
  echo "run: configuring build/"
  log=$(mktemp)
  meson setup build -Dtests=false >"$log" 2>&1 || { cat "$log"; exit 1; }
  rm -f "$log"
fi
echo "run: building leased and leasectl"
meson compile -C build daemon/leased:executable client/leased-probe:executable \
  client/leasectl:executable
echo "run: leasectl is build/client/leasectl (try: build/client/leasectl acquire job-1)"
exec build/daemon/leased "$@"
