#!/usr/bin/python3
"""What an idle Wait costs leased: its memory, and that it takes no
thread. Run by hand (docs/benchmarks.md), never as a timed test.

    LEASED_BIN=build/daemon/leased tests/bench/waiters_mem.py [N] [LINES]

On a leased with --ttl 60s, LINES sessions (default 1000) are held, then
N Waits (default 10000) join their lines, spread evenly, over 16
connections (a waiting call holds a stream of its connection, and
--max-streams allows 1024 a connection); once leased_waiting_calls says N, leased's resident memory
(VmRSS) and thread count are read and compared with before. Then every
holder releases, and one waiter of each line must be granted: the first
to reach leased (calls on different connections reach it in no set
order).
Prints the memory per waiting call and the threads before and after.
"""
import os
import sys
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


def waiting(d):
    return d.metrics()[("leased_waiting_calls", ())]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    lines = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    with Leased(ttl="60s", args=["--metrics-listen", "127.0.0.1:0"]) as d:
        own = [("grpc.use_local_subchannel_pool", 1)]
        clients = [harness.Client(d.channel(options=own), timeout=120.0)
                   for _ in range(16)]
        held = [clients[0].acquire("line-%d" % i, "holder")
                for i in range(lines)]
        time.sleep(1)  # the acquires' garbage settles
        rss0, threads0 = status(d.proc.pid, "VmRSS"), \
            status(d.proc.pid, "Threads")
        futures = [clients[k % 16].wait("line-%d" % (k % lines), "w%d" % k)
                   for k in range(n)]
        deadline = time.monotonic() + 120
        while waiting(d) < n:
            assert time.monotonic() < deadline, waiting(d)
            time.sleep(0.1)
        rss1, threads1 = status(d.proc.pid, "VmRSS"), \
            status(d.proc.pid, "Threads")
        for lease in held:
            clients[0].release(lease)
        granted = {}
        deadline = time.monotonic() + 60
        while len(granted) < lines:
            assert time.monotonic() < deadline, sorted(granted)[:5]
            for k, f in enumerate(futures):
                if k not in granted and f.done():
                    granted[k] = f.result().lease
            time.sleep(0.01)
        # One waiter of each line, each granted its own line's lease.
        assert sorted(lease.session_id for lease in granted.values()) == \
            sorted("line-%d" % i for i in range(lines)), granted
        for k, lease in granted.items():
            assert lease.session_id == "line-%d" % (k % lines), (k, lease)
        for f in futures:
            f.cancel()
        print("%d waiting calls on %d sessions: VmRSS %d -> %d KiB, "
              "%.2f KiB per call; threads %d -> %d"
              % (n, lines, rss0, rss1, (rss1 - rss0) / n, threads0,
                 threads1))


if __name__ == "__main__":
    main()
