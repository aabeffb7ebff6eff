"""The Python package (client/python, `import leased`) against the real
leased: the behaviour table of liblease's conformance suite
(client/conformance.c), one case per check, through the package's API;
the TTL the service says; Get; TLS, mutual TLS and the bearer token;
failover between targets; the errors; the keeper (renewing, stopping,
losing, and the stalled daemon: lost before the service's expiry, every
time); and hold().

The package comes from the build tree ($LEASED_PYTHON_LIB, built by
setup.py as `pip install` builds it). With LEASED_TEST_STORE=postgres
every daemon runs over a PostgreSQL of the test's own (harness.py), and
the failover case uses two replicas over one database.

Run: LEASED_BIN=... LEASED_PYTHON_LIB=... /usr/bin/python3 FILE [CASE...]
"""
import atexit
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.environ.get("LEASED_PYTHON_LIB", ""))
import certs  # noqa: E402
import harness  # noqa: E402
import leased  # noqa: E402

LIVE_TTL = "10s"  # a lease that must stay live from one call to the next
SHORT_TTL = "500ms"
EXPIRE_S = 0.6    # outlasts a SHORT_TTL lease
CHAIN = 100

_tmp = tempfile.mkdtemp(prefix="leased-python-client-")
atexit.register(shutil.rmtree, _tmp, True)
_certs = None


def tls_certs():
    global _certs
    if _certs is None:
        _certs = certs.make(os.path.join(_tmp, "certs"))
    return _certs


def sid(tag):
    return "py-%s-%s" % (tag, uuid.uuid4().hex[:12])


def client(d, **options):
    return leased.Client(d.addr, **options)


def expect(error, fn, *args, **kwargs):
    """Calls fn, which must raise error (a class or a tuple of them)."""
    want = getattr(error, "__name__", None) or \
        " or ".join(e.__name__ for e in error)
    try:
        fn(*args, **kwargs)
    except error as e:
        return e
    except leased.LeaseError as e:
        raise AssertionError("want %s, got %r" % (want, e))
    raise AssertionError("want %s, got success" % want)


# --- the behaviour table ---------------------------------------------------

def test_01_fresh_acquire():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("fresh")
        lease = c.acquire(s, "owner-a")
        assert lease.session_id == s and lease.owner == "owner-a"
        assert lease.token >= 1 and lease.expiry_ns > 0


def test_02_renew_extends_and_keeps_the_token():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        lease = c.acquire(sid("renew"), "owner-a")
        r = c.renew(lease)
        assert r.token == lease.token and r.expiry_ns > lease.expiry_ns
        r2 = c.renew(r)
        assert r2.expiry_ns > r.expiry_ns


def test_03_release_lets_another_owner_in_with_a_greater_token():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("release")
        a = c.acquire(s, "owner-a")
        c.release(a)
        b = c.acquire(s, "owner-b")
        assert b.token > a.token


def test_04_a_second_owner_is_held():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("held")
        a = c.acquire(s, "owner-a")
        e = expect(leased.HeldError, c.acquire, s, "owner-b")
        assert e.code == grpc.StatusCode.FAILED_PRECONDITION
        assert c.renew(a).token == a.token  # the holder is untouched


def test_05_same_owner_reacquire_keeps_the_token():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("reacquire")
        a = c.acquire(s, "owner-a")
        b = c.acquire(s, "owner-a")
        assert b.token == a.token and b.expiry_ns > a.expiry_ns


def test_06_acquire_after_release_raises_the_token():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("rerelease")
        a = c.acquire(s, "owner-a")
        c.release(a)
        assert c.acquire(s, "owner-a").token > a.token


def test_07_expiry_takeover_and_a_stale_renew_held():
    with harness.Leased(ttl=SHORT_TTL) as d, client(d) as c:
        s = sid("expiry")
        a = c.acquire(s, "owner-a")
        time.sleep(EXPIRE_S)
        b = c.acquire(s, "owner-b")
        assert b.token > a.token
        expect(leased.HeldError, c.renew, a)
        c.release(a)  # the old owner's release frees nothing
        expect(leased.HeldError, c.acquire, s, "owner-c")


