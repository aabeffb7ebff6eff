"""Health (grpc.health.v1 Check and Watch) and the graceful drain of the
real leased: SERVING while storage works, NOT_SERVING while it fails and
once a SIGTERM began the drain; the drain answers every call in progress
and exits 0.
"""
import os
import shutil
import signal
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
    with Leased(ttl="10s", args=["--drain-timeout", "500ms"]) as d:
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
            time.sleep(0.3)
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
        assert took < 1.2, took
        assert d.proc.wait(timeout=15) == 0, d.log_text()
        assert "msg=cancelling_calls after_ms=500" in d.log_text()
        stream.cancel()


def probe(*args, env=None):
    p = subprocess.run([os.environ["LEASED_PROBE_BIN"]] + list(args),
                       capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, **(env or {})))
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
