#!/usr/bin/env bash
# leased side by side with the lease services users pick instead, on this
# machine, with the same generator (leasebench) and workload model:
#
#   leased     build/daemon/leased, its default durability (every takeover
#              and release fsynced), --ttl 30s
#   null       build/tests/bench/leasebench-null: the same protocol, no
#              storage (the ceiling of the transport)
#   etcd       Debian's etcd-server (3.4), single member, default
#              durability (WAL fsync per raft batch)
#   redis      Debian's redis-server (7.0), default config (no AOF) and no
#              RDB snapshots (--save '')
#   redis-aof  the same with --appendonly yes --appendfsync always (the
#              durable way to use Redis for leases)
#
# Rounds are interleaved: round 1 runs every workload and concurrency
# against every system in turn, then round 2, and so on. Each run gets its
# own server, started on 127.0.0.1 with a fresh data directory (removed
# after it), so that no system's leftovers (expiring leases, compaction)
# run beside another's measurement. The table shows the medians of the
# rounds and each system's ops/s as a ratio to leased's.
#
#   tests/bench/compare.sh [--workloads "renew churn"] [--concurrency "1 16 64 256"]
#       [--rounds 3] [--duration 10s] [--warmup 2s] [--sessions 1024]
#       [--connections 1] [--threads 1] [--systems "leased null etcd redis redis-aof"]
#       [--build DIR] [--out DIR]
#
# Installs etcd-server and redis-server with apt-get when missing (as
# root). Servers listen on 127.0.0.1 only; all are killed on exit. Data
# directories live under $TMPDIR (default /tmp): keep it on the disk you
# mean to measure (not a tmpfs).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
workloads="renew churn"
concurrency="1 16 64 256"
rounds=3
duration=10s
warmup=2s
sessions=1024
connections=1
threads=1
systems="leased null etcd redis redis-aof"
out=
python=/usr/bin/python3

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
  exit "${1:-2}"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --workloads) workloads=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "compare: unknown argument $1" >&2; usage ;;
  esac
done

leased=$build/daemon/leased
leasebench=$build/tests/bench/leasebench
null_server=$build/tests/bench/leasebench-null
for f in "$leased" "$leasebench" "$null_server"; do
  [ -x "$f" ] || { echo "compare: $f missing; build first (ninja -C $build)" >&2; exit 1; }
done
[ -x "$python" ] || { echo "compare: $python missing" >&2; exit 1; }

# Seconds of a duration like 10s, 500ms, 1m (for the time bounds).
seconds() {
  "$python" -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)(ms|s|m|)", sys.argv[1])
if not m: sys.exit("compare: bad duration " + sys.argv[1])
v = float(m.group(1)) * {"ms": 0.001, "s": 1, "": 1, "m": 60}[m.group(2)]
print(int(v + 0.999))' "$1"
}
run_bound=$(( $(seconds "$duration") + $(seconds "$warmup") + 120 ))

# The peers, from Debian, when missing.
need=()
for sys in $systems; do
  case "$sys" in
    etcd) command -v etcd >/dev/null || need+=(etcd-server) ;;
    redis|redis-aof) command -v redis-server >/dev/null || need+=(redis-server) ;;
    leased|null) ;;
    *) echo "compare: unknown system $sys" >&2; exit 2 ;;
  esac
done
if [ ${#need[@]} -gt 0 ]; then
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  if [ "$(id -u)" -ne 0 ]; then
    echo "compare: missing ${need[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "compare: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  timeout 600 apt-get update -qq
  timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/leased-compare.XXXXXX")
results=$work/results
mkdir -p "$results"
server_pid=
bench_pid=

stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}

cleanup() {
  if [ -n "$bench_pid" ]; then
    kill -TERM "$bench_pid" 2>/dev/null || true
    wait "$bench_pid" 2>/dev/null || true
  fi
  stop_server
  if [ -n "$out" ]; then
    mkdir -p "$out"
    cp -r "$results" "$out"/ 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free TCP port on 127.0.0.1 (two for etcd: client and peer).
free_ports() {
  "$python" -c '
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# Waits (at most 30 s) until the server answers: gRPC port open (leased,
# null), /health true (etcd), PONG (redis).
wait_ready() {
  "$python" - "$1" "$2" "$server_pid" <<'EOF'
import os, socket, sys, time, urllib.request
kind, port, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
until = time.monotonic() + 30
while time.monotonic() < until:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("compare: the %s server exited" % kind)
    try:
        if kind == "etcd":
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port,
                                        timeout=2) as r:
                if b'"true"' in r.read():
                    sys.exit(0)
        elif kind == "redis":
            with socket.create_connection(("127.0.0.1", port), 2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    sys.exit(0)
        else:
            socket.create_connection(("127.0.0.1", port), 2).close()
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit("compare: the %s server did not answer on port %d in 30 s" % (kind, port))
EOF
}

server_failed() {
  echo "compare: its log ($1.log) ends:" >&2
  tail -n 20 "$1.log" >&2 || true
  exit 1
}

# Starts system $1 with data under $2; sets server_pid and url.
start_server() {
  local sys=$1 dir=$2 port peer
  mkdir -p "$dir"
  case "$sys" in
    leased)
      port=$(free_ports 1)
      "$leased" --listen "127.0.0.1:$port" --data-dir "$dir" --ttl 30s \
        --log-level warn >"$dir.log" 2>&1 &
      server_pid=$!
      url=leased://127.0.0.1:$port
      wait_ready grpc "$port" || server_failed "$dir" ;;
    null)
      port=$(free_ports 1)
      "$null_server" --listen "127.0.0.1:$port" >"$dir.log" 2>&1 &
      server_pid=$!
      url=null://127.0.0.1:$port
      wait_ready grpc "$port" || server_failed "$dir" ;;
    etcd)
      read -r port peer < <(free_ports 2)
      etcd --name leasebench --data-dir "$dir" \
        --listen-client-urls "http://127.0.0.1:$port" \
        --advertise-client-urls "http://127.0.0.1:$port" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "leasebench=http://127.0.0.1:$peer" \
        --initial-cluster-state new >"$dir.log" 2>&1 &
      server_pid=$!
      url=etcd://127.0.0.1:$port
      wait_ready etcd "$port" || server_failed "$dir" ;;
    redis|redis-aof)
      port=$(free_ports 1)
      local extra=()
      [ "$sys" = redis-aof ] && extra=(--appendonly yes --appendfsync always)
      redis-server --port "$port" --bind 127.0.0.1 --save '' --dir "$dir" \
        --daemonize no "${extra[@]}" >"$dir.log" 2>&1 &
      server_pid=$!
      url=redis://127.0.0.1:$port
      wait_ready redis "$port" || server_failed "$dir" ;;
  esac
}

