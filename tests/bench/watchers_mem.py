#!/usr/bin/python3
"""What an idle Watch stream costs leased: its memory, and that it takes
no thread. Run by hand (docs/benchmarks.md), never as a timed test.

    LEASED_BIN=build/daemon/leased tests/bench/watchers_mem.py [N]
    LEASED_BIN=build/daemon/leased tests/bench/watchers_mem.py --expiry [N]

On a leased with --ttl 60s, N Watch streams (default 10000), each of a
session of its own, open over 16 connections (a stream holds a stream of
its connection, and --max-streams allows 1024 a connection); once
leased_watch_streams says N, leased's resident memory (VmRSS) and thread
count are read and compared with before. Then 100 of the sessions are
acquired, and each of their watchers must get its GRANTED event, and no
other watcher any. Prints the memory per stream and the threads before
and after.

With --expiry: on a leased with --ttl 1s, N leases (default 50) are
taken one at a time, 37 ms apart (so their expiries fall at every phase
of leased's 250 ms tick), and never renewed; one watcher of them all
notes when each EXPIRED arrives. Prints how late that is after the
lease's expiry (the wall clock of this host, which leased shares):
p50, p90, max.
"""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import harness  # noqa: E402
from harness import Leased  # noqa: E402


def status(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def streams(d):
    return d.metrics()[("leased_watch_streams", ())]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    with Leased(ttl="60s", args=["--metrics-listen", "127.0.0.1:0"]) as d:
        own = [("grpc.use_local_subchannel_pool", 1)]
        clients = [harness.Client(d.channel(options=own), timeout=120.0)
                   for _ in range(16)]
        time.sleep(1)
        rss0, threads0 = status(d.proc.pid, "VmRSS"), \
            status(d.proc.pid, "Threads")
        calls = [clients[k % 16].changes(session="s-%d" % k, timeout=300)
                 for k in range(n)]
        # Each stream's first message (where it starts) is read; then one
        # thread per watched session below waits for its next.
        for call in calls:
            next(call)
        deadline = time.monotonic() + 120
        while streams(d) < n:
            assert time.monotonic() < deadline, streams(d)
            time.sleep(0.1)
        rss1, threads1 = status(d.proc.pid, "VmRSS"), \
            status(d.proc.pid, "Threads")
        picked = range(0, n, max(1, n // 100))
        got = {}

        def read(k):
            got[k] = next(calls[k]).events[0]

        readers = [threading.Thread(target=read, args=(k,)) for k in picked]
        for t in readers:
            t.start()
        for k in picked:
            clients[0].acquire("s-%d" % k, "o")
        for t in readers:
            t.join(60)
        for k in picked:
            ev = got[k]
            assert (ev.lease.session_id, ev.lease.owner) == ("s-%d" % k,
                                                             "o"), (k, ev)
        for call in calls:
            call.cancel()
        print("%d watch streams: VmRSS %d -> %d KiB, %.2f KiB per stream; "
              "threads %d -> %d; %d sessions changed, each watcher told"
              % (n, rss0, rss1, (rss1 - rss0) / n, threads0, threads1,
                 len(picked)))


def expiry(n):
    with Leased(ttl="1s") as d:
        c = d.client()
        call = c.changes(prefix="x-", timeout=120)
        next(call)
        late = []

        def read():
            expiries = {}
            for m in call:
                now = time.time()
                for ev in m.events:
                    l = ev.lease
                    at = l.expiry.seconds + l.expiry.nanos / 1e9
                    if ev.kind == 1:
                        expiries[l.session_id] = at
                    elif ev.kind == 3:
                        late.append(now - expiries[l.session_id])
                if len(late) == n:
                    return

        reader = threading.Thread(target=read)
        reader.start()
        for k in range(n):
            c.acquire("x-%d" % k, "o")
            time.sleep(0.037)
        reader.join(30)
        call.cancel()
        assert len(late) == n, len(late)
        late.sort()
        print("%d expiries told: after the expiry p50 %.0f ms, p90 %.0f ms, "
              "max %.0f ms" % (n, late[n // 2] * 1e3,
                               late[n * 9 // 10] * 1e3, late[-1] * 1e3))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--expiry":
        expiry(int(sys.argv[2]) if len(sys.argv) > 2 else 50)
    else:
        main()
