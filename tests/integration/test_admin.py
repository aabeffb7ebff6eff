"""leased's admin service (leased.admin.v1.Admin) on the real daemon: Get,
List (paged, stable order, prefixes), Stats, Revoke, and its
authentication (the lease tokens, or its own --admin-token-file).
"""
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time

import grpc

import harness
from harness import Leased, expect_code

NOT_FOUND = grpc.StatusCode.NOT_FOUND
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
FAILED = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT
ADMIN = harness.ADMIN


def test_get_live_expired_and_missing():
    # A TTL a slow machine (sanitizers, a loaded CI) cannot outrun
    # between an acquire and the Get after it.
    with Leased(ttl="2s") as d:
        c = d.client()
        time.sleep(2.1)  # past the restart quarantine
        a = c.acquire("g1", "alice")
        got = c.get("g1")
        assert (got.session_id, got.owner, got.token, got.live) == \
            ("g1", "alice", a.token, True)
        assert (got.expiry.seconds, got.expiry.nanos) == \
            (a.expiry.seconds, a.expiry.nanos)
        r = c.renew(a)
        assert c.get("g1").expiry.ToNanoseconds() == r.expiry.ToNanoseconds()
        time.sleep(2.1)
        assert c.get("g1").live is False  # expired, not yet collected
        expect_code(NOT_FOUND, c.get, "never")
        b = c.acquire("g2", "bob")
        c.release(b)
        expect_code(NOT_FOUND, c.get, "g2")  # released
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, c.get, "")
        # Get changed nothing: another owner still takes g1 over.
        assert c.acquire("g1", "carol").token == a.token + 1


def test_list_pages_in_a_stable_order():
    with Leased(ttl="30s") as d:
        c = d.client()
        names = ["app/%03d" % i for i in range(25)] + ["other/1", "other/2"]
        for n in reversed(names):
            c.acquire(n, "owner-" + n)
        c.release(c.acquire("app/zz-released", "x"))
        seen, token, pages = [], "", 0
        while True:
            page = c.list("app/", page_size=10, page_token=token)
            pages += 1
            seen += [(l.session_id, l.owner, l.live) for l in page.leases]
            token = page.next_page_token
            if not token:
                break
        assert pages == 3
        assert [s for s, _, _ in seen] == sorted(n for n in names
                                                 if n.startswith("app/"))
        assert all(o == "owner-" + s and live for s, o, live in seen)
        everything = c.list(page_size=1000)
        assert [l.session_id for l in everything.leases] == sorted(names)
        assert everything.next_page_token == ""
        assert len(c.list().leases) == 27  # page_size 0: up to 100
        assert len(c.list("nothing-here").leases) == 0
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, c.list, "", -1)


