#!/bin/sh
# The man pages given render with groff without a warning (-ww: a
# misspelt macro, a font or escape groff does not know, a line it cannot
# set). groff comes from groff-base (tools/deps.sh test).
set -u
command -v groff >/dev/null || { echo "no groff: install groff-base"; exit 1; }
status=0
for page in "$@"; do
  if ! out=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || [ -n "$out" ]; then
    printf '%s:\n%s\n' "$page" "$out"
    status=1
  fi
done
exit $status
