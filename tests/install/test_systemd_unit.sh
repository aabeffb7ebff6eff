#!/usr/bin/env bash
# docs/leased.service: `systemd-analyze verify` has nothing to say about
# it, its sandbox scores as exposed as `systemd-analyze security` allows
# for "OK" (at most 2.0 of 10), and it carries each hardening the
# operators' checklist names. verify needs the ExecStart binary to exist,
# so a copy of the unit points it at the built leased instead.
#
#   tests/install/test_systemd_unit.sh SOURCE_DIR LEASED_BIN
set -euo pipefail

unit=$1/docs/leased.service
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|^ExecStart=/usr/local/bin/leased|ExecStart=$2|" "$unit" >"$tmp/leased.service"
grep -q "^ExecStart=$2 " "$tmp/leased.service"

out=$(systemd-analyze verify "$tmp/leased.service" 2>&1) ||
  { echo "verify failed: $out"; exit 1; }
[ -z "$out" ] || { echo "verify said: $out"; exit 1; }

for want in NoNewPrivileges=yes ProtectSystem=strict \
            ReadWritePaths=/var/lib/leased PrivateTmp=yes PrivateDevices=yes \
            ProtectKernelTunables=yes ProtectKernelModules=yes \
            ProtectKernelLogs=yes RestrictAddressFamilies= \
            'CapabilityBoundingSet=$' SystemCallFilter=@system-service; do
  grep -q "^$want" "$unit" || { echo "missing $want"; exit 1; }
done

level=$(systemd-analyze security --offline=true "$tmp/leased.service" 2>&1 |
        sed -n 's/.*Overall exposure level for leased.service: \([0-9.]*\).*/\1/p')
[ -n "$level" ] || { echo "no exposure level"; exit 1; }
awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }' ||
  { echo "exposure $level > 2.0"; exit 1; }
echo "ok: verify clean, exposure $level"