def test_09_renew_after_release_held():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        a = c.acquire(sid("renewrel"), "owner-a")
        c.release(a)
        expect(leased.HeldError, c.renew, a)


def test_10_release_is_idempotent():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        a = c.acquire(sid("idem"), "owner-a")
        c.release(a)
        c.release(a)
        ghost = leased.Lease(sid("never"), "nobody", 7, 0)
        c.release(ghost)
        c.release(ghost)


def test_11_tokens_rise_along_a_chain_of_takeovers():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s, last = sid("chain"), 0
        for i in range(CHAIN):
            lease = c.acquire(s, "owner-%d" % i)
            assert lease.token > last, (i, lease.token, last)
            last = lease.token
            c.release(lease)


def test_12_distinct_sessions_never_contend():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        a = c.acquire(sid("distinct"), "owner-a")
        b = c.acquire(sid("distinct"), "owner-b")
        c.renew(a)
        c.renew(b)


def test_reclaim_on_renew():
    with harness.Leased(ttl=SHORT_TTL) as d, client(d) as c:
        s = sid("reclaim")
        a = c.acquire(s, "owner-a")
        time.sleep(EXPIRE_S)
        r = c.renew(a)
        assert r.token == a.token and r.expiry_ns > a.expiry_ns
        expect(leased.HeldError, c.acquire, s, "owner-b")


def test_a_wrong_owner_or_token_release_frees_nothing():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("wrongrel")
        a = c.acquire(s, "owner-a")
        c.release(leased.Lease(s, "owner-b", a.token, a.expiry_ns))
        c.release(leased.Lease(s, "owner-a", a.token + 1, a.expiry_ns))
        c.release(leased.Lease(s, "owner-a", 0, a.expiry_ns))
        expect(leased.HeldError, c.acquire, s, "owner-c")
        assert c.renew(a).token == a.token


def test_renew_with_token_0_a_wrong_token_or_owner_held():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("renewtok")
        a = c.acquire(s, "owner-a")
        for bad in (leased.Lease(s, "owner-a", 0, a.expiry_ns),
                    leased.Lease(s, "owner-a", a.token + 1, a.expiry_ns),
                    leased.Lease(s, "owner-b", a.token, a.expiry_ns),
                    leased.Lease(sid("renewghost"), "owner-a", a.token,
                                 a.expiry_ns)):
            expect(leased.HeldError, c.renew, bad)
        assert c.renew(a).token == a.token


def test_invalid_arguments_refused_and_the_limits_accepted():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("invalid")
        for session, owner in (("", "owner-a"), (s, ""),
                               ("x" * 513, "owner-a"), (s, "o" * 257),
                               ("bad\udcff", "owner-a"), ("nul\0", "o"),
                               (b"bytes", "owner-a")):
            e = expect(leased.InvalidError, c.acquire, session, owner)
            assert e.code is None  # refused before any call
        # Multi-byte characters count as their UTF-8 bytes: 512 is the
        # limit, 513 over it.
        expect(leased.InvalidError, c.acquire, "é" * 256 + "x", "o")
        at_limit = (s + "x" * 512)[:512]
        lease = c.acquire(at_limit, "o" * 256)
        c.release(lease)
        # Nothing was stored by the refused calls.
        assert c.get(s) is None
        c.acquire(s, "owner-a")


