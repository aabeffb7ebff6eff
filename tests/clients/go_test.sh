#!/bin/sh
# Runs the Go client's tests (client/go) against the real leased, built
# offline in GOPATH mode over Debian's Go packages (/usr/share/gocode):
#
#   go_test.sh [TEST]          compiles and runs one test function (with
#                              no TEST, every one)
#   go_test.sh --build BIN     compiles them into the test binary BIN
#   go_test.sh --run BIN TEST  runs one of BIN's (what meson does: the
#                              package is compiled once, not per test)
#
# Environment: GO_SRC, the package's directory (default client/go: a
# broken copy for tests/clients/go_mutant.py); LEASED_BIN, the daemon; LEASED_TEST_STORE=sqlite|postgres,
# and with postgres LEASED_TEST_POSTGRES (tests/integration/with_postgres.py
# sets it); GO (default: go from PATH); GOCACHE (default: one in the
# temporary directory: give one that lasts, so as to compile gRPC once).
# Fails unless every test that ran passed and at least one did: a test
# skipped (no LEASED_BIN) or a name that matches none fails too.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leased-go-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# check STATUS: fails unless the run (its output in $tmp/out) passed, and
# at least one test ran and passed, and none was skipped.
check() {
    cat "$tmp/out"
    [ "$1" -eq 0 ] || exit "$1"
    if grep -q -- '^--- SKIP' "$tmp/out" || ! grep -q -- '^--- PASS' "$tmp/out"; then
        echo "go_test.sh: no test ran and passed for '${run:-.}' (or one was skipped)" >&2
        exit 1
    fi
}

if [ "${1:-}" = --run ]; then
    : "${LEASED_BIN:?LEASED_BIN is not set (run through meson test)}"
    export LEASED_BIN
    run="^$3\$"
    status=0
    (cd "$tmp" && "$2" -test.count=1 -test.v -test.run "$run") >"$tmp/out" 2>&1 ||
        status=$?
    check "$status"
    exit 0
fi
if [ "${1:-}" = --build ]; then
    out=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
fi

# GOPATH mode wants the package under $GOPATH/src at its import path.
mkdir -p "$tmp/gopath/src/leased" "$tmp/home"
ln -s "${GO_SRC:-$root/client/go}" "$tmp/gopath/src/leased/lease"
export GO111MODULE=off GOPATH="$tmp/gopath:/usr/share/gocode" GOPROXY=off \
    GOFLAGS= HOME="$tmp/home" GOCACHE="${GOCACHE:-$tmp/go-cache}"
cd "$tmp"

if [ "${1:-}" = --build ]; then
    "${GO:-go}" test -c -o "$out" leased/lease
    exit 0
fi

: "${LEASED_BIN:?LEASED_BIN is not set (run through meson test)}"
[ -x "$LEASED_BIN" ] || { echo "no leased at $LEASED_BIN" >&2; exit 1; }
export LEASED_BIN
run=${1:+^$1\$}
status=0
"${GO:-go}" test -count=1 -v -run "${run:-.}" leased/lease >"$tmp/out" 2>&1 ||
    status=$?
check "$status"
