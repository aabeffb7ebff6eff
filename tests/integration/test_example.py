"""client/examples/session_owner.c, the complete keeper example, against
the real leased: it holds and releases; a second owner is refused; paused
(SIGSTOP) longer than the TTL while another owner takes over, it stops
working the moment it runs again and reports the lease lost.
"""
import os
import signal
import subprocess
import time

import harness
from harness import Leased


def owner(d, session, seconds):
    return subprocess.Popen([os.environ["SESSION_OWNER_BIN"], d.addr,
                             session, str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_holds_works_and_releases():
    # 2 s: a renewal on a loaded machine may be late by hundreds of
    # milliseconds without the keeper losing the lease.
    with Leased(ttl="2s") as d:
        time.sleep(2.1)
        p = owner(d, "ex1", 4)
        out, _ = p.communicate(timeout=20)
        assert p.returncode == 0, out
        lines = out.splitlines()
        assert lines[0] == "held ex1 token 1"
        # Four seconds of work across two TTLs: the keeper renewed.
        assert lines.count("working token 1") >= 30, out
        assert "lost" not in out
        # Released at the end: the next owner gets it at once.
        assert d.client().acquire("ex1", "next").token == 2


def test_a_second_owner_is_refused():
    with Leased(ttl="5s") as d:
        first = owner(d, "ex2", 3)
        assert first.stdout.readline().startswith("held ex2")
        second = owner(d, "ex2", 1)
        assert second.wait(timeout=20) == 3
        first.terminate()  # SIGTERM: stops early and releases
        assert first.wait(timeout=20) == 0
        assert d.client().acquire("ex2", "next").token == 2


def test_a_pause_longer_than_the_ttl_loses_the_lease():
    with Leased(ttl="1s") as d:
        time.sleep(1.1)
        p = owner(d, "ex3", 30)
        assert p.stdout.readline() == "held ex3 token 1\n"
        time.sleep(0.3)
        p.send_signal(signal.SIGSTOP)
        time.sleep(2.0)
        c = d.client()
        thief = c.acquire("ex3", "thief")
        assert thief.token == 2
        p.send_signal(signal.SIGCONT)
        # The new owner keeps it: the loser, running again, does not
        # release it (a renewal would fail if it had). Renewed well
        # within the 1 s TTL however slowly the loser ends (sanitizers).
        deadline = time.monotonic() + 20
        while p.poll() is None and time.monotonic() < deadline:
            thief = c.renew(thief)
            time.sleep(0.2)
        out, err = p.communicate(timeout=5)
        assert p.returncode == 3, (out, err)
        # Not one more step of work after the pause: the local deadline
        # had passed before any renewal could be tried.
        after = out.split("working token 1\n")[-1]
        assert "working" not in after, out
        assert c.renew(thief).token == 2
        harness.expect_code(harness.grpc.StatusCode.FAILED_PRECONDITION,
                            c.acquire, "ex3", "third")


def test_kill9_of_the_holder_frees_the_lease_after_its_ttl():
    # 3 s: still held when the test asks, however slowly the kill and a
    # new channel go on a loaded machine.
    with Leased(ttl="3s") as d:
        time.sleep(3.1)
        p = owner(d, "ex4", 30)
        assert p.stdout.readline() == "held ex4 token 1\n"
        p.kill()
        p.wait(timeout=10)
        c = d.client()
        harness.expect_code(harness.grpc.StatusCode.FAILED_PRECONDITION,
                            c.acquire, "ex4", "next")  # until it expires
        time.sleep(3.2)
        assert c.acquire("ex4", "next").token == 2


harness.main(globals())