def test_parallel_sessions():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        failures = []

        def work(n):
            try:
                for _ in range(20):
                    lease = c.acquire(sid("parallel"), "worker-%d" % n)
                    c.release(c.renew(lease))
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(e)
        threads = [threading.Thread(target=work, args=(n,))
                   for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures


# --- what the service says, and Get ----------------------------------------

def test_the_ttl_the_service_says_comes_with_each_grant():
    with harness.Leased(ttl="7s") as d, client(d) as c:
        lease = c.acquire(sid("ttl"), "owner-a")
        assert lease.ttl_ns == 7 * 10**9, lease
        assert c.renew(lease).ttl_ns == 7 * 10**9


def test_get_reads_the_last_lease_and_whether_it_is_live():
    with harness.Leased(ttl=SHORT_TTL) as d, client(d) as c:
        s = sid("get")
        assert c.get(s) is None
        a = c.acquire(s, "owner-a")
        got = c.get(s)
        assert (got.owner, got.token, got.live) == ("owner-a", a.token, True)
        assert got.expiry_ns == a.expiry_ns
        time.sleep(EXPIRE_S)
        assert c.get(s).live is False


# --- TLS, mutual TLS, tokens -----------------------------------------------

def test_tls_with_the_ca_and_a_bearer_token():
    cs = tls_certs()
    with harness.Leased(ttl=LIVE_TTL, tls=cs, token="tok-0123456789") as d:
        with client(d, ca=cs.path("ca.pem"), token="tok-0123456789") as c:
            c.release(c.acquire(sid("tls"), "owner-a"))
        with client(d, ca=cs.path("ca.pem"), token="tok-wrong-000") as c:
            e = expect(leased.UnauthenticatedError, c.acquire, sid("tls"),
                       "owner-a")
            assert e.code == grpc.StatusCode.UNAUTHENTICATED
        with client(d, ca=cs.path("ca.pem")) as c:
            expect(leased.UnauthenticatedError, c.acquire, sid("tls"), "o")
        # Another CA's server certificate is not trusted.
        with client(d, ca=cs.path("foreign-ca.pem"), token="tok-0123456789",
                    timeout=1.0) as c:
            expect((leased.UnavailableError, leased.DeadlineError),
                   c.acquire, sid("tls"), "owner-a")


def test_mutual_tls_needs_the_client_certificate():
    cs = tls_certs()
    with harness.Leased(ttl=LIVE_TTL, tls=cs,
                        args=["--tls-client-ca", cs.path("ca.pem")]) as d:
        with client(d, ca=cs.path("ca.pem"), cert=cs.path("client1.pem"),
                    key=cs.path("client1.key")) as c:
            c.release(c.acquire(sid("mtls"), "owner-a"))
        with client(d, ca=cs.path("ca.pem"), timeout=1.0) as c:
            expect((leased.UnavailableError, leased.DeadlineError),
                   c.acquire, sid("mtls"), "owner-a")


def test_server_name_checks_the_certificate_against_another_name():
    cs = tls_certs()
    with harness.Leased(ttl=LIVE_TTL, tls=cs) as d:
        with client(d, ca=cs.path("ca.pem"), server_name="localhost") as c:
            c.acquire(sid("name"), "owner-a")
        with client(d, ca=cs.path("ca.pem"), server_name="elsewhere.test",
                    timeout=1.0) as c:
            expect((leased.UnavailableError, leased.DeadlineError),
                   c.acquire, sid("name"), "owner-a")


def test_bad_options_refused_before_any_call():
    for target, options in (
            ("10.1.2.3:7443", {}),  # plaintext beyond loopback
            ("example.test:7443", {}),
            ("127.0.0.1", {}),  # no port
            ("unix:", {}),
            ("127.0.0.1:7443", {"token": "bad token"}),
            ("127.0.0.1:7443", {"cert": "c.pem"}),  # cert without key, ca
            ("127.0.0.1:7443", {"timeout": 0}),
            (",".join(["127.0.0.1:1"] * 9), {}),
            ("127.0.0.1:7443", {"ca": os.path.join(_tmp, "missing.pem")})):
        try:
            leased.Client(target, **options)
        except leased.InvalidError as e:
            assert e.code is None
        else:
            raise AssertionError("accepted %s %s" % (target, options))
    # Loopback in its forms, and unix sockets, may be plaintext.
    for target in ("localhost:1", "127.9.9.9:1", "[::1]:1", "unix:/x"):
        leased.Client(target).close()


# --- failover and the errors -----------------------------------------------

def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % s.getsockname()[1]


def test_failover_skips_a_target_that_is_down():
    with harness.Leased(ttl=LIVE_TTL) as d:
        with leased.Client([closed_port(), d.addr], timeout=3.0) as c:
            lease = c.acquire(sid("failover"), "owner-a")
            # The client stays with the one that answered.
            assert c._targets[c._current].address == d.addr
            c.release(c.renew(lease))


if os.environ.get("LEASED_TEST_STORE") == "postgres":
    def test_failover_between_replicas_over_one_database():
        db = harness.fresh_database()
        with harness.Leased(ttl=LIVE_TTL, postgres=db) as a, \
                harness.Leased(ttl=LIVE_TTL, postgres=db) as b:
            with leased.Client([a.addr, b.addr], timeout=5.0) as c:
                s = sid("replicas")
                lease = c.acquire(s, "owner-a")
                used = c._targets[c._current].address
                (a if used == a.addr else b).stop()
                r = c.renew(lease)  # through the other replica
                assert r.token == lease.token
                assert c._targets[c._current].address != used
                expect(leased.HeldError, c.acquire, s, "owner-b")


def test_nothing_listening_is_unavailable_within_the_timeout():
    with leased.Client(closed_port(), timeout=1.0) as c:
        start = time.monotonic()
        expect((leased.UnavailableError, leased.DeadlineError), c.acquire,
               sid("down"), "owner-a")
        assert time.monotonic() - start < 3.0


def test_every_status_maps_as_liblease_maps_it():
    want = {
        grpc.StatusCode.FAILED_PRECONDITION: leased.HeldError,
        grpc.StatusCode.UNIMPLEMENTED: leased.UnsupportedError,
        grpc.StatusCode.INVALID_ARGUMENT: leased.InvalidError,
        grpc.StatusCode.DEADLINE_EXCEEDED: leased.DeadlineError,
        grpc.StatusCode.PERMISSION_DENIED: leased.DeniedError,
        grpc.StatusCode.UNAUTHENTICATED: leased.UnauthenticatedError,
    }
    for code in grpc.StatusCode:
        if code == grpc.StatusCode.OK:
            continue
        e = leased.errors.from_status(code, "why")
        assert type(e) is want.get(code, leased.UnavailableError), code
        assert e.code == code and "why" in str(e)


def test_a_policy_refusal_is_denied():
    policy = os.path.join(_tmp, "policy")
    with open(policy, "w") as f:
        f.write("team-a sessions=a/ owners=host-a\n")
    tokens = os.path.join(_tmp, "tokens")
    harness.write_private(tokens, "team-a tok-team-a-0123456789\n")
    with harness.Leased(ttl=LIVE_TTL, args=["--auth-token-file", tokens,
                                            "--policy-file", policy]) as d:
        with client(d, token="tok-team-a-0123456789") as c:
            c.acquire("a/1", "host-a-1")
            e = expect(leased.DeniedError, c.acquire, "b/1", "host-a-1")
            assert e.code == grpc.StatusCode.PERMISSION_DENIED


def test_a_server_without_the_calls_is_unsupported():
    """A gRPC server that serves no lease service (here one of grpcio's,
    with no services at all) answers UNIMPLEMENTED."""
    from concurrent import futures
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with leased.Client("127.0.0.1:%d" % port, timeout=2.0) as c:
            e = expect(leased.UnsupportedError, c.acquire, "x", "owner-a")
            assert e.code == grpc.StatusCode.UNIMPLEMENTED
            expect(leased.UnsupportedError, c.get, "x")
    finally:
        server.stop(None)


# --- waiting for a lease ---------------------------------------------------

METRICS = ["--metrics-listen", "127.0.0.1:0"]


def waiting(d):
    """Whether a wait() is in leased's line."""
    return d.metrics()[("leased_waiting_calls", ())] == 1


def refused(d):
    """Whether an acquire was refused (a wait() asking again)."""
    return d.metrics().get(("leased_requests_total", (
        ("code", "FAILED_PRECONDITION"), ("method", "Acquire"))), 0) >= 1


def wait_in_thread(c, s, owner):
    """c.wait(s, owner) in a thread: (the thread, its result list)."""
    got = []
    t = threading.Thread(target=lambda: got.append(
        c.wait(s, owner, time.monotonic() + 30)))
    t.start()
    return t, got


def until(what, cond):
    deadline = time.monotonic() + 20
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_wait_is_granted_when_the_holder_releases():
    """wait() waits in leased's line while another owner holds the lease,
    and is granted once the holder released it, with a greater token."""
    with harness.Leased(ttl=LIVE_TTL, args=METRICS) as d, client(d) as c:
        s = sid("wait")
        a = c.acquire(s, "owner-a")
        t, got = wait_in_thread(c, s, "owner-b")
        until("owner-b never waited", lambda: waiting(d))
        assert t.is_alive() and not got
        c.release(a)
        t.join(timeout=20)
        assert got and got[0].owner == "owner-b" and got[0].token > a.token
        # The holder's own wait, and a free session's, are answered at once
        # as acquire's.
        assert c.wait(s, "owner-b").token == got[0].token
        assert c.wait(sid("free"), "owner-c").token >= 1


def test_wait_asks_again_where_wait_is_not_served():
    """Against a server of Mecatl's contract alone (Wait UNIMPLEMENTED),
    wait() asks again every 250 ms: granted once the holder released."""
    from mecatl_only import MecatlOnly
    with harness.Leased(ttl=LIVE_TTL, args=METRICS) as d, \
            MecatlOnly(d.addr) as front, \
            leased.Client(front, timeout=5.0) as c:
        s = sid("waitpoll")
        a = c.acquire(s, "owner-a")
        t, got = wait_in_thread(c, s, "owner-b")
        until("owner-b never asked", lambda: refused(d))
        assert t.is_alive() and not got and not waiting(d)
        c.release(a)
        t.join(timeout=20)
        assert got and got[0].owner == "owner-b" and got[0].token > a.token


def test_wait_ends_held_at_its_deadline():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("waitheld")
        c.acquire(s, "owner-a")
        start = time.monotonic()
        expect(leased.HeldError, c.wait, s, "owner-b", start + 0.5)
        assert time.monotonic() - start >= 0.5
        expect(leased.InvalidError, c.wait, s, "", start + 0.5)


# --- watching changes ------------------------------------------------------

def collect(w, got, n):
    """Iterates w in a thread, into got, until n events or its end (an
    exception, if any, appended last): the thread."""
    def run():
        try:
            for ev in w:
                got.append(ev)
                if len(got) >= n:
                    break
        except leased.LeaseError as e:
            got.append(e)
    t = threading.Thread(target=run)
    t.start()
    return t


def brief(events):
    return [(e.kind, e.lease.session_id, e.lease.owner, e.lease.token)
            for e in events]


def watching(c, tag, n):
    """A prefix of its own with one change of owner before it (revisions
    1 and 2 of a new store), and a watch of it after that, iterated in a
    thread until n events: (the prefix, the watch, its events, the
    thread)."""
    p = sid(tag) + "/"
    c.release(c.acquire(p + "first", "owner-z"))
    w = c.watch(prefix=p, after=2, deadline=time.monotonic() + 60)
    got = []
    return p, w, got, collect(w, got, n)


def test_watch_tells_each_change_in_revision_order():
    """Every change of owner under the prefix, as answered, with the
    revisions that follow one another (renewals are not changes); an
    expiry told with no call; close() ends the iteration."""
    with harness.Leased(ttl="1s") as d, client(d) as c:
        p = sid("watch") + "/"
        c.release(c.acquire(p + "x", "owner-z"))        # revisions 1, 2
        w = c.watch(prefix=p, after=2)
        got = []
        t = collect(w, got, 6)
        a = c.acquire(p + "s1", "owner-a")
        c.release(a)
        b = c.renew(c.acquire(p + "s1", "owner-b"))
        c.release(b)
        e = c.acquire(p + "s2", "owner-e")               # left to expire
        t.join(timeout=20)
        assert len(got) == 6, got
        assert [ev.revision for ev in got] == list(range(3, 9)), got
        assert brief(got) == [
            (leased.GRANTED, p + "s1", "owner-a", a.token),
            (leased.RELEASED, p + "s1", "owner-a", a.token),
            (leased.GRANTED, p + "s1", "owner-b", b.token),
            (leased.RELEASED, p + "s1", "owner-b", b.token),
            (leased.GRANTED, p + "s2", "owner-e", e.token),
            (leased.EXPIRED, p + "s2", "owner-e", e.token)], got
        assert got[4].lease.expiry_ns == e.expiry_ns
        assert w.revision == 8
        # A watch of one session, from now, stopped by close() as it
        # waits for the next change.
        w = c.watch(p + "s1")
        got = []
        t = collect(w, got, 1)
        time.sleep(0.3)
        w.close()
        t.join(timeout=10)
        assert not t.is_alive() and got == [], got


def test_watch_resumes_from_its_revision_across_a_kill():
    """A watch goes on through kill -9 and a restart of leased, from the
    last revision it covered: no gap, no duplicate, and every answered
    change among what it tells."""
    with harness.Leased(ttl=LIVE_TTL, listen=closed_port()) as d, \
            leased.Client(d.addr, timeout=2.0) as c:
        p, w, got, t = watching(c, "resume", 12)
        answered = []

        def changes(tag, n):
            for i in range(n):
                lease = c.acquire("%s%s%d" % (p, tag, i), "owner-a")
                c.release(lease)
                answered.extend([(leased.GRANTED, lease.token),
                                 (leased.RELEASED, lease.token)])

        changes("a", 3)
        until("the first events", lambda: len(got) >= 6)
        d.kill9()
        d.start()
        changes("b", 3)
        t.join(timeout=30)
        w.close()
        assert len(got) == 12 and not any(
            isinstance(e, Exception) for e in got), got
        assert [ev.revision for ev in got] == list(range(3, 15)), got
        assert [(ev.kind, ev.lease.token) for ev in got] == answered
        assert w.revision == 14


def test_watch_of_a_revision_no_longer_kept_is_gone():
    with harness.Leased(ttl=LIVE_TTL, args=["--watch-history", "3"]) as d, \
            client(d) as c:
        p = sid("gone") + "/"
        for s in ("a", "b", "c"):
            c.release(c.acquire(p + s, "owner-a"))      # revisions 1..6
        with c.watch(prefix=p, after=3) as w:
            got = [next(w) for _ in range(3)]
        assert [ev.revision for ev in got] == [4, 5, 6]
        assert [(ev.kind, ev.lease.session_id) for ev in got] == [
            (leased.RELEASED, p + "b"), (leased.GRANTED, p + "c"),
            (leased.RELEASED, p + "c")], got
        assert w.revision == 6
        # (After the one above: over PostgreSQL, the replica's copy of
        # the events has then read them all.)
        with c.watch(prefix=p, after=1) as w:
            e = expect(leased.GoneError, next, w)
            assert e.code == grpc.StatusCode.OUT_OF_RANGE
            assert "no longer kept" in e.details, e.details


def test_watch_errors_deadline_and_where_it_is_not_served():
    from mecatl_only import MecatlOnly
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        start = time.monotonic()
        w = c.watch(sid("quiet"), deadline=start + 0.5)
        expect(leased.DeadlineError, next, w)
        assert time.monotonic() - start >= 0.5
        expect(leased.InvalidError, c.watch)
        expect(leased.InvalidError, c.watch, "s", prefix="p")
        expect(leased.InvalidError, c.watch, "")
        expect(leased.InvalidError, c.watch, "x" * 513)
        expect(leased.InvalidError, c.watch, "s", after=-1)
        with MecatlOnly(d.addr) as front, \
                leased.Client(front, timeout=2.0) as m:
            e = expect(leased.UnsupportedError, next,
                       m.watch(prefix=""))
            assert e.code == grpc.StatusCode.UNIMPLEMENTED


if os.environ.get("LEASED_TEST_STORE") == "postgres":
    def test_watch_moves_to_another_replica_without_gap_or_duplicate():
        """Two replicas over one database: the watch's replica stops, and
        it goes on at the other from its revision."""
        db = harness.fresh_database()
        with harness.Leased(ttl=LIVE_TTL, postgres=db) as a, \
                harness.Leased(ttl=LIVE_TTL, postgres=db) as b, \
                leased.Client([a.addr, b.addr], timeout=3.0) as c, \
                leased.Client(b.addr, timeout=3.0) as cb:
            p, w, got, t = watching(c, "replicas", 8)
            tokens = []
            for i in range(2):
                lease = cb.acquire("%sa%d" % (p, i), "owner-a")
                cb.release(lease)
                tokens += [lease.token, lease.token]
            until("the first events", lambda: len(got) >= 4)
            a.stop()
            for i in range(2):
                lease = cb.acquire("%sb%d" % (p, i), "owner-a")
                cb.release(lease)
                tokens += [lease.token, lease.token]
            t.join(timeout=30)
            w.close()
            assert [ev.revision for ev in got] == list(range(3, 11)), got
            assert [ev.lease.token for ev in got] == tokens


# --- the keeper ------------------------------------------------------------

class Events:
    """What a keeper's callbacks said, for a test to wait on."""

    def __init__(self):
        self.lost = []
        self.trouble = []
        self.cond = threading.Condition()

    def on_lost(self, lease, error):
        with self.cond:
            self.lost.append((time.monotonic(), time.time_ns(), lease, error))
            self.cond.notify_all()

    def on_trouble(self, lease, error):
        with self.cond:
            self.trouble.append(error)
            self.cond.notify_all()

    def wait_lost(self, timeout):
        with self.cond:
            assert self.cond.wait_for(lambda: self.lost, timeout), "not lost"
            return self.lost[0]


def test_keeper_renews_across_several_ttls():
    with harness.Leased(ttl="1s") as d, client(d) as c:
        ev = Events()
        k = c.keep(sid("keep"), "owner-a", on_lost=ev.on_lost)
        first = k.lease
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            assert k.valid()
            time.sleep(0.05)
        assert k.lease.token == first.token
        assert k.lease.expiry_ns > first.expiry_ns + 2 * 10**9
        assert not ev.lost
        # The deadline: less than a TTL ahead, and in the future.
        assert 0 < k.deadline() - time.monotonic() < 1.0
        k.stop()
        assert not ev.lost


def test_keeper_stop_releases_and_a_lost_lease_is_not_released():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("stop")
        k = c.keep(s, "owner-a")
        k.stop()
        k.stop()  # idempotent
        b = c.acquire(s, "owner-b")
        assert b.token > k.lease.token


def test_keeper_loses_a_lease_taken_behind_its_back():
    with harness.Leased(ttl="3s") as d, client(d) as c:
        s = sid("taken")
        ev = Events()
        k = c.keep(s, "owner-a", on_lost=ev.on_lost)
        c.release(k.lease)
        thief = c.acquire(s, "owner-b")
        _, _, lease, error = ev.wait_lost(3.0)
        assert isinstance(error, leased.HeldError), error
        assert lease.token == k.lease.token
        assert not k.valid() and k.lost
        k.stop()  # does not release the thief's lease
        assert c.renew(thief).token == thief.token


def test_keeper_refuses_a_ttl_longer_than_the_services_and_releases():
    with harness.Leased(ttl="2s") as d, client(d) as c:
        s = sid("longttl")
        expect(leased.InvalidError, c.keep, s, "owner-a", ttl=5.0)
        c.acquire(s, "owner-b")  # released, so free for another
        expect(leased.InvalidError, c.keep, sid("margin"), "owner-a",
               margin=2.0)
        k = c.keep(sid("short"), "owner-a", ttl=1.0)
        assert k.deadline() - time.monotonic() < 1.0
        k.stop()


def wait_renewals(k, n, timeout):
    """Waits (bounded) until keeper k has renewed its lease n times."""
    expiry, end = k.lease.expiry_ns, time.monotonic() + timeout
    for _ in range(n):
        while k.lease.expiry_ns == expiry:
            assert time.monotonic() < end, "no renewal"
            time.sleep(0.01)
        expiry = k.lease.expiry_ns


def test_keeper_is_lost_before_a_stalled_daemons_expiry_every_time():
    """The daemon stops answering (SIGSTOP) after the acquire, or after a
    renewal or two: the keeper's renewals get no answer, and lost must
    fire, and valid() turn false, before the lease's expiry as the
    service stated it with the last grant (same host, one wall clock):
    from then on the service may give the session to another."""
    with harness.Leased(ttl="2s") as d, client(d, timeout=1.0) as c:
        for renewals in (0, 1, 2):
            ev = Events()
            k = c.keep(sid("stall"), "owner-a", on_lost=ev.on_lost,
                       on_trouble=ev.on_trouble)
            wait_renewals(k, renewals, 3.0)
            d.proc.send_signal(signal.SIGSTOP)
            try:
                mono, wall, lease, error = ev.wait_lost(4.0)
                assert not k.valid()
                # Lost at the deadline, not before (a slow machine makes it
                # later, never earlier)...
                assert mono >= k.deadline(), (mono, k.deadline())
                # ...and before the expiry of the last grant the keeper had,
                # which is what the service would hold it to.
                assert wall < k.lease.expiry_ns, \
                    "after %d renewals: lost %.3f s after the expiry" % (
                        renewals, (wall - k.lease.expiry_ns) / 1e9)
                assert not isinstance(error, leased.HeldError), error
            finally:
                d.proc.send_signal(signal.SIGCONT)
            k.stop()


# --- hold() ----------------------------------------------------------------

def test_hold_raises_lease_lost_in_the_holding_thread():
    with harness.Leased(ttl="3s") as d, client(d) as c:
        s = sid("hold")
        steps, finished = 0, False
        try:
            with c.hold(s, "owner-a") as k:
                c.release(k.lease)
                c.acquire(s, "owner-b")
                end = time.monotonic() + 5.0
                while time.monotonic() < end:  # Python work, interrupted
                    steps += 1
                    time.sleep(0.001)
                finished = True
        except leased.LeaseLost as e:
            assert e.session_id == s
            assert isinstance(e.cause, leased.HeldError), e.cause
        assert steps > 0 and not finished, "the block ran to its end"
        got = c.get(s)
        assert got.owner == "owner-b"  # the lost lease was not released


def test_hold_calls_cancel_instead_when_given():
    with harness.Leased(ttl="3s") as d, client(d) as c:
        s = sid("cancel")
        stop = threading.Event()
        try:
            with c.hold(s, "owner-a", cancel=stop.set) as k:
                c.release(k.lease)
                c.acquire(s, "owner-b")
                assert stop.wait(5.0), "cancel was not called"
            raise AssertionError("no LeaseLost on leaving the block")
        except leased.LeaseLost as e:
            assert isinstance(e.cause, leased.HeldError)


def test_hold_releases_on_leaving_the_block_and_passes_errors_through():
    with harness.Leased(ttl=LIVE_TTL) as d, client(d) as c:
        s = sid("holdok")
        with c.hold(s, "owner-a") as k:
            assert k.valid()
            token = k.lease.token
        assert c.acquire(s, "owner-b").token > token
        try:
            with c.hold(sid("holderr")):
                raise KeyError("mine")
        except KeyError:
            pass
        expect(leased.HeldError, c.hold(s).__enter__)


if __name__ == "__main__":
    harness.main(globals())
