#!/usr/bin/env bash
# The test command: installs what is missing (tools/deps.sh test), then
# the Node interop client's packages with npm (a failure there fails only
# the Node cases, and the summary says why). Builds leased three times
# and tests each build: plain (every suite, and the daemon under
# valgrind), then with the address and undefined-behaviour sanitizers and
# with the thread sanitizer (each: the unit, conformance, integration,
# PostgreSQL and fuzz suites, less the cases tests/integration/meson.build
# registers in the plain build only). A sanitizer report from a leased
# that a test started fails that test. Then it builds the fuzz targets
# with clang's libFuzzer and fuzzes each for a bounded time. It ends with
# the end of each failed test's output, the reason of each skipped one,
# and one line "N passed, N failed"; it exits non-zero when anything
# failed.
set -u
cd "$(dirname "$0")/.." || exit 1
tools/deps.sh test || { echo "0 passed, 1 failed"; exit 1; }

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=23
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp"
# Tests at three per core: most of them wait (for a lease to run out, a
# daemon to restart, a PostgreSQL server to start), and at meson's
# default of one per core the machine sat idle three quarters of the
# time. The fuzzing stage (build-fuzz), which only computes, keeps one
# per core.
jobs=$((3 * $(nproc)))
passed=0
failed=0
echo "=== the Node interop client's packages: npm ci"
node_failure=$(tests/interop/node/install.sh) || echo "$node_failure"
# The end of each failed test's output, shown again just before the
# summary, where a CI log that keeps only its tail still has it.
failures=$(mktemp)
# The PostgreSQL tests' servers are copies of one cluster made once
# (tests/integration/pg.py): initdb takes seconds of CPU each time.
pg_template=$(mktemp -d)
export LEASED_PG_TEMPLATE=$pg_template/cluster
trap 'rm -rf "$failures" "$pg_template"' EXIT

# build DIR [MESON OPTIONS…]: configures DIR (sets it up the first time)
# and compiles it (everything, or only the targets in $targets when it is
# set); on failure says why and returns 1.
build() {
  local dir=$1; shift
  mkdir -p "$dir"
  if [ -f "$dir/build.ninja" ]; then
    meson configure "$dir" -Dwerror=true "$@"
  else
    meson setup "$dir" -Dwerror=true "$@"
  fi >"$dir/setup.log" 2>&1 || {
    cat "$dir/setup.log"
    echo "setup of $dir failed"
    return 1
  }
  # shellcheck disable=SC2086 # $targets: names, split at spaces
  meson compile -C "$dir" ${targets:-} >"$dir/compile.log" 2>&1 || {
    cat "$dir/compile.log"
    echo "build of $dir failed"
    return 1
  }
}

# run_suite DIR [MESON OPTIONS…] [-- MESON TEST OPTIONS…]: builds DIR
# (unless prebuild, below, has), tests it, adds up the results.
run_suite() {
  local dir=$1; shift
  local opts=() test_opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] && shift && test_opts=("$@")
  echo "=== $dir: ${opts[*]} ${test_opts[*]}"
  if [ -f "$dir/.prebuilt" ]; then
    rm "$dir/.prebuilt"
  elif ! build "$dir" "${opts[@]}"; then
    failed=$((failed + 1))
    return
  fi
  rm -f "$dir/meson-logs/testlog.json"
  meson test -C "$dir" --print-errorlogs --no-rebuild "${test_opts[@]}"
  count "$dir/meson-logs/testlog.json"
}

