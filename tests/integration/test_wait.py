"""leased.v1.Leases/Wait on the real daemon: an Acquire that waits in its
session's line, first come first served. The order in which waiters
joined is known from leased_waiting_calls (each starts once the one
before is in line), never from a sleep.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import grpc

import harness
from harness import Leased, expect_code
from mecatl_only import MecatlOnly

INVALID = grpc.StatusCode.INVALID_ARGUMENT
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED
HELD = grpc.StatusCode.FAILED_PRECONDITION
METRICS = ["--metrics-listen", "127.0.0.1:0"]
LONG = 60.0  # a waiter's deadline that no test reaches
HELD_EXIT = 3  # leasectl's exit code for a lease another holds


def waiting(d):
    return d.metrics()[("leased_waiting_calls", ())]


def until(what, cond, timeout=20.0):
    """Returns once cond() is true; fails (saying what) after timeout s."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def until_waiting(d, n, timeout=20.0):
    """Returns once leased says n Waits are in line."""
    until("waiting: want %d" % n, lambda: waiting(d) == n, timeout)


def line_up(d, c, session, owners, timeout=LONG):
    """Starts a Wait for each owner, in order, each once the one before
    is in line; returns their futures."""
    first = waiting(d)
    futures = []
    for owner in owners:
        futures.append(c.wait(session, owner, timeout=timeout))
        until_waiting(d, first + len(futures))
    return futures


def mecatl_lease(lease):
    """A Lease of leased.v1 as Mecatl's service takes it (Release)."""
    return harness.pb.Lease(session_id=lease.session_id, owner=lease.owner,
                            token=lease.token)


def granted(future):
    """The lease future's Wait was granted."""
    return future.result(timeout=10).lease


