"""Wall-clock steps do not move expiry while leased runs.

leased runs under libfaketime (Debian's libfaketime), whose wall clock the
test steps by an hour forward and back through FAKETIME_TIMESTAMP_FILE,
while CLOCK_MONOTONIC stays real (FAKETIME_DONT_FAKE_MONOTONIC). A daemon
that decided expiry on the wall clock would hand a live lease to another
owner after the forward step, and keep an expired one for an hour after
the backward step.
"""
import atexit
import os
import tempfile
import time

import grpc

import harness

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
TTL = 1.0


def stepped_daemon(ttl=TTL):
    rc = tempfile.NamedTemporaryFile("w", prefix="leased-faketime-",
                                     delete=False)
    rc.write("+0\n")
    rc.close()
    atexit.register(os.unlink, rc.name)
    env = {
        "LD_PRELOAD": FAKETIME,
        "FAKETIME_TIMESTAMP_FILE": rc.name,
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # The sanitizer build wants its runtime first; libfaketime only
        # wraps libc's clock calls.
        "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
                        ":verify_asan_link_order=0",
    }
    d = harness.Leased(ttl="%dms" % (ttl * 1000), env=env,
                       args=["--metrics-listen", "127.0.0.1:0"])
    d.rc_path = rc.name
    return d


def step(d, offset):
    with open(d.rc_path, "w") as f:
        f.write(offset + "\n")


def test_forward_step_does_not_expire_leases():
    ttl = 10.0  # nothing here waits for an expiry
    with stepped_daemon(ttl) as d:
        c = d.client()
        a = c.acquire("s", "A")
        step(d, "+1h")
        time.sleep(0.1)
        # Still live: the daemon's clock did not jump.
        harness.expect_code(grpc.StatusCode.FAILED_PRECONDITION,
                            c.acquire, "s", "B")
        r = c.renew(a)
        assert r.token == a.token
        # Expiry on the wire stays on the daemon's clock, not an hour on.
        assert r.expiry.seconds - a.expiry.seconds < 60, (a.expiry, r.expiry)
        fresh = c.acquire("t", "A")
        assert abs(fresh.expiry.seconds - (time.time() + ttl)) < 30, fresh


def test_steps_are_logged_and_counted():
    with stepped_daemon() as d:
        steps = ("leased_clock_steps_total", ())
        assert d.metrics()[steps] == 0
        step(d, "+1h")
        by = d.wait_log(r"level=warn msg=clock_step by_ms=(\d+)").group(1)
        assert abs(int(by) - 3600000) < 1000, by
        step(d, "+0")
        by = d.wait_log(r"level=warn msg=clock_step by_ms=(-\d+)").group(1)
        assert abs(int(by) + 3600000) < 1000, by
        assert d.metrics()[steps] == 2
        time.sleep(1.5)  # no step since: nothing more counted
        assert d.metrics()[steps] == 2
        assert d.log_text().count("msg=clock_step") == 2


def test_backward_step_does_not_extend_leases():
    with stepped_daemon() as d:
        c = d.client()
        a = c.acquire("s", "A")
        step(d, "-1h")
        time.sleep(TTL * 1.3)
        # Expired in real time, whatever the wall clock says now.
        b = c.acquire("s", "B")
        assert b.token > a.token
        harness.expect_code(grpc.StatusCode.FAILED_PRECONDITION,
                            c.renew, a)



def test_restart_with_the_clock_set_back_does_not_block_takeovers():
    """leased dies holding a lease, and comes back with the wall clock an
    hour behind: the stored expiry, an hour in the future on the new
    clock, is capped at the end of the restart quarantine, so a dead
    holder's lease is free one TTL after the start, not an hour later. Its
    holder can still renew it meanwhile."""
    ttl = 3.0  # a quarantine that outlasts the first calls after the start
    d = stepped_daemon(ttl).start()
    c = d.client()
    a = c.acquire("s", "A")
    c.acquire("kept", "K")
    d.kill9()
    step(d, "-1h")
    d.start()
    started = time.monotonic()
    with d:
        c = d.client()
        harness.expect_code(grpc.StatusCode.FAILED_PRECONDITION,
                            c.acquire, "s", "B")
        kept = c.acquire("kept", "K")  # its owner: still its lease
        time.sleep(max(0.0, ttl * 1.3 - (time.monotonic() - started)))
        assert c.renew(kept).token == kept.token
        b = c.acquire("s", "B")
        assert b.token == a.token + 1, (a.token, b.token)
        d.wait_log(r"level=warn msg=expiries_capped leases=2 ")


harness.main(globals())