# count TESTLOG: adds up the results in meson's TESTLOG (JSON lines), and
# keeps the end of each failed test's output and each skip's reason.
count() {
  local counts
  counts=$(/usr/bin/python3 - "$1" "$failures" <<'PY'
import json, re, sys
ok = bad = 0
with open(sys.argv[2], "a") as out:
    try:
        for line in open(sys.argv[1]):
            t = json.loads(line)
            # EXPECTEDFAIL: a broken copy (should_fail) that was caught.
            if t["result"] in ("OK", "EXPECTEDFAIL"):
                ok += 1
            elif t["result"] == "SKIP":
                # A skip says why on its last line of output.
                why = (t.get("stdout") or "").strip().splitlines()[-1:]
                out.write("--- %s: SKIP\n%s\n" % (t["name"], "".join(why)))
            else:
                bad += 1
                text = "\n".join(t.get(k) or "" for k in ("stdout", "stderr"))
                # gRPC's own log lines crowd out the reason.
                tail = [l for l in text.splitlines()
                        if not re.match(r"[EIWD]\d{4} \d\d:", l)][-40:]
                out.write("--- %s: %s\n%s\n" % (t["name"], t["result"],
                                                "\n".join(tail)))
    except OSError:
        bad += 1
        out.write("--- no test log in %s\n" % sys.argv[1])
print(ok, bad)
PY
)
  passed=$((passed + ${counts% *}))
  failed=$((failed + ${counts#* }))
}

sanitize_opts=("-Db_sanitize=address,undefined" -Db_lundef=false)
tsan_opts=(-Db_sanitize=thread -Db_lundef=false)
# The fuzz targets alone (alias `fuzz`), with clang and libFuzzer.
fuzz_opts=(-Dtests=false -Dfuzzer=true "-Db_sanitize=address,undefined"
           -Db_lundef=false)
# prebuild DIR [MESON OPTIONS…]: build, quietly, marking DIR built for
# run_suite; a failure is left for run_suite to build again and show.
prebuild() {
  build "$@" >/dev/null 2>&1 && touch "$1/.prebuilt"
}

# The machine is busy for most of the command, and the plain build's
# tests, which mostly wait, leave a part of it: the container suite
# (tests/container: apt, podman, two builds in containers) and the
# compiles of the later builds start once the plain build is compiled, at
# lower CPU priorities (nice, which podman's containers inherit) than
# the tests, which keep theirs. The later builds wait for their compiles.
if build build -Dtests=true; then
  rm -f build/meson-logs/container.json
  nice -n 19 meson test -C build --print-errorlogs --no-rebuild \
    --suite container --logbase container >build/container.out 2>&1 &
  container=$!
  (
    renice -n 10 -p "$BASHPID" >/dev/null
    prebuild build-sanitize "${sanitize_opts[@]}"
    prebuild build-tsan "${tsan_opts[@]}"
    CC=clang targets=fuzz prebuild build-fuzz "${fuzz_opts[@]}"
  ) </dev/null &
  prebuilding=$!
  touch build/.prebuilt
  run_suite build -- --num-processes "$jobs" --no-suite container
  wait "$prebuilding"
else
  failed=$((failed + 1))
fi
# The sanitizer builds leave out the interop clients' suites, whose calls
# reach the same code in leased as the integration suite's.
sanitized_suites=(--suite unit --suite conformance --suite integration
                  --suite fuzz --suite postgres)
run_suite build-sanitize "${sanitize_opts[@]}" \
  -- --num-processes "$jobs" "${sanitized_suites[@]}"
run_suite build-tsan "${tsan_opts[@]}" \
  -- --num-processes "$jobs" "${sanitized_suites[@]}"
# Each fuzz target fuzzed for a bounded time from a copy of its corpus
# (tests/fuzz).
CC=clang targets=fuzz run_suite build-fuzz "${fuzz_opts[@]}" -- --suite fuzz

if [ -n "${container:-}" ]; then
  echo "=== build: --suite container (beside the builds above)"
  wait "$container"
  cat build/container.out
  count build/meson-logs/container.json
fi

if [ -s "$failures" ]; then
  echo "=== skipped and failed tests, the end of their output"
  cat "$failures"
fi
[ -z "$node_failure" ] ||
  echo "=== the Node interop cases failed because $node_failure"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
