"""Moving from the SQLite store to PostgreSQL: `leased --postgres CONNINFO
--import-from DIR` copies every lease with its owner, token and expiry, and
the token floor, under a quarantine; replicas over the database go on from
there (docs/ha.md, "Moving from SQLite to PostgreSQL")."""
import os
import sqlite3
import tempfile
import time

import grpc

import harness
from harness import Leased, expect_code

HELD = grpc.StatusCode.FAILED_PRECONDITION


def importer(data_dir, conninfo, ttl="2s"):
    """A leased that imports data_dir into conninfo and exits."""
    return Leased(ttl=ttl, postgres=conninfo,
                  args=["--import-from", data_dir, "--max-clock-skew", "0ms"])


def sqlite_floor(data_dir):
    db = sqlite3.connect(os.path.join(data_dir, "leased.db"))
    try:
        return db.execute("SELECT value FROM meta WHERE key = "
                          "'token_floor'").fetchone()[0]
    finally:
        db.close()


def test_import_keeps_owners_tokens_and_the_floor():
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        # A TTL long enough that the SQLite store collects nothing before
        # the move (the import's quarantine is then as long: the test
        # only needs it to have begun).
        with Leased(data_dir=data, ttl="30s", postgres=None) as old:
            c = old.client()
            alice = c.acquire("held", "alice")
            for i in range(3):
                c.release(c.acquire("churn", "o%d" % i))
            c.release(c.acquire("free", "bob"))
        conninfo = harness.fresh_database()
        rc, log = importer(data, conninfo).run_to_exit()
        assert rc == 0, log
        assert "msg=imported" in log and "leases=3" in log, log
        server = harness.shared_postgres()
        dbname = conninfo.split("dbname=")[1].split()[0]
        floor = int(server.psql("SELECT value FROM leased_meta WHERE key = "
                                "'token_floor'", dbname=dbname))
        assert floor == sqlite_floor(data)
        with Leased(ttl="2s", postgres=conninfo) as new:
            c = new.client()
            # The holder goes on with its lease, and nobody else takes it
            # during the quarantine, though its expiry may have passed.
            expect_code(HELD, c.acquire, "held", "mallory")
            renewed = c.renew(alice)
            assert renewed.token == alice.token
            # Takeovers go on above every token the SQLite store gave.
            assert c.acquire("churn", "carol").token == 4
            assert c.acquire("free", "dave").token == 2
            got = c.get("held")
            assert got.owner == "alice" and got.token == alice.token and got.live


def test_import_quarantine_ends():
    # The quarantine runs from the import for one TTL: long enough for a
    # replica to start under a sanitizer on a busy machine (several
    # seconds, with other tests beside it).
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        with Leased(data_dir=data, ttl="6s", postgres=None) as old:
            old.client().acquire("s", "alice")
        conninfo = harness.fresh_database()
        rc, log = importer(data, conninfo, ttl="6s").run_to_exit()
        assert rc == 0 and "leases=1" in log, log
        with Leased(ttl="6s", postgres=conninfo) as new:
            c = new.client()
            expect_code(HELD, c.acquire, "s", "bob")
            deadline = time.monotonic() + 15
            while harness.status_of(c.acquire, "s", "bob") == HELD:
                assert time.monotonic() < deadline, "quarantine never ended"
                time.sleep(0.05)
            assert c.get("s").token == 2


def test_import_refuses_a_database_with_leases():
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        with Leased(data_dir=data, ttl="2s", postgres=None) as old:
            old.client().acquire("s", "alice")
        conninfo = harness.fresh_database()
        with Leased(ttl="2s", postgres=conninfo) as new:
            new.client().acquire("other", "bob")
        rc, log = importer(data, conninfo).run_to_exit()
        assert rc != 0
        assert "msg=import_failed" in log and "already holds 1 leases" in log, \
            log


def test_import_refuses_a_missing_or_running_store():
    conninfo = harness.fresh_database()
    with tempfile.TemporaryDirectory() as tmp:
        rc, log = importer(os.path.join(tmp, "nothing"), conninfo).run_to_exit()
        assert rc != 0
        assert "--import-from" in log and "no leased.db" in log, log
        data = os.path.join(tmp, "data")
        with Leased(data_dir=data, ttl="2s", postgres=None):
            rc, log = importer(data, conninfo).run_to_exit()
            assert rc != 0
            assert "--import-from" in log, log


harness.main(globals())
