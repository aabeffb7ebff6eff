"""Health (grpc.health.v1 Check and Watch) and the graceful drain of the
real leased: SERVING while storage works, NOT_SERVING while it fails and
once a SIGTERM began the drain; the drain answers every call in progress
and exits 0.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import grpc

import certs
import harness
from harness import Leased, expect_code, status_of

LEASE_SERVICE = "mecatl.driver.v1.SessionLeaseService"
OK = grpc.StatusCode.OK
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def test_check_serving_for_the_server_and_the_lease_service():
    with Leased() as d:
        c = d.client()
        assert c.health("") == "SERVING"
        assert c.health(LEASE_SERVICE) == "SERVING"
        expect_code(grpc.StatusCode.NOT_FOUND, c.health, "no.Such")
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, c.raw,
                    harness.HEALTH + "Check", b"\xff\xff\xff")


def test_health_needs_no_token_but_leases_do():
    with Leased(token="tok") as d:
        anon = harness.Client(d.channel())
        assert anon.health() == "SERVING"
        expect_code(grpc.StatusCode.UNAUTHENTICATED, anon.acquire, "s", "o")
        assert d.client().acquire("s", "o").token == 1


def test_not_serving_while_storage_fails():
    with Leased(ttl="5s") as d:
        c = d.client()
        stream, statuses = c.watch(timeout=30)
        assert next(statuses) == "SERVING"
        with harness.WriteLock(d.db_path):
            assert status_of(c.acquire, "s", "alice") == \
                grpc.StatusCode.UNAVAILABLE
            assert c.health() == "NOT_SERVING"
            assert next(statuses) == "NOT_SERVING"
        # The next commit works again.
        assert c.acquire("s", "bob").token == 1
        assert c.health() == "SERVING"
        assert next(statuses) == "SERVING"
        stream.cancel()


def test_watch_unknown_service_stays_open():
    with Leased() as d:
        stream, statuses = d.client().watch("no.Such", timeout=30)
        assert next(statuses) == "SERVICE_UNKNOWN"
        stream.cancel()
        # A cancelled watcher is forgotten: the daemon still stops at once.
        start = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - start < 3


def test_watchers_see_not_serving_then_the_end_on_sigterm():
    with Leased() as d:
        c = d.client()
        streams = [c.watch(timeout=30) for _ in range(3)]
        for _, statuses in streams:
            assert next(statuses) == "SERVING"
        d.proc.send_signal(signal.SIGTERM)
        for stream, statuses in streams:
            assert list(statuses) == ["NOT_SERVING"]  # then the end
            assert stream.code() == OK, stream.code()
        assert d.proc.wait(timeout=10) == 0, d.log_text()


def test_drain_answers_every_call_in_progress():
    """100 calls waiting for a commit when SIGTERM arrives (all of them
    queued at the daemon, on one connection): every one is answered OK,
    stored, and the daemon exits 0. Closing the connection right after the
    last reply used to reset it before the client read a reply or two."""
    with Leased(ttl="10s", args=["--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        c.acquire("warm", "alice")
        results = {}
        start = threading.Barrier(101)

        def call(i):
            start.wait()
            results[i] = status_of(c.acquire, "drain-%d" % i, "owner-%d" % i)
        threads = [threading.Thread(target=call, args=(i,))
                   for i in range(100)]
        with harness.WriteLock(d.db_path):
            for t in threads:
                t.start()
            start.wait()
            deadline = time.monotonic() + 10
            while d.metrics()[("leased_queue_depth", ())] < 100:
                assert time.monotonic() < deadline, "calls never queued"
                time.sleep(0.02)
            d.proc.send_signal(signal.SIGTERM)
            d.wait_log(r"msg=stopping signal=TERM")
            time.sleep(0.3)
            assert d.proc.poll() is None, "exited with calls in flight"
            # Arrived during the drain: refused, nothing stored.
            expect_code(grpc.StatusCode.UNAVAILABLE, d.client().acquire,
                        "late", "bob")
        for t in threads:
            t.join(10)
        assert sorted(results) == list(range(100))
        assert set(results.values()) == {OK}, results
        d.close_channels()
        assert d.proc.wait(timeout=15) == 0, d.log_text()
        # All of them were stored.
        d.start()
        c2 = d.client()
        for i in range(0, 100, 7):
            expect_code(grpc.StatusCode.FAILED_PRECONDITION, c2.acquire,
                        "drain-%d" % i, "someone-else")
        assert c2.acquire("late", "carol").token == 1


def test_drain_timeout_cancels_what_is_left():
    with Leased(ttl="10s", args=["--drain-timeout", "500ms",
                                 "--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        stream, statuses = c.watch(timeout=60)
        assert next(statuses) == "SERVING"
        out = {}
        def late():
            try:
                c.acquire("late", "bob")
                out["code"] = OK
            except grpc.RpcError as e:
                out["code"], out["details"] = e.code(), e.details()
        with harness.WriteLock(d.db_path):
            t = threading.Thread(target=late)
            t.start()
            deadline = time.monotonic() + 10
            while d.metrics()[("leased_queue_depth", ())] < 1:
                assert time.monotonic() < deadline, "the call never queued"
                time.sleep(0.02)
            start = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            # The busy timeout (2 s) outlasts the drain: the call is
            # cancelled at 500 ms (not failed at 2 s), then the daemon
            # finishes its commit and exits 0.
            t.join(10)
            took = time.monotonic() - start
        # gRPC's own words for the cancel; clients must treat it as
        # "outcome unknown", like any lost reply.
        assert out == {"code": grpc.StatusCode.UNAVAILABLE,
                       "details": "Cancelling all calls"}, out
        assert took < 1.8, took  # well before the busy timeout
        assert d.proc.wait(timeout=15) == 0, d.log_text()
        assert "msg=cancelling_calls after_ms=500" in d.log_text()
        stream.cancel()


def _drain_under_load(args, retries):
    """8 threads call Acquire in a loop on 3 channels, each on a new
    session, until leased is gone or (retries not None) the thread was
    refused `retries` times; SIGTERM arrives once 200 calls were answered.
    Checks that every call ended OK or UNAVAILABLE (refused while
    draining, cut by the drain timeout, or no daemon any more: all
    retryable), never CANCELLED or anything else, that leased exited 0,
    and that every OK was stored (leased restarted on the same data
    directory). Returns leased's log of the drain and how long the drain
    took (seconds)."""
    with Leased(ttl="60s", args=args) as d:
        clients = [d.client() for _ in range(3)]
        results = []  # (session, code, details), appended by the threads
        gone = threading.Event()  # leased has exited
        end = time.monotonic() + 30

        def loop(k):
            c = clients[k % len(clients)]
            refused = 0
            for i in range(20000):
                session = "load-%d-%d" % (k, i)
                try:
                    c.acquire(session, "owner-%d" % k)
                    results.append((session, OK, ""))
                except grpc.RpcError as e:
                    results.append((session, e.code(), e.details()))
                    refused += 1
                if (gone.is_set() or time.monotonic() > end or
                        (retries is not None and refused >= retries)):
                    return
        threads = [threading.Thread(target=loop, args=(k,))
                   for k in range(8)]
        for t in threads:
            t.start()
        while len(results) < 200 and time.monotonic() < end:
            time.sleep(0.01)
        d.proc.send_signal(signal.SIGTERM)
        sigterm = time.monotonic()
        try:
            rc = d.proc.wait(timeout=15)
            drain_s = time.monotonic() - sigterm
        finally:
            gone.set()
            for t in threads:
                t.join(15)
        assert not any(t.is_alive() for t in threads), "threads still call"
        log = d.log_text()
        assert rc == 0, log
        bad = [r for r in results if r[1] not in (OK, UNAVAILABLE)]
        assert not bad, (len(bad), len(results), bad[:10])
        ok = {s for s, code, _ in results if code == OK}
        assert len(ok) >= 200, (len(ok), results[:10])
        assert any(detail == "draining" for _, _, detail in results)
        d.close_channels()
        d.start()
        stored, token = set(), ""
        while True:
            page = d.client().list("load-", page_size=1000, page_token=token)
            stored |= {l.session_id for l in page.leases}
            token = page.next_page_token
            if not token:
                break
        assert ok <= stored, (len(ok - stored), sorted(ok - stored)[:10])
        return log, drain_s


def test_drain_under_load_answers_ok_or_unavailable():
    """Clients that retry a refused call a few times, then stop: each
    call in progress at SIGTERM is answered OK and stored, each later one
    refused UNAVAILABLE, and the drain ends with no call left to cancel.
    Calls that arrived once the requests armed before the drain were used
    up used to wait inside gRPC until leased shut it down, and gRPC then
    cancelled them (CANCELLED: one per client thread)."""
    log, _ = _drain_under_load([], retries=5)
    assert "msg=cancelling_calls" not in log, log


def test_drain_under_calls_that_never_stop():
    """Clients that keep calling until leased is gone hold the drain until
    --drain-timeout (each refusal is a call in progress); what is cut
    then ends UNAVAILABLE too."""
    _, drain_s = _drain_under_load(["--drain-timeout", "1s"], retries=None)
    assert drain_s >= 1.0, drain_s


def probe(*args, env=None, stderr=False):
    """(exit code, stdout), and stderr too if asked."""
    p = subprocess.run([os.environ["LEASED_PROBE_BIN"]] + list(args),
                       capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, **(env or {})))
    if stderr:
        return p.returncode, p.stdout.strip(), p.stderr
    return p.returncode, p.stdout.strip()


def test_probe_says_serving_or_not():
    with Leased(token="tok") as d:  # health needs no token
        assert probe(d.addr) == (0, d.addr + " SERVING")
        assert probe(env={"LEASED_LISTEN": d.addr + ",unix:/x"}) == \
            (0, d.addr + " SERVING")
        with harness.WriteLock(d.db_path):
            status_of(d.client().acquire, "s", "alice")
            assert probe(d.addr) == (1, d.addr + " NOT_SERVING")
        addr = d.addr
    assert probe(addr, "--timeout", "300ms") == (1, addr + " UNREACHABLE")
    assert probe("--bogus")[0] == 2


def test_probe_names_the_status_of_a_failed_call():
    """A failed Check is said by its gRPC status's name and number:
    refused (UNAVAILABLE), and a server that accepts the connection but
    never speaks (DEADLINE_EXCEEDED), so the name is the call's own."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        addr = "127.0.0.1:%d" % silent.getsockname()[1]
        rc, out, err = probe(addr, "--timeout", "300ms", stderr=True)
        assert (rc, out) == (1, addr + " UNREACHABLE")
        assert err.startswith("leased-probe: DEADLINE_EXCEEDED (4)"), err
    # The port is closed now: nothing listens there.
    rc, out, err = probe(addr, "--timeout", "2s", stderr=True)
    assert (rc, out) == (1, addr + " UNREACHABLE")
    assert err.startswith("leased-probe: UNAVAILABLE (14): "), err
    assert "status 14" not in err


def test_probe_over_tls_and_a_unix_socket():
    tmp = tempfile.mkdtemp(prefix="leased-probe-")
    try:
        c = certs.make(os.path.join(tmp, "certs"))
        sock = "unix:" + os.path.join(tmp, "s.sock")
        with Leased(tls=c, args=["--listen", sock]) as d:
            assert probe(d.addr, "--tls-ca", c.path("ca.pem"))[0] == 0
            assert probe(d.addr)[0] == 1  # plaintext to a TLS port
            assert probe(sock) == (0, sock + " SERVING")
    finally:
        shutil.rmtree(tmp, True)


harness.main(globals())
