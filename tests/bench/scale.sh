#!/usr/bin/env bash
# leased with many live leases: the renew workload's ops/s and latency,
# the daemon's RSS, and how long a restart takes to load them and serve.
#
#   [BUILD=DIR] tests/bench/scale.sh [SESSIONS...]   # default: 1024 100000 1000000
#
# Uses build/ (after the README's set-up), or the build directory DIR
# (build-rel: a release build); the TTL is 1h so that every lease stays
# live; data under $TMPDIR, removed afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/${BUILD:-build}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1024 100000 1000000)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; true' EXIT

start() { # start DIR LOG: leased on a free loopback port; sets pid, addr
  "$bin/daemon/leased" --listen 127.0.0.1:0 --data-dir "$1" --ttl 1h >"$2" 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do
    addr=$(sed -n 's/.*msg=listening addr=\([^ ]*\).*/\1/p' "$2")
    grep -q "msg=started" "$2" && [ -n "$addr" ] && return 0
    sleep 0.01
  done
  echo "leased did not start: $(cat "$2")" >&2
  exit 1
}

printf "%-10s %10s %8s %8s %7s %9s %10s\n" sessions ops/s p50_us p99_us errors rss_mb restart_s
for n in "${sizes[@]}"; do
  dir=$(mktemp -d "${TMPDIR:-/tmp}/leased-scale-XXXXXX")
  start "$dir/data" "$dir/log1"
  json=$("$bin/tests/bench/leasebench" --target "leased://$addr" --workload renew \
    --sessions "$n" --duration 10s --warmup 2s --json)
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  kill -TERM "$pid"; wait "$pid"
  t0=$(date +%s.%N)
  start "$dir/data" "$dir/log2"
  t1=$(date +%s.%N)
  kill -TERM "$pid"; wait "$pid"; pid=
  /usr/bin/python3 - "$n" "$rss" "$t0" "$t1" "$json" <<'PY'
import json, sys
n, rss, t0, t1, j = sys.argv[1:]
d = json.loads(j)
print("%-10s %10.0f %8.0f %8.0f %7d %9.0f %10.2f" % (
    n, d["ops_per_sec"], d["p50_us"], d["p99_us"], d["errors"],
    int(rss) / 1024, float(t1) - float(t0)))
PY
  rm -rf "$dir"
done
