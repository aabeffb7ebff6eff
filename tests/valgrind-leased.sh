#!/bin/sh
# Runs the real leased ($LEASED_REAL_BIN) under valgrind, for tests that
# start "leased" through $LEASED_BIN. Any memory error or definite leak
# makes the daemon exit 99, which the tests see as an unclean stop.
#
# "Possibly lost" blocks are not errors here: at exit gRPC can still hold
# a few of its own objects through interior pointers (status objects of a
# connection being torn down, its threads' thread-local blocks), now and
# then, whatever the daemon does. leased's own
# allocations are freed outright, so a leak of ours shows as definite.
exec valgrind -q --error-exitcode=99 --leak-check=full \
  --errors-for-leak-kinds=definite \
  --suppressions="$(dirname "$0")/valgrind.supp" "$LEASED_REAL_BIN" "$@"
