#!/bin/sh
# Builds tests/faults/holder_go (the holders' campaign's Go holder) into
# OUT, offline in GOPATH mode over Debian's Go packages, against
# client/go, or with --uncapped against a copy of it broken as the
# campaign's go_keeper_uncapped control says: no watchdog, renewals not
# cut short at the deadline, Valid true until the lease is lost.
#
#   build_holder_go.sh [--uncapped] OUT
#
# Environment: GO (default: go from PATH), GOCACHE.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
uncapped=false
if [ "$1" = --uncapped ]; then
    uncapped=true
    shift
fi
out=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/leased-holder-go.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

mkdir -p "$tmp/gopath/src/leased" "$tmp/gopath/src/holder_go" "$tmp/home"
cp "$root/tests/faults/holder_go/main.go" "$tmp/gopath/src/holder_go/"
if $uncapped; then
    cp -r "$root/client/go" "$tmp/gopath/src/leased/lease"
    /usr/bin/python3 - "$tmp/gopath/src/leased/lease/keeper.go" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
for old, new in (
        ("time.AfterFunc(time.Until(k.deadline), k.watch)",
         "time.AfterFunc(time.Hour, k.watch)"),
        ("context.WithDeadline(k.ctx, end)", "context.WithCancel(k.ctx)"),
        ("return !k.lost && !k.stopped && time.Now().Before(k.deadline)",
         "return !k.lost && !k.stopped")):
    if text.count(old) != 1:
        sys.exit("build_holder_go.sh: stale edit %r: keeper.go changed" % old)
    text = text.replace(old, new)
open(path, "w").write(text)
PY
else
    ln -s "$root/client/go" "$tmp/gopath/src/leased/lease"
fi
export GO111MODULE=off GOPATH="$tmp/gopath:/usr/share/gocode" GOPROXY=off \
    GOFLAGS= HOME="$tmp/home" GOCACHE="${GOCACHE:-$tmp/go-cache}"
cd "$tmp/gopath/src/holder_go"
"${GO:-go}" build -o "$out" .
