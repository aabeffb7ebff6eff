#!/bin/sh
# Fuzzes one libFuzzer target for a bounded time: the fuzzer build's test
# of it (tests/fuzz/meson.build).
#
#   run_fuzzer.sh FUZZER CORPUS WORKDIR SECONDS
#
# It starts from a copy of CORPUS in WORKDIR/corpus, so that the inputs
# libFuzzer adds never land in the committed corpus, and exits non-zero
# on any crash, leak, timeout or running out of memory (libFuzzer's own
# exit status). The input that did it is kept as WORKDIR/crash-… (or
# leak-…, timeout-…, oom-…).
set -eu
fuzzer=$1 corpus=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$corpus"/* "$work/corpus/" # fails when the corpus is missing or empty
# -close_fd_mask=1: what the targets print (fuzz_config's --help) would
# flood the log; libFuzzer reports on stderr. -error_exitcode and
# -timeout_exitcode: libFuzzer's defaults (77, 70) include 77, which
# meson counts as a skip, not a failure.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -close_fd_mask=1 \
  -error_exitcode=1 -timeout_exitcode=1 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus"
