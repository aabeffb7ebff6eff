#!/usr/bin/env bash
# Installs the Node interop client's packages (@grpc/grpc-js,
# @grpc/proto-loader) from the npm registry, exactly as package-lock.json
# says, into tests/interop/node/node_modules. tests/run.sh runs it before
# the builds; the C builds never depend on it. On failure it prints one
# line, "npm ci failed: REASON", and exits 1.
set -u
cd "$(dirname "$0")"
if ! command -v npm >/dev/null; then
  echo "npm ci failed: npm is not installed (tools/deps.sh test installs it)"
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# A registry that cannot be reached fails within seconds, not minutes.
if ! timeout 600 npm ci --no-audit --no-fund --loglevel=error \
     --fetch-retries=2 --fetch-retry-mintimeout=2000 \
     --fetch-retry-maxtimeout=10000 >"$log" 2>&1; then
  # npm says why in a "reason: …" (ECONNREFUSED, ENOTFOUND…) or a code.
  why=$(sed -n 's/.*failed, reason: //p' "$log" | head -n1)
  [ -n "$why" ] || why=$(sed -n 's/^npm \(ERR!\|error\) //p' "$log" | head -n1)
  echo "npm ci failed: ${why:-$(tail -n1 "$log")} (registry $(npm config get registry))"
  exit 1
fi
