#!/bin/sh
# The layering of the source tree, which include paths enforce for plain
# includes and this test for every other spelling ("../daemon/log.h"):
#   core/     includes nothing of ours outside core/
#   storage/  core/ and itself
#   client/   core/ and itself (and the generated protobuf-c headers)
#   daemon/   core/, storage/ and itself; never client/
# Usage: test_layout.sh SOURCE_ROOT
set -eu
cd "$1"
status=0

# headers DIR: the basenames of the headers in DIR and below.
headers() { find "$1" -name '*.h' -exec basename {} \; | sort -u; }

# refuse DIR OTHER: fails for each file in DIR that includes a header of
# OTHER (by name, or by a path through OTHER/).
refuse() {
  for h in $(headers "$2"); do
    # A name that both directories have is DIR's own.
    [ -n "$(find "$1" -name "$h")" ] && continue
    hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]*/)?$h\"" \
      "$1" --include='*.c' --include='*.h' || true)
    if [ -n "$hits" ]; then
      echo "$1/ must not include $2/'s $h:"
      echo "$hits"
      status=1
    fi
  done
  hits=$(grep -rnE "#[[:space:]]*include[[:space:]]*\"[^\"]*\\b$2/" "$1" \
    --include='*.c' --include='*.h' || true)
  if [ -n "$hits" ]; then
    echo "$1/ must not include files of $2/:"
    echo "$hits"
    status=1
  fi
}

for other in storage client daemon; do refuse core "$other"; done
for other in client daemon; do refuse storage "$other"; done
for other in storage daemon; do refuse client "$other"; done
refuse daemon client
[ $status -eq 0 ] && echo "layout: core <- storage <- daemon; core <- client"
exit $status
