#!/usr/bin/env bash
# leased side by side with the lease services users pick instead, on this
# machine, with the same generator (leasebench) and workload model:
#
#   leased     build/daemon/leased, its default durability (every takeover
#              and release fsynced), --ttl 30s
#   leased-pg  the same daemon with --postgres: one replica over a
#              PostgreSQL 15 of its own (Debian's binaries, a new cluster
#              per run: initdb, then postgres on 127.0.0.1), PostgreSQL's
#              default durability (fsync and synchronous_commit on; no
#              standby: a commit is on one disk), --ttl 30s and
#              --postgres-connections 1, what docs/operations.md advises
#              for a replica on its database's host with no standby
#              (--pg-connections N to measure another)
#   leased-pg2 two such replicas over the same database. leasebench takes
#              one address, so two leasebench processes run at once, one
#              per replica, each with half the concurrency and sessions
#              (so two client threads and two connections in all): their
#              ops/s add up, and the table shows the larger of their two
#              p50s, p99s and p999s (the merged percentile is at most
#              that). At concurrency 1 only one runs, against the first
#              replica; in contend, each races for its own few sessions.
#   leased-audit  leased as it runs by default (--log-level info), its
#              audit lines (one per takeover and release) written to a
#              file: what logging them costs
#   null       build/tests/bench/leasebench-null: the same protocol, no
#              storage (the ceiling of the transport)
#   etcd       Debian's etcd-server (3.4), single member, default
#              durability (WAL fsync per raft batch)
#   redis      Debian's redis-server (7.0), default config (no AOF) and no
#              RDB snapshots (--save '')
#   redis-aof  the same with --appendonly yes --appendfsync always (the
#              durable way to use Redis for leases)
#   leased-base, leased-pg-base  leased and leased-pg with the daemon of
#              another build (--base DIR: an earlier commit's), to measure
#              a change against what it changed in the same rounds
#
# Rounds are interleaved: round 1 runs every workload and concurrency
# against every system in turn, then round 2, and so on. Each run gets its
# own server (leased-pg and leased-pg2: their own PostgreSQL and
# replicas), started on 127.0.0.1 with a fresh data directory (removed
# after it), so that no system's leftovers (expiring leases, compaction,
# dead rows) run beside another's measurement. The table shows the
# medians of the rounds, each system's ops/s as a ratio to leased's, as a
# fraction of null's in the same round (when null runs too), and the
# client's CPU (leasebench's, in cores: a row whose client is near
# --threads cores measures the client, not the server).
#
#   tests/bench/compare.sh [--workloads "renew churn"] [--concurrency "1 16 64 256"]
#       [--rounds 3] [--duration 10s] [--warmup 2s] [--sessions 1024]
#       [--connections 1] [--threads 1]   (threads: at most one per call in flight)
#       [--systems "leased leased-audit leased-pg leased-pg2 null etcd redis
#                   redis-aof"]
#       [--pg-connections 1] [--build DIR] [--base DIR] [--out DIR]
#
# Installs etcd-server, redis-server and postgresql-15 (without its
# system cluster) with apt-get when missing (as root). PostgreSQL refuses
# to run as root: then initdb and postgres run as Debian's `postgres`
# user (setpriv). Servers listen on 127.0.0.1 only; all are stopped on
# exit. Data directories live under $TMPDIR (default /tmp): keep it on
# the disk you mean to measure (not a tmpfs).
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
pg_connections=1
threads=1
systems="leased leased-pg leased-pg2 null etcd redis redis-aof"
out=
base_leased=
python=/usr/bin/python3
pgbin=/usr/lib/postgresql/15/bin

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
    --pg-connections) pg_connections=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --base) base_leased=$(cd "$2" && pwd)/daemon/leased; shift 2 ;;
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
    leased-pg|leased-pg2|leased-pg-base)
      [ -x "$pgbin/postgres" ] || need+=(postgresql-15) ;;&
    leased-base|leased-pg-base)
      [ -x "$base_leased" ] ||
        { echo "compare: $sys needs --base DIR (a build of leased)" >&2; exit 2; } ;;
    leased-pg|leased-pg2|leased|leased-audit|null) ;;
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
  # postgresql-15 would create and start a system cluster (15/main) too,
  # unless postgresql-common's createcluster.conf, written before that
  # package comes and kept by ucf, says not to (as tools/deps.sh does).
  if [[ " ${need[*]} " = *" postgresql-15 "* ]] &&
     [ "$(dpkg-query -W -f='${Status}' postgresql-common 2>/dev/null)" != \
       "install ok installed" ]; then
    mkdir -p /etc/postgresql-common
    echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
  fi
  export DEBIAN_FRONTEND=noninteractive UCF_FORCE_CONFFOLD=1
  timeout 600 apt-get update -qq
  timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/leased-compare.XXXXXX")
