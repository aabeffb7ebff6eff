"""The database's clock decides expiry over PostgreSQL: a step of the
database host's wall clock is seen by each replica, which compares it with
its own monotonic clock between round trips, logged and counted
(docs/ha.md, "What is promised, and what is assumed")."""
import os
import re
import tempfile
import time

import harness
import pg
from harness import Leased

STEPS = ("leased_pg_clock_steps_total", ())


def test_a_step_of_the_database_clock_is_logged_and_counted():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the postgres user reads the offset file
        spec = os.path.join(tmp, "offset")
        with open(spec, "w") as f:
            f.write("+0s\n")
        os.chmod(spec, 0o644)
        server = pg.Postgres(faketime=spec)
        server.start()
        conninfo = harness.fresh_database(server)
        # A TTL longer than the step: the lease stays live across it (a
        # 2 s one ran out, and garbage collection could take its row).
        with Leased(ttl="30s", postgres=conninfo,
                    args=["--metrics-listen", "127.0.0.1:0"]) as d:
            c = d.client()
            lease = c.acquire("s", "alice")
            for _ in range(5):  # round trips with a steady clock
                lease = c.renew(lease)
                time.sleep(0.1)
            assert d.metrics()[STEPS] == 0
            assert "msg=database_clock_step" not in d.log_text()
            with open(spec, "w") as f:
                f.write("+5s\n")
            deadline = time.monotonic() + 10
            while "msg=database_clock_step" not in d.log_text():
                assert time.monotonic() < deadline, d.log_text()
                lease = c.renew(lease)
                time.sleep(0.1)
            by_ms = int(re.search(r"msg=database_clock_step by_ms=(-?\d+)",
                                  d.log_text()).group(1))
            assert 4000 <= by_ms <= 6000, by_ms
            assert d.metrics()[STEPS] == 1
        server.stop()


harness.main(globals())
