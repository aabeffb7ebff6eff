"""Prometheus metrics of the real leased (--metrics-listen), scraped over
HTTP and parsed with prometheus_client's own parser (Debian's
python3-prometheus-client): every metric is there with its type, and the
counters move exactly as calls are made.
"""
import subprocess
import threading
import time
import urllib.error
import urllib.request

import grpc

import harness
from harness import Leased, expect_code, status_of

METRICS = ["--metrics-listen", "127.0.0.1:0"]
HELD = grpc.StatusCode.FAILED_PRECONDITION


def value(m, name, **labels):
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def requests(m, method, code="OK"):
    return value(m, "leased_requests_total", method=method, code=code)


def test_every_metric_is_exposed():
    # A TTL (the restart quarantine) that outlasts the first scrape on a
    # loaded machine.
    with Leased(args=METRICS, ttl="10s") as d:
        m = d.metrics()
        names = {name for name, _ in m}
        for want in ["leased_requests_total",
                     "leased_request_duration_seconds_bucket",
                     "leased_request_duration_seconds_count",
                     "leased_leases_live", "leased_lease_entries",
                     "leased_takeovers_total", "leased_expiries_total",
                     "leased_reclaims_total", "leased_revokes_total",
                     "leased_quarantine_active",
                     "leased_quarantine_remaining_seconds",
                     "leased_commit_batch_changes_bucket",
                     "leased_commit_duration_seconds_sum",
                     "leased_fsync_duration_seconds_count",
                     "leased_queue_depth", "leased_waiting_calls",
                     "leased_storage_failing",
                     "leased_clock_steps_total", "leased_start_time_seconds",
                     "leased_build_info"]:
            assert want in names, (want, sorted(names))
        version = subprocess.run([harness.leased_bin(), "--version"],
                                 capture_output=True, text=True).stdout.split()[1]
        assert value(m, "leased_build_info", version=version) == 1
        assert abs(value(m, "leased_start_time_seconds") - time.time()) < 60
        # Just started: the restart quarantine (one TTL) is on.
        assert value(m, "leased_quarantine_active") == 1
        assert 0 < value(m, "leased_quarantine_remaining_seconds") <= 10


def test_request_counters_and_latency_move():
    with Leased(args=METRICS, ttl="5s") as d:
        c = d.client()
        before = d.metrics()
        a = c.acquire("m1", "alice")
        b = c.acquire("m2", "alice")
        c.renew(a)
        c.renew(a)
        expect_code(HELD, c.acquire, "m1", "bob")
        c.release(b)
        expect_code(grpc.StatusCode.UNIMPLEMENTED, c.raw, "/x.Y/Z", b"")
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, c.raw, "Acquire",
                    b"\xff")
        m = d.metrics()
        assert requests(m, "Acquire") - requests(before, "Acquire") == 2
        assert requests(m, "Acquire", "FAILED_PRECONDITION") == 1
        assert requests(m, "Acquire", "INVALID_ARGUMENT") == 1
        assert requests(m, "Renew") == 2
        assert requests(m, "Release") == 1
        assert requests(m, "other", "UNIMPLEMENTED") == 1
        count = value(m, "leased_request_duration_seconds_count",
                      method="Acquire")
        assert count == 4, count
        assert value(m, "leased_request_duration_seconds_bucket",
                     method="Acquire", le="+Inf") == 4
        assert value(m, "leased_request_duration_seconds_sum",
                     method="Acquire") > 0
        assert value(m, "leased_takeovers_total") == 2
        # Two takeovers and a release were committed and fsynced, one
        # call after the other; the renewals wrote nothing.
        assert value(m, "leased_fsync_duration_seconds_count") >= 1
        assert value(m, "leased_commit_duration_seconds_count") == 3
        assert value(m, "leased_commit_batch_changes_count") == 3
        assert value(m, "leased_queue_depth") == 0


def test_expiries_reclaims_and_live_leases():
    # 3 s: the three leases stay live until the census sees them, on a
    # loaded machine too.
    with Leased(args=METRICS, ttl="3s") as d:
        c = d.client()
        time.sleep(3.1)  # past the restart quarantine
        a = c.acquire("r", "alice")
        c.acquire("x", "alice")
        c.acquire("y", "alice")
        deadline = time.monotonic() + 5
        while value(d.metrics(), "leased_leases_live") != 3:
            assert time.monotonic() < deadline, d.metrics()
            time.sleep(0.1)
        time.sleep(3.2)  # all three expire
        c.renew(a)  # nobody took "r": reclaimed
        c.acquire("x", "bob")  # "x" taken over after its expiry
        m = d.metrics()
        assert value(m, "leased_reclaims_total") == 1
        assert value(m, "leased_expiries_total") >= 1
        assert value(m, "leased_takeovers_total") == 4
        assert value(m, "leased_quarantine_active") == 0
        # "y" is collected a TTL after it expired: one more expiry.
        deadline = time.monotonic() + 10
        while value(d.metrics(), "leased_expiries_total") < 2:
            assert time.monotonic() < deadline, d.metrics()
            time.sleep(0.1)


def test_queue_depth_and_storage_failing():
    with Leased(args=METRICS, ttl="5s") as d:
        c = d.client()
        c.acquire("warm", "alice")
        threads = [threading.Thread(target=status_of,
                                    args=(c.acquire, "q%d" % i, "bob"))
                   for i in range(5)]
        with harness.WriteLock(d.db_path):
            for t in threads:
                t.start()
            # All five wait for the lock (they give up after the store's
            # 2 s busy timeout).
            deadline = time.monotonic() + 1.5
            while value(d.metrics(), "leased_queue_depth") != 5:
                assert time.monotonic() < deadline, d.metrics()
                time.sleep(0.05)
            for t in threads:
                t.join(10)
            assert value(d.metrics(), "leased_storage_failing") == 1
        assert c.acquire("after", "carol").token == 1
        m = d.metrics()
        assert value(m, "leased_storage_failing") == 0
        assert value(m, "leased_queue_depth") == 0
        assert requests(m, "Acquire", "UNAVAILABLE") == 5


def test_other_paths_and_methods_refused():
    with Leased(args=METRICS) as d:
        addr = d.wait_log(r"msg=metrics_listening addr=(\S+)").group(1)
        for path, method, code in [("/", "GET", 404), ("/metrics", "POST", 405),
                                   ("/metrics/x", "GET", 404)]:
            req = urllib.request.Request("http://%s%s" % (addr, path),
                                         method=method)
            try:
                urllib.request.urlopen(req, timeout=5)
                raise AssertionError("%s %s answered 200" % (method, path))
            except urllib.error.HTTPError as e:
                assert e.code == code, (path, method, e.code)
        assert value(d.metrics(), "leased_leases_live") == 0


def test_metrics_plaintext_only_on_loopback():
    p = subprocess.run([harness.leased_bin(), "--metrics-listen",
                        "0.0.0.0:9100"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 2
    assert "--metrics-listen" in p.stderr and "--insecure" in p.stderr
    p = subprocess.run([harness.leased_bin(), "--metrics-listen",
                        "unix:/tmp/x"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 2


harness.main(globals())
