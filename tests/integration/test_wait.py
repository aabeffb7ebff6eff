"""leased.v1.Leases/Wait on the real daemon: an Acquire that waits in its
session's line, first come first served. The order in which waiters
joined is known from leased_waiting_calls (each starts once the one
before is in line), never from a sleep.
"""
import json
import os
import signal
import subprocess
import sys
import time

import grpc

import harness
from harness import Leased, expect_code

INVALID = grpc.StatusCode.INVALID_ARGUMENT
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED
HELD = grpc.StatusCode.FAILED_PRECONDITION
METRICS = ["--metrics-listen", "127.0.0.1:0"]
LONG = 60.0  # a waiter's deadline that no test reaches
HELD_EXIT = 3  # leasectl's exit code for a lease another holds


def waiting(d):
    return d.metrics()[("leased_waiting_calls", ())]


def until_waiting(d, n, timeout=20.0):
    """Returns once leased says n Waits are in line."""
    deadline = time.monotonic() + timeout
    while waiting(d) != n:
        assert time.monotonic() < deadline, \
            "waiting: %d, want %d" % (waiting(d), n)
        time.sleep(0.01)


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


def leasectl(d, *args):
    """Starts leasectl against d (JSON output)."""
    return subprocess.Popen(
        [os.environ["LEASECTL_BIN"], "--url", d.addr, "--json"] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def requests(d, method, code):
    """leased_requests_total of method answered code."""
    return d.metrics().get(("leased_requests_total", (
        ("code", code), ("method", method))), 0)


def finished(p):
    out, err = p.communicate(timeout=30)
    return p.returncode, out, err


def test_leasectl_waits_in_line_and_is_granted_at_the_release():
    """leasectl acquire --wait (liblease's lease_wait) waits in leased's
    line, not by asking again: the gauge counts it, and the release hands
    it the lease."""
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        p = leasectl(d, "acquire", "s", "--owner", "bob", "--wait", "30s")
        until_waiting(d, 1)
        assert p.poll() is None
        c.release(held)
        rc, out, err = finished(p)
        assert rc == 0, (rc, out, err)
        got = json.loads(out)
        assert (got["owner"], got["token"]) == ("bob", held.token + 1)
        # Its --wait ends while the lease is still held: exit 3 (held),
        # and it left the line.
        p = leasectl(d, "acquire", "s", "--owner", "carol", "--wait", "1s")
        until_waiting(d, 1)
        assert finished(p)[0] == HELD_EXIT
        until_waiting(d, 0)
        assert 'owner="carol"' not in d.log_text()


def test_leasectl_wait_asks_again_where_wait_is_not_served():
    """Over PostgreSQL (Wait UNIMPLEMENTED), lease_wait falls back to
    asking every 250 ms: granted once the holder released."""
    with Leased(ttl="20s", args=METRICS) as d:
        c = d.client()
        held = c.acquire("s", "holder")
        p = leasectl(d, "acquire", "s", "--owner", "bob", "--wait", "30s")
        # Its Wait answered UNIMPLEMENTED, then an Acquire refused.
        deadline = time.monotonic() + 20
        while requests(d, "Acquire", "FAILED_PRECONDITION") == 0:
            assert time.monotonic() < deadline, "no Acquire refused"
            time.sleep(0.01)
        assert requests(d, "leased.v1.Leases/Wait", "UNIMPLEMENTED") == 1
        c.release(held)
        rc, out, err = finished(p)
        assert rc == 0, (rc, out, err)
        got = json.loads(out)
        assert (got["owner"], got["token"]) == ("bob", held.token + 1)


def test_wait_is_unimplemented_over_postgres():
    with Leased(ttl="20s") as d:
        c = d.client()
        f = c.wait("s", "alice")
        expect_code(UNIMPLEMENTED, f.result)
        expect_code(grpc.StatusCode.NOT_FOUND, c.get, "s")


SQLITE_ONLY = [
    "test_waiters_are_granted_in_order_across_releases_and_an_expiry",
    "test_a_waiter_whose_call_ended_is_skipped_and_never_granted",
    "test_a_free_session_and_the_holders_own_wait_are_answered_at_once",
    "test_a_revoked_lease_goes_to_the_first_waiter",
    "test_a_waiters_grant_is_stored_before_its_answer",
    "test_stopping_answers_every_waiter_unavailable",
    "test_bad_input_is_refused_and_changes_nothing",
    "test_leasectl_waits_in_line_and_is_granted_at_the_release",
]
if os.environ.get("LEASED_TEST_STORE") == "postgres":
    for name in SQLITE_ONLY:
        del globals()[name]
else:
    del globals()["test_wait_is_unimplemented_over_postgres"]
    del globals()["test_leasectl_wait_asks_again_where_wait_is_not_served"]

harness.main(globals())
