#!/usr/bin/python3
"""How long before leased's expiry `leasectl hold` has its command gone,
when leased stalls. Run by hand (docs/benchmarks.md), never as a timed
test; tests/integration/test_holders.py asserts only that it is before.

    LEASED_BIN=build/daemon/leased LEASECTL_BIN=build/client/leasectl \\
        tests/bench/hold_margin.py [RUNS] [TTL_S]

RUNS times (default 50) on a leased with --ttl TTL_S (default 3): hold
runs a command that ignores SIGTERM (so that only the SIGKILL at the
deadline ends it: the latest a command may run), leased is stopped
(SIGSTOP) a random part of a third of the TTL after the command started,
the command's end is seen at once through a pidfd, leased is continued
and asked for the lease's expiry (its last renewal plus the TTL). Prints
the margin (expiry less the command's end) at p0, p1, p50 and p100, and
the runs where it was not positive (which must be none).
"""
import os
import random
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from harness import Leased  # noqa: E402
from test_holders import hold_running, wall  # noqa: E402


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    ttl = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    margins = []
    with Leased(ttl="%gs" % ttl) as d, tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            session = "margin-%d" % run
            p, death = hold_running(d.addr, session, tmp)
            time.sleep(random.uniform(0, ttl / 3))
            d.proc.send_signal(signal.SIGSTOP)
            try:
                gone = death.wait(3 * ttl)
            finally:
                d.proc.send_signal(signal.SIGCONT)
            p.wait(timeout=30)
            p.stdout.close()
            p.stderr.close()
            margins.append(wall(d.client().get(session).expiry) - gone)
    margins.sort()
    at = lambda q: margins[min(len(margins) - 1, int(q * len(margins)))]
    print("runs %d (ttl %gs): the command gone before leased's expiry by "
          "p0 %.1f ms, p1 %.1f ms, p50 %.1f ms, p100 %.1f ms; not before: %d"
          % (runs, ttl, at(0) * 1e3, at(0.01) * 1e3, at(0.5) * 1e3,
             at(1) * 1e3, sum(1 for m in margins if m <= 0)))
    return 1 if margins[0] <= 0 else 0


if __name__ == "__main__":
    sys.exit(main())
