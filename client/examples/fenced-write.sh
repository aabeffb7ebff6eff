#!/bin/sh
# fenced-write.sh FENCE CMD [ARGS...]
#
# Runs CMD under the fence FENCE with the fencing token in $LEASE_TOKEN
# (`leasectl hold` sets it for the command it runs), as liblease's
# lease_fence_enter() does and on the same file, so that shell and C
# writers share one fence (docs/client.md, "Fencing a resource"):
#
#   leasectl hold SESSION -- /bin/sh fenced-write.sh FENCE CMD [ARGS...]
#
# Under flock(1) on FENCE, it reads the highest token recorded there (one
# line of 20 decimal digits; an empty file, just created, is 0; anything
# else is refused, never read as 0). A lower token is stale: a newer
# holder has written, so CMD does not run. A higher one is written over
# the old one in place (the same 21 bytes each time, so the file is never
# short) and synced before CMD runs.
#
# CMD runs with the lock held and inherits it, as with flock(1) without
# -o: a writer holds the fence until it has finished writing, even if
# this script is killed meanwhile. Hold it only for the write.
#
# Exit status: CMD's when it ran; 3 when the token is stale (leasectl's
# code for "held"); 4 when FENCE cannot be used (not a fence file, no
# lock, not writable); 5 when LEASE_TOKEN is not a token; 2 for usage.
# The shell compares tokens up to 2^63 - 1; leased's rise by one with
# each change of owner, so they stay far below. POSIX sh (dash).
set -u
me=fenced-write.sh

not_a_fence() {
    echo "$me: $fence is not a fence file" >&2
    exit 4
}

if [ $# -lt 2 ]; then
    echo "usage: $me FENCE CMD [ARGS...]" >&2
    exit 2
fi
fence=$1
shift
case ${LEASE_TOKEN:-} in
''|0*|*[!0-9]*) # no leading zero: printf would read it as octal
    echo "$me: LEASE_TOKEN is not a token: '${LEASE_TOKEN:-}'" >&2
    exit 5 ;;
esac

# Created if missing (mode 0666 less the umask), never truncated.
command exec 9<>"$fence" || exit 4
flock 9 || exit 4

size=$(wc -c < "$fence") || exit 4
if [ "$size" -eq 0 ]; then
    highest=0
else
    # 21 bytes whose first line is 20 digits: the digits and '\n'.
    if [ "$size" -ne 21 ] || ! IFS= read -r highest < "$fence"; then
        not_a_fence
    fi
    case $highest in *[!0-9]*) not_a_fence ;; esac
    [ ${#highest} -eq 20 ] || not_a_fence
fi

[ "$LEASE_TOKEN" -ge "$highest" ]
case $? in
0) ;;
1)
    shown=${highest#"${highest%%[!0]*}"} # without its leading zeros
    echo "$me: token $LEASE_TOKEN is older than token $shown, which has" \
         "written through $fence" >&2
    exit 3 ;;
*)
    echo "$me: cannot compare token $LEASE_TOKEN with $fence's" >&2
    exit 4 ;;
esac
if [ "$LEASE_TOKEN" -gt "$highest" ]; then
    printf '%020d\n' "$LEASE_TOKEN" 1<>"$fence" || exit 4
    sync "$fence" || exit 4
fi
"$@"
