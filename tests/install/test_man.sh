#!/bin/sh
# The man pages given render with groff without a warning (-ww: a
# misspelt macro, a font or escape groff does not know, a line it cannot
# set). Skips (77) where groff is missing: tools/deps.sh does not
# install it, and Debian's man-db brings it.
set -u
command -v groff >/dev/null || { echo "no groff: skipped"; exit 77; }
status=0
for page in "$@"; do
  if ! out=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || [ -n "$out" ]; then
    printf '%s:\n%s\n' "$page" "$out"
    status=1
  fi
done
exit $status