def test_waiters_are_granted_in_order_across_releases_and_an_expiry():
    # A TTL no step of a loaded sanitizer build outlasts: w1 and w2 are
    # released before their leases could run out.
    with Leased(ttl="4s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        w1, w2, w3 = line_up(d, c, "s", ["w1", "w2", "w3"])
        c.release(held)
        l1 = granted(w1)
        assert (l1.owner, l1.session_id) == ("w1", "s")
        assert l1.token > held.token
        until_waiting(d, 2)
        assert not w2.done() and not w3.done()
        # A takeover while others wait is refused as ever: Acquire takes
        # no place in the line.
        expect_code(HELD, c.acquire, "s", "rude")
        c.release(mecatl_lease(l1))
        l2 = granted(w2)
        assert l2.owner == "w2" and l2.token > l1.token
        assert not w3.done()
        # w2's lease runs out unrenewed: w3 gets it when it expires, not
        # before, and without anyone calling.
        l3 = granted(w3)
        assert l3.owner == "w3" and l3.token > l2.token
        assert time.time_ns() >= l2.expiry.ToNanoseconds()
        got = c.get("s")
        assert (got.owner, got.token) == ("w3", l3.token)
        until_waiting(d, 0)


def test_an_acquire_after_the_expiry_goes_behind_the_line():
    """Once a lease with a line expired, an Acquire (or its holder's
    renewal) does not take it: the first waiter does, whichever call
    leased sees first after the expiry (its own wake-up, or the
    Acquire)."""
    with Leased(ttl="2s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        w1, = line_up(d, c, "s", ["w1"])
        expiry = held.expiry.ToNanoseconds()
        until("the holder's expiry", lambda: time.time_ns() > expiry)
        expect_code(HELD, c.acquire, "s", "rude")
        expect_code(HELD, c.renew, mecatl_lease(held))
        l1 = granted(w1)
        assert l1.owner == "w1" and l1.token == held.token + 1, l1
        got = c.get("s")
        assert (got.owner, got.token) == ("w1", l1.token)


def test_a_waiter_whose_call_ended_is_skipped_and_never_granted():
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        w1, cancelled = line_up(d, c, "s", ["w1", "cancelled"])
        late = c.wait("s", "late", timeout=0.5)  # its deadline passes
        expect_code(DEADLINE, late.result)
        cancelled.cancel()
        until_waiting(d, 1)
        # A waiter whose process dies: its connection drops.
        dead = waiter_process(d, "s", "dead")
        until_waiting(d, 2)
        w3, = line_up(d, c, "s", ["w3"])
        dead.kill()
        dead.wait(timeout=10)
        until_waiting(d, 2)
        c.release(held)
        l1 = granted(w1)
        assert l1.owner == "w1"
        c.release(mecatl_lease(l1))
        l3 = granted(w3)
        assert l3.owner == "w3" and l3.token > l1.token
        # Never granted, not even for a moment: takeovers are logged.
        for owner in ["cancelled", "late", "dead"]:
            assert 'owner="%s"' % owner not in d.log_text(), owner
        got = c.get("s")
        assert (got.owner, got.token) == ("w3", l3.token)
        until_waiting(d, 0)


WAITER = """
import sys, grpc
channel = grpc.insecure_channel(sys.argv[1])
call = channel.unary_unary("/leased.v1.Leases/Wait")
print("waiting", flush=True)
call(bytes.fromhex(sys.argv[2]), timeout=60)
print("granted", flush=True)
"""


def waiter_process(d, session, owner):
    """A process of its own waiting for session as owner."""
    req = harness.leases_pb.WaitRequest(session_id=session, owner=owner)
    return subprocess.Popen(
        [sys.executable, "-c", WAITER, d.addr, req.SerializeToString().hex()],
        stdout=subprocess.PIPE)


def test_a_free_session_and_the_holders_own_wait_are_answered_at_once():
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        free = granted(c.wait("s", "alice"))
        assert free.owner == "alice" and free.token > 0
        # As Acquire: the same owner gets its lease back, same token.
        again = granted(c.wait("s", "alice"))
        assert again.token == free.token
        assert again.expiry.ToNanoseconds() >= free.expiry.ToNanoseconds()
        assert waiting(d) == 0


def test_a_revoked_lease_goes_to_the_first_waiter():
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        w1, = line_up(d, c, "s", ["w1"])
        c.revoke("s")
        l1 = granted(w1)
        assert l1.owner == "w1" and l1.token > held.token


def test_a_waiters_grant_is_stored_before_its_answer():
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        w1, = line_up(d, c, "s", ["w1"])
        c.release(held)
        l1 = granted(w1)
        d.kill9()
        d.start()
        got = d.client().get("s")
        assert (got.owner, got.token) == ("w1", l1.token)


def test_stopping_answers_every_waiter_unavailable():
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        c.acquire("s", "holder")
        waiters = line_up(d, c, "s", ["w1", "w2"])
        d.proc.send_signal(signal.SIGTERM)
        for w in waiters:
            try:
                granted(w)
                raise AssertionError("granted while leased stopped")
            except grpc.RpcError as e:
                assert e.code() == UNAVAILABLE, e
                assert "draining" in e.details(), e.details()
        assert d.proc.wait(timeout=15) == 0


def test_bad_input_is_refused_and_changes_nothing():
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        for session, owner in [("", "alice"), ("s", ""), ("s" * 1000, "a")]:
            f = c.wait(session, owner)
            expect_code(INVALID, f.result)
        expect_code(INVALID, c.raw, harness.LEASES + "Wait", b"\xff\xff")
        assert len(c.list().leases) == 0
        assert waiting(d) == 0


def leasectl(url, *args):
    """Starts leasectl against url (JSON output)."""
    return subprocess.Popen(
        [os.environ["LEASECTL_BIN"], "--url", url, "--json"] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def requests(d, method, code):
    """leased_requests_total of method answered code."""
    return d.metrics().get(("leased_requests_total", (
        ("code", code), ("method", method))), 0)


def finished(p):
    out, err = p.communicate(timeout=30)
    return p.returncode, out, err


def leasectl_lease(p):
    """What leasectl p said it acquired, once it exited 0: (owner,
    token)."""
    rc, out, err = finished(p)
    assert rc == 0, (rc, out, err)
    got = json.loads(out)
    return got["owner"], got["token"]


def test_leasectl_waits_in_line_and_is_granted_at_the_release():
    """leasectl acquire --wait (liblease's lease_wait) waits in leased's
    line, not by asking again: the gauge counts it, and the release hands
    it the lease."""
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        p = leasectl(d.addr, "acquire", "s", "--owner", "bob", "--wait",
                     "30s")
        until_waiting(d, 1)
        assert p.poll() is None
        c.release(held)
        assert leasectl_lease(p) == ("bob", held.token + 1)
        # Its --wait ends while the lease is still held: exit 3 (held),
        # and it left the line.
        p = leasectl(d.addr, "acquire", "s", "--owner", "carol", "--wait",
                     "1s")
        until_waiting(d, 1)
        assert finished(p)[0] == HELD_EXIT
        until_waiting(d, 0)
        assert 'owner="carol"' not in d.log_text()


def test_leasectl_wait_asks_again_where_wait_is_not_served():
    """Against a server of Mecatl's contract alone (Wait UNIMPLEMENTED),
    lease_wait falls back to asking every 250 ms: granted once the holder
    released."""
    with Leased(ttl="20s", args=METRICS) as d, MecatlOnly(d.addr) as front:
        c = d.client()
        held = c.acquire("s", "holder")
        p = leasectl(front, "acquire", "s", "--owner", "bob", "--wait", "30s")
        # Its Wait answered UNIMPLEMENTED by the front, then an Acquire
        # (passed through) refused.
        deadline = time.monotonic() + 20
        while requests(d, "Acquire", "FAILED_PRECONDITION") == 0:
            assert time.monotonic() < deadline, "no Acquire refused"
            time.sleep(0.01)
        assert requests(d, "leased.v1.Leases/Wait", "OK") == 0
        assert waiting(d) == 0
        c.release(held)
        assert leasectl_lease(p) == ("bob", held.token + 1)


# --- Over PostgreSQL: one line for every replica ---------------------------

def replicas(ttl, broken=None):
    """Two replicas over one new database: (a, b, the database's name).
    broken: leased-faults instead, with that negative control."""
    conninfo = harness.fresh_database()
    name = re.search(r"dbname=(\S+)", conninfo).group(1)
    env = None
    if broken is not None:
        env = {"LEASED_FAULTS": "broken=" + broken}
    return (Leased(ttl=ttl, args=METRICS, postgres=conninfo, env=env),
            Leased(ttl=ttl, args=METRICS, postgres=conninfo, env=env), name)


def faults_bin():
    """leased-faults, beside leased (builds without sanitizers make it)."""
    build = os.path.dirname(os.path.dirname(harness.leased_bin()))
    path = os.path.join(build, "tests", "faults", "leased-faults")
    assert os.access(path, os.X_OK), "no leased-faults beside leased"
    return path


class FaultsBin:
    """Within: harness.Leased starts leased-faults."""

    def __enter__(self):
        self.kept = os.environ["LEASED_BIN"]
        os.environ["LEASED_BIN"] = faults_bin()

    def __exit__(self, *exc):
        os.environ["LEASED_BIN"] = self.kept


def psql(name, sql):
    return harness.shared_postgres().psql(sql, dbname=name)


def test_waiters_at_several_replicas_are_granted_in_one_order():
    # A TTL no step of a loaded sanitizer build outlasts (as above).
    a, b, _ = replicas("4s")
    with a, b:
        ca, cb = a.client(), b.client()
        held = ca.acquire("s", "holder")
        w1, = line_up(a, ca, "s", ["w1"])
        w2, = line_up(b, cb, "s", ["w2"])
        w3, = line_up(a, ca, "s", ["w3"])
        w4, = line_up(b, cb, "s", ["w4"])
        # A release at one replica grants the first in line at the other.
        cb.release(held)
        l1 = granted(w1)
        assert l1.owner == "w1" and l1.token > held.token, (held, l1)
        ca.release(mecatl_lease(l1))
        l2 = granted(w2)
        assert l2.owner == "w2" and l2.token > l1.token, (l1, l2)
        assert not w3.done() and not w4.done()
        # w2's lease runs out unrenewed: w3 gets it, looked at by its
        # replica once the lease may have ended; then w4 the same way.
        l3 = granted(w3)
        assert l3.owner == "w3" and l3.token > l2.token, (l2, l3)
        assert time.time_ns() >= l2.expiry.ToNanoseconds()
        assert not w4.done()
        l4 = granted(w4)
        assert l4.owner == "w4" and l4.token > l3.token, (l3, l4)
        until_waiting(a, 0)
        until_waiting(b, 0)


def dead_replicas_waiter(broken=None):
    """A waiter at a replica that dies (kill -9), one at another behind
    it, then the holder's release: (who has the lease, the log of the
    replica left)."""
    a, b, name = replicas("20s", broken)
    with a, b:
        ca, cb = a.client(), b.client()
        held = cb.acquire("s", "holder")
        gone, = line_up(a, ca, "s", ["gone"])
        w2, = line_up(b, cb, "s", ["w2"])
        a.kill9()
        # Its call failed, not granted: UNAVAILABLE as the connection
        # dropped, or CANCELLED if kill9() closed its channel first.
        err = gone.exception(timeout=10)
        assert err is not None and err.code() in (
            UNAVAILABLE, grpc.StatusCode.CANCELLED), err
        # Its Wait is still a row of the line, but its replica's lock is
        # gone with its connection, once the database saw it close.
        until("the dead replica's connections closed", lambda: psql(
            name, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                  "current_database() AND " + harness.LISTENING) == "1")
        cb.release(held)
        until("the release handed over", lambda: cb.get("s").owner != "")
        got = cb.get("s")
        if got.owner == "w2":
            l2 = granted(w2)
            assert l2.token == got.token == held.token + 1, (held, l2)
        return got.owner, b.log_text()


def test_a_replica_that_dies_takes_its_waiters_places_with_it():
    owner, log = dead_replicas_waiter()
    assert owner == "w2", owner
    assert 'owner="gone"' not in log


def test_a_dead_replicas_waiter_granted_is_caught():
    # The negative control of the case above: with every waiter taken
    # for one whose replica is there, the dead one is granted.
    with FaultsBin():
        owner, _ = dead_replicas_waiter("wait_dead_granted")
    assert owner == "gone", owner


def cancelled_waiter(broken=None):
    """A waiter whose call is cancelled, one behind it, then the holder's
    release: who has the lease."""
    with Leased(ttl="20s", args=METRICS,
                env={"LEASED_FAULTS": "broken=" + broken}
                if broken else None) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        cancelled, w2 = line_up(d, c, "s", ["cancelled", "w2"])
        cancelled.cancel()
        until_waiting(d, 1)
        c.release(held)
        until("the release handed over", lambda: c.get("s").owner != "")
        return c.get("s").owner


def test_a_cancelled_waiter_left_in_line_is_caught():
    # The negative control of test_a_waiter_whose_call_ended_is_skipped_
    # and_never_granted over PostgreSQL: a Wait that leaves stays in line.
    assert cancelled_waiter() == "w2"
    with FaultsBin():
        assert cancelled_waiter("wait_leave_kept") == "cancelled"


def test_a_dead_replicas_waiters_are_collected():
    # Collection runs every TTL (at least a second): 2 s.
    a, b, name = replicas("2s")
    with a, b:
        ca, cb = a.client(), b.client()
        held = cb.acquire("s", "holder")
        line_up(a, ca, "s", ["gone"])
        a.kill9()
        until("the dead waiter collected", lambda: psql(
            name, "SELECT count(*) FROM leased_waiters") == "0")
        # Nobody was granted the lease on the way.
        got = cb.get("s")
        assert (got.owner, got.token) == ("holder", held.token)


def test_a_lost_listening_connection_answers_its_waiters():
    """The replica's listening connection holds its Waits' places: lost,
    they are answered UNAVAILABLE (the caller waits again), it connects
    again, and Waits are served as before."""
    a, b, name = replicas("20s")
    with a, b:
        ca, cb = a.client(), b.client()
        held = cb.acquire("s", "holder")
        lost, = line_up(a, ca, "s", ["lost"])
        w2, = line_up(b, cb, "s", ["w2"])
        killed = psql(name, "SELECT pg_terminate_backend(pid) FROM "
                            "pg_stat_activity WHERE datname = current_"
                            "database() AND " + harness.LISTENING)
        assert killed.splitlines() == ["t", "t"], killed
        expect_code(UNAVAILABLE, lost.result)
        expect_code(UNAVAILABLE, w2.result)
        for d in (a, b):
            until("listening again", lambda: len(re.findall(
                "database_connected connection=listening",
                d.log_text())) == 1)
            # Lost as it listened, or as it read events (the same
            # connection does both).
            assert re.search(r"msg=database_failed during=(listen|events)",
                             d.log_text()), d.log_text()
            until_waiting(d, 0)
        w3, = line_up(a, ca, "s", ["w3"])
        cb.release(held)
        l3 = granted(w3)
        assert l3.owner == "w3" and l3.token == held.token + 1


def test_a_waiter_waits_again_at_another_replica_when_its_own_drains():
    """liblease's lease_wait (leasectl acquire --wait) with two replicas:
    its replica drains (SIGTERM), answers it UNAVAILABLE, and it waits
    again at the other, in the same line, granted at the release."""
    a, b, _ = replicas("20s")
    with a, b:
        cb = b.client()
        held = cb.acquire("s", "holder")
        p = leasectl("%s,%s" % (a.addr, b.addr), "acquire", "s", "--owner",
                     "bob", "--wait", "60s")
        until_waiting(a, 1)
        a.proc.send_signal(signal.SIGTERM)
        until_waiting(b, 1)
        assert a.proc.wait(timeout=15) == 0
        assert p.poll() is None
        cb.release(held)
        assert leasectl_lease(p) == ("bob", held.token + 1)


def test_waiters_are_answered_when_the_database_restarts():
    """The database restarts under waiting calls: their places go with
    the connections, they are answered UNAVAILABLE, and once the database
    is back the replica serves Waits again (the lease held before waits
    for the database's quarantine, as any would)."""
    import pg
    server = pg.Postgres("waitrestart").start()
    try:
        with Leased(ttl="20s", args=METRICS + ["--postgres-timeout", "1s"],
                    postgres=server.conninfo()) as d:
            c = d.client()
            held = c.acquire("s", "holder")
            w1, w2 = line_up(d, c, "s", ["w1", "w2"])
            server.stop()
            for w in (w1, w2):
                expect_code(UNAVAILABLE, w.result)
            until_waiting(d, 0)
            server.start()
            d.wait_log(r"database_connected connection=listening", 20)
            until("SERVING again", lambda: c.health() == "SERVING")
            w3, = line_up(d, c, "s", ["w3"])
            c.release(held)
            l3 = granted(w3)
            assert l3.owner == "w3" and l3.token == held.token + 1, l3
    finally:
        server.stop()


POSTGRES_ONLY = [
    "test_waiters_at_several_replicas_are_granted_in_one_order",
    "test_waiters_are_answered_when_the_database_restarts",
    "test_a_waiter_waits_again_at_another_replica_when_its_own_drains",
    "test_a_replica_that_dies_takes_its_waiters_places_with_it",
    "test_a_dead_replicas_waiter_granted_is_caught",
    "test_a_cancelled_waiter_left_in_line_is_caught",
    "test_a_dead_replicas_waiters_are_collected",
    "test_a_lost_listening_connection_answers_its_waiters",
]
if os.environ.get("LEASED_TEST_STORE") != "postgres":
    for name in POSTGRES_ONLY:
        del globals()[name]

harness.main(globals())