results=$work/results
mkdir -p "$results"
# The server processes of the run, in the order they started, and the
# signal that stops each; stopped in the opposite order (leased replicas
# before their PostgreSQL).
server_pids=()
server_sigs=()
bench_pids=()

# As root, what PostgreSQL runs as (it refuses root), and the directories
# it needs reachable: $work only traversable by others.
as_postgres=()
if [ "$(id -u)" -eq 0 ]; then
  as_postgres=(--reuid=postgres --regid=postgres --init-groups)
  chmod 711 "$work"
fi
# libpq's variables (PGOPTIONS could turn synchronous_commit off) stay out
# of leased and the PostgreSQL tools: the conninfo says all.
for v in $(compgen -e); do
  case "$v" in PG*) unset "$v" ;; esac
done

stop_server() {
  local i pid
  for ((i = ${#server_pids[@]} - 1; i >= 0; i--)); do
    pid=${server_pids[i]}
    kill -"${server_sigs[i]}" "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  server_pids=()
  server_sigs=()
}

cleanup() {
  local pid
  for pid in "${bench_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
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

# Waits (at most 30 s) until the server (pid $3) answers: gRPC port open
# (leased, null), /health true (etcd), PONG (redis).
wait_ready() {
  "$python" - "$1" "$2" "$3" <<'EOF'
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

# Server process $1 started; signal $2 stops it.
started() {
  server_pids+=("$1")
  server_sigs+=("$2")
}

# A PostgreSQL 15 cluster of its own in $1 (new: initdb), on a free port
# of 127.0.0.1 (and a unix socket in $1), with a database `leased` its
# superuser `leased` owns (trust: loopback only); sets pgconn. Its
# default durability: fsync, synchronous_commit on. initdb's files reach
# the disk before it starts (one syncfs, not initdb's fsync per file:
# 2.5 s less a run). It stops fast on SIGINT, and gets one if this
# script dies without stopping it.
start_postgres() {
  local dir=$1 port pid
  [ ${#as_postgres[@]} -eq 0 ] || chown postgres:postgres "$dir"
  (cd "$dir" && exec setpriv "${as_postgres[@]}" "$pgbin/initdb" \
     -D "$dir/data" -U leased -A trust -E UTF8 --no-locale --no-sync) \
    >>"$dir.log" 2>&1 || server_failed "$dir"
  sync -f "$dir/data"
  port=$(free_ports 1)
  (cd "$dir" && exec setpriv --pdeathsig INT "${as_postgres[@]}" \
     "$pgbin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
     -c listen_addresses=127.0.0.1) >>"$dir.log" 2>&1 &
  pid=$!
  started "$pid" INT
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || server_failed "$dir"
    "$pgbin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    sleep 0.1
  done
  "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U leased leased \
    >>"$dir.log" 2>&1 || server_failed "$dir"
  pgconn="host=127.0.0.1 port=$port user=leased dbname=leased"
}

# Starts system $1 with data under $2; sets urls (one per replica),
# cpu_pids (the processes whose CPU is the server's: for leased-pg the
# replicas, not PostgreSQL) and metrics_url (leased's /metrics, or
# empty).
start_server() {
  local sys=$1 dir=$2 port peer mport
  mkdir -p "$dir"
  urls=()
  cpu_pids=()
  metrics_url=
  case "$sys" in
    leased|leased-audit|leased-base)
      read -r port mport < <(free_ports 2)
      local level=warn bin=$leased
      [ "$sys" = leased-audit ] && level=info
      [ "$sys" = leased-base ] && bin=$base_leased
      "$bin" --listen "127.0.0.1:$port" --data-dir "$dir" --ttl 30s \
        --metrics-listen "127.0.0.1:$mport" \
        --log-level "$level" >"$dir.log" 2>&1 &
      started $! TERM
      cpu_pids=($!)
      metrics_url=http://127.0.0.1:$mport/metrics
      urls=("leased://127.0.0.1:$port")
      wait_ready grpc "$port" "$!" || server_failed "$dir" ;;
    leased-pg|leased-pg2|leased-pg-base)
      start_postgres "$dir"
      local replicas=1 bin=$leased
      [ "$sys" = leased-pg2 ] && replicas=2
      [ "$sys" = leased-pg-base ] && bin=$base_leased
      for _ in $(seq "$replicas"); do
        port=$(free_ports 1)
        "$bin" --listen "127.0.0.1:$port" --postgres "$pgconn" --ttl 30s \
          --postgres-connections "$pg_connections" --log-level warn \
          >>"$dir.log" 2>&1 &
        started $! TERM
        cpu_pids+=($!)
        urls+=("leased://127.0.0.1:$port")
        wait_ready grpc "$port" "$!" || server_failed "$dir"
      done ;;
    null)
      port=$(free_ports 1)
      "$null_server" --listen "127.0.0.1:$port" >"$dir.log" 2>&1 &
      started $! TERM
      cpu_pids=($!)
      urls=("null://127.0.0.1:$port")
      wait_ready grpc "$port" "$!" || server_failed "$dir" ;;
    etcd)
      read -r port peer < <(free_ports 2)
      etcd --name leasebench --data-dir "$dir" \
        --listen-client-urls "http://127.0.0.1:$port" \
        --advertise-client-urls "http://127.0.0.1:$port" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "leasebench=http://127.0.0.1:$peer" \
        --initial-cluster-state new >"$dir.log" 2>&1 &
      started $! TERM
      cpu_pids=($!)
      urls=("etcd://127.0.0.1:$port")
      wait_ready etcd "$port" "$!" || server_failed "$dir" ;;
    redis|redis-aof)
      port=$(free_ports 1)
      local extra=()
      [ "$sys" = redis-aof ] && extra=(--appendonly yes --appendfsync always)
      redis-server --port "$port" --bind 127.0.0.1 --save '' --dir "$dir" \
        --daemonize no "${extra[@]}" >"$dir.log" 2>&1 &
      started $! TERM
      cpu_pids=($!)
      urls=("redis://127.0.0.1:$port")
      wait_ready redis "$port" "$!" || server_failed "$dir" ;;
  esac
}

# The leasebench runs $1.part1.json … $1.part$2.json of one run, against
# the replicas of one database at once, as one result in $1.json: ops and
# ops/s summed, each latency percentile the largest of the parts' (the
# percentile of all calls together lies between the parts' smallest and
# largest). No $1.json when a part gave no result.
merge_parts() {
  "$python" - "$1" "$2" <<'EOF'
import json, sys
base, n = sys.argv[1], int(sys.argv[2])
parts = []
for i in range(1, n + 1):
    with open("%s.part%d.json" % (base, i)) as f:
        parts.append(json.loads(f.read()))
merged = dict(parts[0])
merged["target"] = " ".join(p["target"] for p in parts)
for k in ("sessions", "concurrency", "connections", "threads", "ops",
          "ops_per_sec", "acquire", "renew", "release", "held", "errors",
          "client_cpu"):
    merged[k] = sum(p[k] for p in parts)
for k in ("seconds", "p50_us", "p99_us", "p999_us"):
    merged[k] = max(p[k] for p in parts)
by_status = {}
for p in parts:
    for k, v in p["errors_by_status"].items():
        by_status[k] = by_status.get(k, 0) + v
merged["errors_by_status"] = by_status
merged["parts"] = parts
with open(base + ".json", "w") as f:
    f.write(json.dumps(merged) + "\n")
EOF
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

# What one fdatasync of a small write costs on the data directories'
# disk, at the start of round $1: the floor of a durable commit's
# latency, to read churn at 1 in flight against.
fsync_probe() {
  "$python" - "$work" "$results/fdatasync.$1.json" <<'EOF'
import json, os, statistics, sys, time
path = os.path.join(sys.argv[1], "fdatasync.probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
block, times, end = b"x" * 4096, [], time.monotonic() + 2
try:
    while time.monotonic() < end and len(times) < 5000:
        os.pwrite(fd, block, 4096 * (len(times) % 256))
        t = time.monotonic()
        os.fdatasync(fd)
        times.append(time.monotonic() - t)
finally:
    os.close(fd)
    os.unlink(path)
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"median_us": statistics.median(times) * 1e6,
                        "count": len(times)}) + "\n")
EOF
}

# The CPU the processes $@ used so far, in clock ticks: utime + stime of
# /proc/PID/stat (every thread's), its fields 14 and 15, the 12th and
# 13th after the command's ")" (a command may hold spaces).
cpu_ticks() {
  local pid sum=0 f
  for pid in "$@"; do
    read -ra f < <(sed 's/.*) //' "/proc/$pid/stat")
    sum=$((sum + f[11] + f[12]))
  done
  echo "$sum"
}

# What the server did during run $1 (its leasebench ran from $2 to $3,
# seconds since the epoch, while its processes used $4 clock ticks):
# $1.server.json with its CPU in cores and, for leased, its fsyncs a
# second.
server_report() {
  "$python" - "$1" "$2" "$3" "$4" "$(getconf CLK_TCK)" "$metrics_url" <<'EOF'
import json, sys, urllib.request
base, t0, t1, ticks, hz, url = sys.argv[1:]
seconds = float(t1) - float(t0)
out = {"seconds": seconds, "server_cores": int(ticks) / int(hz) / seconds}
if url:
    with urllib.request.urlopen(url, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("leased_fsync_duration_seconds_count "):
                out["fsyncs_per_sec"] = float(line.split()[1]) / seconds
with open(base + ".server.json", "w") as f:
    f.write(json.dumps(out) + "\n")
EOF
}

n=0
for round in $(seq "$rounds"); do
  fsync_probe "$round" || echo "compare: the fdatasync probe failed" >&2
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
        # One leasebench per replica (leased-pg2), each with its share of
        # the calls in flight and of the sessions; one when there is one
        # call in flight.
        parts=${#urls[@]}
        [ "$conc" -ge "$parts" ] || parts=1
        rc=0
        t0=$(date +%s.%N)
        ticks0=$(cpu_ticks "${cpu_pids[@]}")
        for i in $(seq 0 $((parts - 1))); do
          out_i=$base
          [ "$parts" -eq 1 ] || out_i=$base.part$((i + 1))
          sess_i=("${sess[@]}")
          [ ${#sess[@]} -eq 0 ] || [ "$parts" -eq 1 ] ||
            sess_i=(--sessions $((sessions / parts + (i < sessions % parts))))
          conc_i=$((conc / parts + (i < conc % parts)))
          threads_i=$((threads < conc_i ? threads : conc_i))
          timeout -k 5 "$run_bound" "$leasebench" --target "${urls[i]}" \
            --workload "$workload" "${sess_i[@]}" \
            --concurrency "$conc_i" \
            --connections "$connections" --threads "$threads_i" \
            --duration "$duration" --warmup "$warmup" --json \
            >"$out_i.json" 2>"$out_i.err" &
          bench_pids+=($!)  # waited for in the background: a signal stops it
        done
        for i in "${!bench_pids[@]}"; do
          wait "${bench_pids[i]}" || { r=$?; [ "$rc" -ne 0 ] || rc=$r; }
        done
        bench_pids=()
        ticks=$(($(cpu_ticks "${cpu_pids[@]}") - ticks0))
        server_report "$base" "$t0" "$(date +%s.%N)" "$ticks" ||
          echo "compare: no server report for $base" >&2
        [ "$parts" -eq 1 ] || merge_parts "$base" "$parts" || true
        echo "$rc" >"$base.rc"
        if [ "$rc" -ne 0 ]; then
          echo "compare: leasebench exited $rc:" \
            "$(cat "$base".err "$base".part*.err 2>/dev/null | head -c 300)" >&2
        fi
        stop_server
        [ "$rc" -eq 0 ] || cp "$dir.log" "$base.server.log" 2>/dev/null || true
        rm -rf "$dir" "$dir.log"
      done
    done
  done
done

"$python" - "$results" "$systems" "$workloads" "$concurrency" "$rounds" \
  "$duration" "$warmup" "$sessions" "$connections" "$threads" \
  "$pg_connections" <<'EOF'
import json, os, platform, statistics, subprocess, sys

(results, systems, workloads, concs, rounds, duration, warmup, sessions,
 connections, threads, pg_connections) = sys.argv[1:]
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
if {"leased-pg", "leased-pg2", "leased-pg-base"} & set(systems):
    print("postgres: " + version(["/usr/lib/postgresql/15/bin/postgres",
                                  "--version"]))
probes = []
for r in range(1, int(rounds) + 1):
    try:
        with open(os.path.join(results, "fdatasync.%d.json" % r)) as f:
            probes.append(json.loads(f.read())["median_us"])
    except (OSError, ValueError, KeyError):
        pass
if probes:
    print("fdatasync of 4 KiB in the data directory: median %.0f µs (each "
          "round's median: %s)" % (statistics.median(probes),
                                  ", ".join("%.0f" % p for p in probes)))
print("runs: %s rounds interleaved, --duration %s --warmup %s --sessions %s "
      "(contend: leasebench's default) --connections %s --threads %s; "
      "medians of the rounds" % (rounds, duration, warmup, sessions,
                                 connections, threads))
print()

def load(s, w, c, r):
    base = os.path.join(results, "%s.%s.%s.%d" % (s, w, c, r))
    try:
        with open(base + ".json") as f:
            j = json.loads(f.read())
    except (OSError, ValueError):
        return None
    # The server's side of the run: its CPU over the whole run (warm-up
    # included) per call at the measured rate, and leased's fsyncs.
    try:
        with open(base + ".server.json") as f:
            srv = json.loads(f.read())
    except (OSError, ValueError):
        srv = {}
    cores = srv.get("server_cores")
    j["server_cpu"] = cores if cores is not None else float("nan")
    j["us_per_call"] = (cores * 1e6 / j["ops_per_sec"]
                        if cores is not None and j["ops_per_sec"] > 0
                        else float("nan"))
    j["fsyncs_per_sec"] = srv.get("fsyncs_per_sec", float("nan"))
    return j


rows = []
for w in workloads:
    for c in concs:
        med = {}
        for s in systems:
            runs, errors, failed, of_null = [], 0, 0, []
            for r in range(1, int(rounds) + 1):
                j = load(s, w, c, r)
                if j is None:
                    failed += 1
                    continue
                errors += j["errors"]
                runs.append(j)
                # Against null's run of the same round: the machine's
                # state is the closest it gets.
                n = load("null", w, c, r) if "null" in systems else None
                if n is not None and n["ops_per_sec"] > 0:
                    of_null.append(j["ops_per_sec"] / n["ops_per_sec"])
            med[s] = ({k: statistics.median(j[k] for j in runs)
                       for k in ("ops_per_sec", "p50_us", "p99_us",
                                 "p999_us", "client_cpu", "server_cpu",
                                 "us_per_call", "fsyncs_per_sec")}
                      if runs else None)
            if med[s] is not None:
                med[s]["of_null"] = (statistics.median(of_null)
                                     if of_null else None)
            rows.append((s, w, c, med, errors, failed))

head = ("system", "workload", "conc", "ops/s", "p50 µs", "p99 µs",
        "p999 µs", "errors", "vs leased", "of null", "client", "server",
        "µs/call", "fsync/s")
fmt = "%-14s %-8s %5s %9s %9s %9s %9s %8s %10s %8s %7s %7s %8s %8s"


def num(x, f):
    return "-" if x != x else f % x  # NaN: not measured


print(fmt % head)
for s, w, c, med, errors, failed in rows:
    m, base = med[s], med.get("leased")
    err = str(errors) + ("+%d failed" % failed if failed else "")
    if m is None:
        print(fmt % ((s, w, c, "-", "-", "-", "-", err) + ("-",) * 6))
        continue
    ratio = ("%.2f" % (m["ops_per_sec"] / base["ops_per_sec"])
             if base and base["ops_per_sec"] > 0 else "-")
    of_null = "%.2f" % m["of_null"] if m["of_null"] is not None else "-"
    print(fmt % (s, w, c, "%.0f" % m["ops_per_sec"], "%.0f" % m["p50_us"],
                 "%.0f" % m["p99_us"], "%.0f" % m["p999_us"], err, ratio,
                 of_null, "%.2f" % m["client_cpu"],
                 num(m["server_cpu"], "%.2f"), num(m["us_per_call"], "%.1f"),
                 num(m["fsyncs_per_sec"], "%.0f")))
print()
print("errors: failed operations summed over the rounds (+N failed: runs "
      "that gave no result); vs leased: median ops/s over leased's; of "
      "null: the median over the rounds of ops/s over null's in the same "
      "round; client: leasebench's CPU, in cores (median), to tell a "
      "client-bound row (near --threads) from a server-bound one; server: "
      "the server's CPU in cores over the run, warm-up included (leased-pg: "
      "the replicas', not PostgreSQL's); µs/call: that CPU per call at the "
      "measured rate; fsync/s: leased's fsyncs a second (its "
      "leased_fsync_duration_seconds_count over the run).")
print("redis: default config, no persistence (--save ''); redis-aof: "
      "--appendonly yes --appendfsync always.")
if {"leased-pg", "leased-pg2", "leased-pg-base"} & set(systems):
    print("leased-pg: one replica over a local PostgreSQL (fsync, "
          "synchronous_commit on), --postgres-connections %s; leased-pg2: "
          "two replicas over it, one leasebench per replica with half the "
          "calls in flight (one at conc 1): ops/s summed, percentiles the "
          "larger of the two." % pg_connections)
EOF