def test_stats():
    # 5 s: the three leases are still live at the count after the sleep
    # below, on a loaded machine too.
    with Leased(ttl="5s", args=["--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        s0 = c.stats()
        assert s0.storage_state == "ok"
        # The restart quarantine of a start; over PostgreSQL, a replica's
        # start is no restart of the database, which has none.
        if d.postgres is None:
            assert s0.quarantine_remaining_ms > 0
        else:
            assert s0.quarantine_remaining_ms == 0
        a = c.acquire("s1", "alice")
        c.acquire("s2", "alice")
        c.release(c.acquire("s3", "bob"))
        b = c.acquire("s3", "carol")
        time.sleep(1.2)  # a census of live leases
        s = c.stats()
        assert s.takeovers - s0.takeovers == 4
        assert s.token_high_water_mark == max(a.token, b.token) == 2
        assert s.live_leases == 3
        assert s.lease_entries == 3
        assert s.uptime_seconds >= 1
        assert s.version
        if d.postgres is None:
            with harness.WriteLock(d.db_path):
                harness.status_of(c.acquire, "s4", "dave")
                assert c.stats().storage_state == "failing"
            return
        server = harness.shared_postgres()
        server.pause()
        try:
            expect_code(grpc.StatusCode.UNAVAILABLE, c.acquire, "s4", "dave")
            s = c.stats()
            assert s.storage_state == "failing"
            assert s.takeovers - s0.takeovers == 4
        finally:
            server.resume()
        deadline = time.monotonic() + 10
        while c.stats().storage_state != "ok":
            assert time.monotonic() < deadline, "storage still failing"
            time.sleep(0.1)
        # Writes work again. (Not "s4": the acquire that got UNAVAILABLE
        # may still have committed once the database ran again. And a
        # new session's token is above the floor collection raised.)
        lease = c.acquire("s5", "dave")
        got = c.get("s5")
        assert (got.owner, got.token) == ("dave", lease.token)


def test_stats_count_the_leases_live_now():
    # Not the /metrics gauge, which a census refreshes once a second:
    # right after an acquire or a release, Stats counts it (`leasectl
    # stats` used to show 0 live leases for a second after acquires).
    with Leased(ttl="30s") as d:
        c = d.client()
        held = [c.acquire("n%d" % i, "alice") for i in range(3)]
        assert c.stats().live_leases == 3
        c.release(held[0])
        assert c.stats().live_leases == 2
        c.acquire("n3", "bob")
        assert c.stats().live_leases == 3


def details_of(fn, *args):
    try:
        fn(*args)
    except grpc.RpcError as e:
        return e.code(), e.details()
    raise AssertionError("not refused")


def test_revoke_ends_any_holders_lease_durably():
    """An operator's Revoke: whoever holds the session, or only while its
    token is the one given; the holder's next Renew is refused, the next
    Acquire gets a greater token, it is audited and counted, bad input
    changes nothing, and (embedded) it outlives a kill -9 at once after
    its answer."""
    with Leased(ttl="30s", args=["--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        a = c.acquire("r1", "alice")
        other = c.acquire("r2", "zoe")
        assert details_of(c.revoke, "r1", a.token + 1) == \
            (FAILED, "the lease's token is %d, not %d" % (a.token,
                                                         a.token + 1))
        assert details_of(c.revoke, "never") == (NOT_FOUND, "no lease")
        assert c.renew(a).token == a.token  # untouched so far
        ended = c.revoke("r1", a.token)
        assert (ended.session_id, ended.owner, ended.token) == \
            ("r1", "alice", a.token)
        expect_code(FAILED, c.renew, a)
        expect_code(NOT_FOUND, c.get, "r1")
        expect_code(NOT_FOUND, c.revoke, "r1")  # released: nothing to end
        b = c.acquire("r1", "bob")
        assert b.token == a.token + 1
        assert c.revoke("r1").owner == "bob"  # token 0: whoever holds it
        # Bad input: refused, nothing revoked. "r2\0x" is not "r2".
        expect_code(INVALID, c.revoke, "")
        nul = b"\x0a\x04r2\x00x"  # session_id, with an embedded NUL
        expect_code(INVALID, c.raw, ADMIN + "Revoke", nul)
        assert c.get("r2").owner == "zoe"
        d.wait_log(r'msg=revoke identity="" session="r1" owner="bob" '
                   r'token=%d' % b.token)
        log = d.log_text()
        assert 'msg=revoke identity="" session="r1" owner="alice" ' \
               'token=%d' % a.token in log
        assert log.count("msg=revoke ") == 2, log
        assert d.metrics()[("leased_revokes_total", ())] == 2
        # Durable before its answer: nothing but the disk survives -9.
        ended = c.revoke("r2")
        if d.postgres is None:
            d.kill9()
            d.start()
            c = d.client()
        expect_code(NOT_FOUND, c.get, "r2")
        # Released leases are not quarantined: taken at once, above zoe's.
        assert c.acquire("r2", "yves").token == other.token + 1


def leasectl(d, *args):
    p = subprocess.run([os.environ["LEASECTL_BIN"], "--url", d.addr] +
                       list(args), capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def check_database(path):
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("SELECT count(*) FROM leases").fetchone()[0] >= 1
    finally:
        con.close()


def test_snapshot_restores_every_lease_and_no_token_goes_down():
    """leasectl snapshot save: a consistent copy of the running embedded
    store, written whole (no temporary file left). Restored as
    docs/operations.md says (stop, the copy in place of leased.db, the WAL
    gone, --raise-token-floor the high-water mark), it holds every lease
    it had, and every token after it is above every token given before,
    those given after the snapshot included. Over PostgreSQL: refused,
    saying what to use instead."""
    with tempfile.TemporaryDirectory(prefix="leased-snap-") as tmp, \
            Leased(ttl="3s") as d:
        c = d.client()
        file = os.path.join(tmp, "snap.db")
        if d.postgres is not None:
            rc, out, err = leasectl(d, "snapshot", "save", file)
            assert (rc, out) == (1, "") and "pg_dump" in err, err
            assert not os.path.exists(file)
            return
        held = c.acquire("kept", "alice")
        c.release(c.acquire("churn", "bob"))
        rc, out, err = leasectl(d, "snapshot", "save", file)
        assert rc == 0 and out == "saved %s: %d bytes\n" % (
            file, os.path.getsize(file)), (rc, out, err)
        assert os.listdir(tmp) == ["snap.db"]  # nothing half-written
        check_database(file)
        # Copies taken while commits go on are whole databases too.
        churn = threading.Thread(target=lambda: [
            c.release(c.acquire("busy", "o%d" % i)) for i in range(200)])
        churn.start()
        for i in range(3):
            with open(os.path.join(tmp, "busy.db"), "wb") as f:
                f.write(c.snapshot())
            check_database(os.path.join(tmp, "busy.db"))
        churn.join()
        # After the snapshot: tokens the copy does not know.
        for owner in ("carol", "dave", "erin"):
            c.release(c.acquire("churn", owner))
        c.acquire("later", "frank")
        high = c.stats().token_high_water_mark
        assert high >= 4
        assert d.stop() == 0
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(d.db_path + suffix):
                os.unlink(d.db_path + suffix)
        shutil.copy(file, d.db_path)
        d.args += ["--raise-token-floor", str(high)]
        d.start()
        c = d.client()
        d.wait_log(r"msg=token_floor_raised to=%d" % high)
        got = c.get("kept")  # held, as the copy says, its token raised
        assert got.owner == "alice" and got.token >= high and got.live
        expect_code(FAILED, c.acquire, "kept", "mallory")  # quarantined
        expect_code(FAILED, c.renew, held)  # told at its renewal
        expect_code(NOT_FOUND, c.get, "later")  # after the snapshot
        for session in ("churn", "later", "new"):
            assert c.acquire(session, "zoe").token > high, session


def test_admin_uses_the_lease_tokens_by_default():
    with Leased(token="lease-tok") as d:
        anon = harness.Client(d.channel())
        expect_code(UNAUTH, anon.stats)
        expect_code(UNAUTH, anon.get, "x")
        assert d.client().stats().storage_state == "ok"


def test_admin_token_file_of_its_own():
    with tempfile.TemporaryDirectory(prefix="leased-admin-") as tmp:
        admin = os.path.join(tmp, "admin-tokens")
        harness.write_private(admin, "admin-tok\n")
        with Leased(token="lease-tok",
                    args=["--admin-token-file", admin]) as d:
            ch = d.channel()
            lease_c = harness.Client(ch, token="lease-tok")
            admin_c = harness.Client(ch, token="admin-tok")
            lease_c.acquire("a", "alice")
            assert admin_c.get("a").owner == "alice"
            expect_code(UNAUTH, lease_c.get, "a")  # not an admin token
            expect_code(UNAUTH, admin_c.acquire, "b", "x")  # nor for leases
            expect_code(UNAUTH, lease_c.revoke, "a")
            assert admin_c.revoke("a").owner == "alice"
            harness.write_private(admin, "admin-tok-2\n")
            d.proc.send_signal(signal.SIGHUP)
            d.wait_log(r"msg=reloaded what=admin_tokens count=1")
            expect_code(UNAUTH, admin_c.stats)
            assert harness.Client(ch, token="admin-tok-2").stats().version


harness.main(globals())
