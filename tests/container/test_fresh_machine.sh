#!/usr/bin/env bash
# A fresh machine, as a newcomer meets it: README's two commands on a
# minimal Debian 12 with nothing but git installed first. In a throwaway
# container started from the debootstrap'd base image (podman.sh), as
# root, with a network namespace of its own (so 7443 is its own port):
#
#   1. apt-get install git, then `git clone` of SOURCE_DIR: its HEAD, or,
#      when the working tree has changes, a commit of the working tree
#      (what `git add -A` would commit) made without touching SOURCE_DIR's
#      tree, index or refs;
#   2. `tools/run.sh` exactly as README says, in the background; leased
#      must log `msg=listening`, then `build/client/leasectl acquire job-1`
#      must succeed with token 1;
#   3. `tools/deps.sh test`, the Node client's packages (npm ci), then
#      the unit suite in `build` with the tests configured on.
#
# So a package missing from tools/deps.sh (either profile) fails here, not
# on a user's machine.
#
#   tests/container/test_fresh_machine.sh SOURCE_DIR WORK_DIR [--full]
#
# With --full (by hand: it takes as long as the test command), step 3 is
# README's test command itself, `tests/run.sh`, which must end
# "N passed, 0 failed" (the container suite inside skips: no nested
# podman there).
#
# WORK_DIR is shared with test_container.sh (podman's storage, the base
# image). The host's /var/cache/apt/archives is offered to the container,
# read-only, as a cache of .deb files, and what the container downloads
# besides is kept in WORK_DIR/apt-archives for the next run: the
# machine's packages are the same, only downloads are saved. The container
# has CAP_SYS_ADMIN: the unit suite's install test mounts a tmpfs and an
# overlay in a mount namespace of its own, with the overlay's upper
# directory in /tmp, which is therefore a tmpfs (an overlay cannot have
# its upper directory on the container's own overlayfs). Skips (exit 77)
# where podman cannot run a container with a network of its own.
set -euo pipefail

src=$(cd "$1" && pwd)
full=${3:-}
# shellcheck source=tests/container/podman.sh
. "$(dirname "$0")/podman.sh"
podman_init fresh-machine "$2" bridge
command -v git >/dev/null || podman_skip "needs git, to clone $src"
git -c safe.directory='*' -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
  podman_skip "$src is not a git checkout"

fresh=$work/fresh
name=leased-fresh-$$
# Containers left by runs that were killed (their shell is gone).
for c in $(podman ps -a --format '{{.Names}}' --filter name='^leased-fresh-'); do
  kill -0 "${c##*-}" 2>/dev/null || podman rm -f -t 0 "$c" >/dev/null 2>&1 || true
done
podman_base_image
say() { echo "fresh-machine: $* (${SECONDS} s)"; }
# fail WHY [LOG]: the reason, and the end of the log that shows it.
fail() {
  echo "fresh-machine: FAIL: $1"
  if [ -n "${2:-}" ] && [ -f "$fresh/$2" ]; then
    echo "--- the end of $2"
    tail -n 40 "$fresh/$2"
  fi
  exit 1
}

# The repository as it would be committed now, in a bare clone of its own.
git_src() { git -c safe.directory='*' -C "$src" "$@"; }
rm -rf "$fresh"
mkdir -p "$fresh/logs" "$work/apt-archives"
git -c safe.directory='*' clone -q --bare --no-hardlinks "$src" \
  "$fresh/leased.git"
head=$(git_src rev-parse --short HEAD)
snapshot() {
  GIT_INDEX_FILE=$fresh/index GIT_OBJECT_DIRECTORY=$fresh/leased.git/objects \
    GIT_AUTHOR_NAME=fresh-machine GIT_AUTHOR_EMAIL=fresh-machine@localhost \
    GIT_COMMITTER_NAME=fresh-machine GIT_COMMITTER_EMAIL=fresh-machine@localhost \
    git_src "$@"
}
snapshot read-tree HEAD
snapshot add -A
tree=$(snapshot write-tree)
if [ "$tree" = "$(git_src rev-parse 'HEAD^{tree}')" ]; then
  say "cloning HEAD $head (no uncommitted changes)"
else
  changed=$(snapshot diff --cached --name-only HEAD | wc -l)
  commit=$(snapshot commit-tree -p HEAD -m "working tree of $src" "$tree")
  git -C "$fresh/leased.git" update-ref HEAD "$commit"
  say "cloning the working tree: HEAD $head and uncommitted changes (files: $changed)"
fi

