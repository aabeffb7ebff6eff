#!/bin/sh
# Runs the real leased ($LEASED_REAL_BIN) under valgrind, for tests that
# start "leased" through $LEASED_BIN. Any memory error or leak makes the
# daemon exit 99, which the tests see as an unclean stop.
exec valgrind -q --error-exitcode=99 --leak-check=full \
  --errors-for-leak-kinds=definite,possible \
  --suppressions="$(dirname "$0")/valgrind.supp" "$LEASED_REAL_BIN" "$@"
