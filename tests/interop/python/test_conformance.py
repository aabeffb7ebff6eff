"""Python interop: the 12 conformance behaviours of docs/protocol.md.

A Python client made only of the messages protoc generates from proto/ and
Debian's python3-grpcio (as harness.Client does) checks each behaviour
against the real `leased`. The cases that wait out an expiry start it with
a TTL of 500 ms and sleep 1.2 x TTL; the others, where a lease must stay
live from one call to the next, with a TTL of 10 s, so that a slow
machine (a sanitizer build beside other suites) cannot expire it
between two calls. Each behaviour is one `test_*` case,
asserted as Mecatl's conformance suite words it.

With LEASED_INTEROP_SECURE=1 the same cases run over TLS with a bearer
token (the test command runs both ways).

Run: LEASED_BIN=build/daemon/leased /usr/bin/python3 FILE [CASE...]
"""
import atexit
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
import certs  # noqa: E402
import harness  # noqa: E402
from harness import pb  # noqa: E402

TTL = "500ms"
TTL_S = 0.5
EXPIRE_S = 1.2 * TTL_S  # a sleep that outlasts a lease
LIVE_TTL = "10s"        # for the cases that never wait for an expiry

HELD = grpc.StatusCode.FAILED_PRECONDITION


_certs = None


def daemon(ttl=LIVE_TTL):
    """The daemon under test: plaintext on loopback, or, with
    LEASED_INTEROP_SECURE=1, TLS (certificates made for this run) and a
    bearer token."""
    global _certs
    if os.environ.get("LEASED_INTEROP_SECURE") != "1":
        return harness.Leased(ttl=ttl)
    if _certs is None:
        tmp = tempfile.mkdtemp(prefix="leased-interop-certs-")
        atexit.register(shutil.rmtree, tmp, True)
        _certs = certs.make(tmp)
    return harness.Leased(ttl=ttl, tls=_certs, token=uuid.uuid4().hex)


def owner_id():
    """An owner as Mecatl makes them: <hostname>-<pid>-<nonce>."""
    return "%s-%d-%s" % (socket.gethostname(), os.getpid(),
                         uuid.uuid4().hex[:8])


def session_id():
    return str(uuid.uuid4())


def expiry_key(lease):
    """The expiry as a comparable (seconds, nanos) pair."""
    return (lease.expiry.seconds, lease.expiry.nanos)


def expect_held(fn, *args):
    try:
        fn(*args)
    except grpc.RpcError as e:
        assert e.code() == HELD, "want FAILED_PRECONDITION, got %s (%s)" % (
            e.code(), e.details())
        return
    raise AssertionError("succeeded, want FAILED_PRECONDITION")


# 1
def test_01_fresh_acquire_returns_id_owner_expiry():
    with daemon() as d:
        c = d.client()
        sid, owner = session_id(), owner_id()
        lease = c.acquire(sid, owner)
        assert lease.session_id == sid, lease
        assert lease.owner == owner, lease
        assert lease.HasField("expiry"), lease
        assert expiry_key(lease) != (0, 0), lease
        assert lease.token >= 1, lease


# 2
def test_02_renew_keeps_token_expiry_strictly_later():
    with daemon() as d:
        c = d.client()
        lease = c.acquire(session_id(), owner_id())
        renewed = c.renew(lease)
        assert renewed.token == lease.token, (renewed.token, lease.token)
        assert expiry_key(renewed) > expiry_key(lease), (renewed, lease)
        # Again, immediately: still strictly later.
        again = c.renew(renewed)
        assert again.token == lease.token
        assert expiry_key(again) > expiry_key(renewed)
        # Later in the window: same again.
        time.sleep(0.5)
        later = c.renew(again)
        assert later.token == lease.token
        assert expiry_key(later) > expiry_key(again)


# 3
def test_03_after_release_another_owner_acquires():
    with daemon() as d:
        c = d.client()
        sid = session_id()
        lease = c.acquire(sid, owner_id())
        c.release(lease)
        other = owner_id()
        got = c.acquire(sid, other)
        assert got.owner == other and got.session_id == sid, got