cleanup() { podman rm -f -t 0 "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cache=()
[ ! -d /var/cache/apt/archives ] ||
  cache=(-v /var/cache/apt/archives:/host-archives:ro)
# The CA certificates this host trusts beyond Debian's (here, those of a
# TLS-inspecting proxy to the npm registry) are the network's, not the
# machine's: offered to the container, where the ca-certificates package
# picks them up when tools/deps.sh installs it. The whole test command
# (--full) also needs what root has on a machine of its own: ptrace (its
# tests delay fsyncs with strace) and the network (README's tour runs in
# a network namespace of its own).
extra=(--cap-add SYS_ADMIN)
[ "$full" != --full ] ||
  extra+=(--cap-add SYS_PTRACE --cap-add NET_ADMIN
          --security-opt seccomp=unconfined)
[ ! -d /usr/local/share/ca-certificates ] ||
  extra+=(-v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro)
timeout 120 podman run -d --name "$name" "${extra[@]}" --network=bridge \
  --tmpfs /tmp:rw,exec,mode=1777 \
  -v "$fresh/leased.git:/srv/leased.git:ro" \
  -v "$fresh/logs:/var/log/fresh" \
  "${cache[@]}" -v "$work/apt-archives:/var/cache/apt/archives" \
  docker.io/library/debian:bookworm sleep infinity >/dev/null 2>"$fresh/podman.log" ||
  fail "cannot start the container" podman.log

# step LOG SECONDS SCRIPT: SCRIPT run by bash in the container, in /root
# (the clone is /root/leased); its output in WORK_DIR/fresh/LOG.
step() {
  timeout "$2" podman exec -w /root "$name" bash -euo pipefail -c "$3" \
    >"$fresh/$1" 2>&1
}

# 1. git, and the clone.
step git.log 600 '
  # The .deb cache (see the top), and dpkg without fsync, as in the
  # Debian images for Docker: what gets installed is the same, only faster.
  find /var/cache/apt/archives -maxdepth 1 -type l -delete
  ln -s /host-archives/*.deb /var/cache/apt/archives/ 2>/dev/null || true
  echo force-unsafe-io >/etc/dpkg/dpkg.cfg.d/fresh-machine-unsafe-io
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends git
  git clone -q /srv/leased.git leased' ||
  fail "installing git and cloning" git.log
say "git installed, repository cloned"

# 2. The run command, as README gives it.
timeout 60 podman exec -d -w /root/leased "$name" bash -c '
  tools/run.sh >/var/log/fresh/run.log 2>&1 &
  echo $! >/var/log/fresh/run.pid
  wait $!
  echo $? >/var/log/fresh/run.exit' >/dev/null
say "tools/run.sh started"
deadline=$((SECONDS + 900))
until grep -q 'msg=listening' "$fresh/logs/run.log" 2>/dev/null; do
  [ ! -f "$fresh/logs/run.exit" ] ||
    fail "tools/run.sh exited ($(cat "$fresh/logs/run.exit")) before leased listened" logs/run.log
  [ "$SECONDS" -lt "$deadline" ] ||
    fail "leased not listening 900 s after tools/run.sh started" logs/run.log
  sleep 1
done
say "leased listening: $(grep -m1 'msg=listening' "$fresh/logs/run.log")"
step leasectl.log 60 'cd leased && build/client/leasectl acquire job-1' ||
  fail "build/client/leasectl acquire job-1" leasectl.log
grep -Eq '(^|[[:space:]])token 1([[:space:]]|$)' "$fresh/leasectl.log" ||
  fail "leasectl acquire job-1: no token 1" leasectl.log
say "leasectl acquire job-1: $(head -n1 "$fresh/leasectl.log")"
# The run command installed only what it needs: none of the tests' tools.
step run-profile.log 60 '
  for p in go node valgrind clang systemd-analyze; do
    ! command -v $p || { echo "tools/run.sh installed $p"; exit 1; }
  done' || fail "the run profile is not minimal" run-profile.log
# SIGTERM: leased drains and exits; the build directory is free again.
timeout 60 podman exec "$name" sh -c 'kill "$(cat /var/log/fresh/run.pid)"'
for _ in $(seq 30); do
  [ -f "$fresh/logs/run.exit" ] && break
  sleep 0.5
done
[ -f "$fresh/logs/run.exit" ] || fail "leased did not stop on SIGTERM" logs/run.log
say "leased stopped on SIGTERM (exit status $(cat "$fresh/logs/run.exit"))"

# 3. The rest of the packages, and the unit suite. Only what the unit
# suite needs is compiled, and what `meson install` installs (the install
# test installs the build): not the Go and Node interop clients.
if [ "$full" = --full ]; then
  step full.log 5400 'cd leased && tests/run.sh' ||
    fail "tests/run.sh" full.log
  tail -n1 "$fresh/full.log" | grep -Eq '^[0-9]+ passed, 0 failed$' ||
    fail "tests/run.sh did not end with N passed, 0 failed" full.log
  say "tests/run.sh: $(tail -n1 "$fresh/full.log")"
  cleanup
  say ok
  exit 0
fi
step deps-test.log 1200 'cd leased && tools/deps.sh test' ||
  fail "tools/deps.sh test" deps-test.log
say "tools/deps.sh test done"
# The test command's first step after the packages: the Node client's.
step npm.log 600 'cd leased && tests/interop/node/install.sh' ||
  fail "tests/interop/node/install.sh" npm.log
say "the Node client's packages installed"
step unit.log 1200 '
  cd leased
  if [ -f build/build.ninja ]; then
    meson configure build -Dtests=true -Dwerror=true
  else
    meson setup build -Dtests=true -Dwerror=true
  fi
  meson introspect build --targets | python3 -c "
import json, os, sys
for t in json.load(sys.stdin):
    if t[\"installed\"]:
        for f in t[\"filename\"]:
            print(os.path.relpath(f, os.path.abspath(\"build\")))
" >/tmp/installed-targets
  ninja -C build $(cat /tmp/installed-targets)
  meson test -C build --suite unit --print-errorlogs' ||
  fail "the unit suite" unit.log
say "unit suite: $(grep -E '^(Ok|Skipped):' "$fresh/unit.log" | tr -s ' \n' ' ')"
cleanup
say ok