total=0
for _ in $(seq "$rounds"); do
  for _ in $workloads; do
    for _ in $concurrency; do
      for _ in $systems; do total=$((total + 1)); done
    done
  done
done
echo "compare: $total runs of $warmup + $duration each" >&2

n=0
for round in $(seq "$rounds"); do
  for workload in $workloads; do
    for conc in $concurrency; do
      for sys in $systems; do
        n=$((n + 1))
        dir=$work/data-$sys
        start_server "$sys" "$dir"
        # contend races for leasebench's few default sessions.
        sess=()
        [ "$workload" = contend ] || sess=(--sessions "$sessions")
        base=$results/$sys.$workload.$conc.$round
        echo "compare: [$n/$total] round $round $workload c=$conc $sys" >&2
        rc=0
        timeout -k 5 "$run_bound" "$leasebench" --target "$url" \
          --workload "$workload" "${sess[@]}" --concurrency "$conc" \
          --connections "$connections" --threads "$threads" \
          --duration "$duration" --warmup "$warmup" --json \
          >"$base.json" 2>"$base.err" &
        bench_pid=$!  # waited for in the background: a signal stops it
        wait "$bench_pid" || rc=$?
        bench_pid=
        echo "$rc" >"$base.rc"
        if [ "$rc" -ne 0 ]; then
          echo "compare: leasebench exited $rc: $(head -c 300 "$base.err")" >&2
        fi
        stop_server
        [ "$rc" -eq 0 ] || cp "$dir.log" "$base.server.log" 2>/dev/null || true
        rm -rf "$dir" "$dir.log"
      done
    done
  done
done

"$python" - "$results" "$systems" "$workloads" "$concurrency" "$rounds" \
  "$duration" "$warmup" "$sessions" "$connections" "$threads" <<'EOF'
import json, os, platform, statistics, subprocess, sys

(results, systems, workloads, concs, rounds, duration, warmup, sessions,
 connections, threads) = sys.argv[1:]
systems, workloads, concs = systems.split(), workloads.split(), concs.split()


def version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return out.stdout.split("\n")[0].strip()
    except OSError:
        return "?"


cpu = "?"
try:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
except OSError:
    pass
print("machine: %s, %d CPUs, Linux %s" % (cpu, os.cpu_count() or 0,
                                          platform.release()))
if "etcd" in systems:
    print("etcd: " + version(["etcd", "--version"]))
if "redis" in systems or "redis-aof" in systems:
    print("redis: " + version(["redis-server", "--version"]))
print("runs: %s rounds interleaved, --duration %s --warmup %s --sessions %s "
      "(contend: leasebench's default) --connections %s --threads %s; "
      "medians of the rounds" % (rounds, duration, warmup, sessions,
                                 connections, threads))
print()

rows = []
for w in workloads:
    for c in concs:
        med = {}
        for s in systems:
            runs, errors, failed = [], 0, 0
            for r in range(1, int(rounds) + 1):
                base = os.path.join(results, "%s.%s.%s.%d" % (s, w, c, r))
                try:
                    with open(base + ".json") as f:
                        j = json.loads(f.read())
                    errors += j["errors"]
                    runs.append(j)
                except (OSError, ValueError, KeyError):
                    failed += 1
            med[s] = {k: statistics.median(j[k] for j in runs)
                      for k in ("ops_per_sec", "p50_us", "p99_us",
                                "p999_us")} if runs else None
            rows.append((s, w, c, med, errors, failed))

head = ("system", "workload", "conc", "ops/s", "p50 µs", "p99 µs",
        "p999 µs", "errors", "vs leased")
fmt = "%-10s %-8s %5s %9s %9s %9s %9s %8s %10s"
print(fmt % head)
for s, w, c, med, errors, failed in rows:
    m, base = med[s], med.get("leased")
    err = str(errors) + ("+%d failed" % failed if failed else "")
    if m is None:
        print(fmt % (s, w, c, "-", "-", "-", "-", err, "-"))
        continue
    ratio = ("%.2f" % (m["ops_per_sec"] / base["ops_per_sec"])
             if base and base["ops_per_sec"] > 0 else "-")
    print(fmt % (s, w, c, "%.0f" % m["ops_per_sec"], "%.0f" % m["p50_us"],
                 "%.0f" % m["p99_us"], "%.0f" % m["p999_us"], err, ratio))
print()
print("errors: failed operations summed over the rounds (+N failed: runs "
      "that gave no result); vs leased: median ops/s over leased's.")
print("redis: default config, no persistence (--save ''); redis-aof: "
      "--appendonly yes --appendfsync always.")
EOF