# 4
def test_04_second_owner_of_live_lease_failed_precondition():
    with daemon() as d:
        c = d.client()
        sid = session_id()
        lease = c.acquire(sid, owner_id())
        expect_held(c.acquire, sid, owner_id())
        # The holder is unaffected.
        assert c.renew(lease).token == lease.token


# 5
def test_05_same_owner_reacquire_keeps_token():
    with daemon() as d:
        c = d.client()
        sid, owner = session_id(), owner_id()
        lease = c.acquire(sid, owner)
        again = c.acquire(sid, owner)
        assert again.token == lease.token, (again.token, lease.token)
        assert again.owner == owner


# 6
def test_06_acquire_after_release_greater_token():
    with daemon() as d:
        c = d.client()
        sid, owner = session_id(), owner_id()
        lease = c.acquire(sid, owner)
        c.release(lease)
        other = c.acquire(sid, owner_id())
        assert other.token > lease.token, (other.token, lease.token)
        c.release(other)
        mine = c.acquire(sid, owner)  # the first owner again
        assert mine.token > other.token, (mine.token, other.token)


# 7
def test_07_acquire_after_expiry_greater_token():
    with daemon(TTL) as d:
        c = d.client()
        sid, owner = session_id(), owner_id()
        lease = c.acquire(sid, owner)
        time.sleep(EXPIRE_S)
        got = c.acquire(sid, owner_id())
        assert got.token > lease.token, (got.token, lease.token)
        # Also when the expired lease's own owner takes it again.
        sid2 = session_id()
        first = c.acquire(sid2, owner)
        time.sleep(EXPIRE_S)
        second = c.acquire(sid2, owner)
        assert second.token > first.token, (second.token, first.token)


# 8
def test_08_renew_after_expiry_and_takeover_failed_precondition():
    with daemon(TTL) as d:
        c = d.client()
        sid = session_id()
        lease = c.acquire(sid, owner_id())
        time.sleep(EXPIRE_S)
        c.acquire(sid, owner_id())
        expect_held(c.renew, lease)


# 9
def test_09_renew_after_release_failed_precondition():
    with daemon() as d:
        c = d.client()
        lease = c.acquire(session_id(), owner_id())
        c.release(lease)
        expect_held(c.renew, lease)


# 10
def test_10_release_idempotent_also_never_seen():
    with daemon() as d:
        c = d.client()
        lease = c.acquire(session_id(), owner_id())
        c.release(lease)
        c.release(lease)  # OK again
        never = pb.Lease(session_id=session_id(), owner=owner_id(), token=7)
        c.release(never)
        c.release(never)
        # A never-seen session is still free afterwards.
        got = c.acquire(never.session_id, owner_id())
        assert got.token >= 1


# 11
def test_11_tokens_rise_strictly_across_takeovers():
    with daemon(TTL) as d:
        c = d.client()
        sid = session_id()
        tokens = []
        lease = c.acquire(sid, owner_id())
        assert lease.token >= 1, lease.token
        tokens.append(lease.token)
        for i in range(6):
            if i % 3 == 2:
                time.sleep(EXPIRE_S)  # takeover after expiry
            else:
                c.release(lease)      # takeover after release
            lease = c.acquire(sid, owner_id())
            tokens.append(lease.token)
        assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens


# 12
def test_12_distinct_sessions_never_contend():
    with daemon() as d:
        c = d.client()
        a, b = owner_id(), owner_id()
        s1, s2 = session_id(), session_id()
        la = c.acquire(s1, a)
        lb = c.acquire(s2, b)  # another owner, another session: no contest
        assert la.token >= 1 and lb.token >= 1
        assert c.renew(la).token == la.token
        assert c.renew(lb).token == lb.token
        c.release(la)
        assert c.renew(lb).token == lb.token  # s1's release left s2 alone
        # Many sessions at once, one owner each, all granted.
        n = 16
        sids = [session_id() for _ in range(n)]
        results = [None] * n

        def grab(i):
            try:
                results[i] = c.acquire(sids[i], owner_id())
            except grpc.RpcError as e:
                results[i] = e.code()

        threads = [threading.Thread(target=grab, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert all(isinstance(r, pb.Lease) for r in results), results


harness.main(globals())
