#!/usr/bin/env bash
# The test command: installs what is missing, builds leased twice (plain,
# and with the address and undefined-behaviour sanitizers), runs every
# test suite against each build, and ends with one line
# "N passed, N failed". Exits non-zero when anything failed.
set -u
cd "$(dirname "$0")/.."
tools/deps.sh || { echo "0 passed, 1 failed"; exit 1; }

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=23
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
passed=0
failed=0

# run_suite DIR [MESON OPTIONS…]: configure, build, test; add up results.
run_suite() {
  local dir=$1; shift
  echo "=== $dir: $*"
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" -Dwerror=true "$@" >/dev/null
  else
    meson setup "$dir" -Dwerror=true "$@" >/dev/null
  fi || { echo "setup of $dir failed"; failed=$((failed + 1)); return; }
  if ! meson compile -C "$dir" >"$dir.compile.log" 2>&1; then
    cat "$dir.compile.log"
    echo "build of $dir failed"
    failed=$((failed + 1))
    return
  fi
  rm -f "$dir/meson-logs/testlog.json"
  meson test -C "$dir" --print-errorlogs --no-rebuild
  local counts
  counts=$(/usr/bin/python3 - "$dir/meson-logs/testlog.json" <<'PY'
import json, sys
ok = bad = 0
try:
    for line in open(sys.argv[1]):
        r = json.loads(line)["result"]
        if r == "OK":
            ok += 1
        elif r != "SKIP":
            bad += 1
except OSError:
    bad += 1
print(ok, bad)
PY
)
  passed=$((passed + ${counts% *}))
  failed=$((failed + ${counts#* }))
}

run_suite build
run_suite build-sanitize -Db_sanitize=address,undefined -Db_lundef=false

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
