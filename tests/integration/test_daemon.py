"""Integration tests: the real `leased` binary, one or more daemons per case.

Each case starts its own daemon(s) through harness.Leased (a temporary data
directory, an ephemeral loopback port or a unix socket) and checks one
promise of docs/protocol.md from the outside: shutdown, the data-directory lock,
crash safety (kill -9), the restart quarantine, reclaim-on-renew, garbage
collection and the token floor, bad input, unknown methods, concurrency,
storage failures, the bounded hand-off queue, and configuration.

Run: LEASED_BIN=build/daemon/leased /usr/bin/python3 FILE [CASE...]
"""
import errno
import json
import os
import random
import re
import resource
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import pb, status_of, expect_code  # noqa: E402

OK = grpc.StatusCode.OK
HELD = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED

U64_MAX = 2**64 - 1


# ---------------------------------------------------------------- helpers

def ns(ts):
    """A google.protobuf.Timestamp as nanoseconds since the epoch."""
    return ts.seconds * 1_000_000_000 + ts.nanos


def now_ns():
    return time.time_ns()


def own_channel(d):
    """A channel with its own connection (gRPC Python otherwise shares one
    subchannel among channels with the same target and arguments),
    connected before it is returned: when dozens of Python channels connect
    at the same moment, grpcio 1.51 sometimes fails one connect with a
    bogus "No such file or directory" (errno 2) on the client side, which
    is not what these tests are about."""
    ch = d.channel(options=[("grpc.use_local_subchannel_pool", 1)])
    grpc.channel_ready_future(ch).result(timeout=5)
    return ch


def rpc_error(fn, *args):
    """Runs fn, which must fail; returns the grpc.RpcError."""
    try:
        fn(*args)
    except grpc.RpcError as e:
        return e
    except Exception as e:  # noqa: BLE001
        # e.g. a DecodeError: the call succeeded with a reply that Python
        # cannot even parse (invalid UTF-8 echoed back).
        raise AssertionError("call succeeded, want an error (reply: %r)"
                             % e)
    raise AssertionError("call succeeded, want an error")


def expect_invalid(fn, *args):
    """INVALID_ARGUMENT with a reason text."""
    e = rpc_error(fn, *args)
    assert e.code() == INVALID, "want INVALID_ARGUMENT, got %s (%s)" % (
        e.code(), e.details())
    assert e.details(), "INVALID_ARGUMENT without a reason"
    return e


def read_db(path):
    """Returns ({session_id: (owner, token, expiry_ns)}, token_floor).
    Works while leased runs (WAL readers do not block its writer)."""
    con = sqlite3.connect(path, timeout=5)
    try:
        con.text_factory = bytes
        rows = {}
        for sid, owner, token, expiry in con.execute(
                "SELECT session_id, owner, token, expiry_ns FROM leases"):
            rows[sid.decode("utf-8", "surrogateescape")] = (
                owner.decode("utf-8", "surrogateescape"), token, expiry)
        floor = con.execute(
            "SELECT value FROM meta WHERE key = 'token_floor'").fetchone()[0]
        return rows, floor
    finally:
        con.close()


def run_threads(fns, timeout=20.0):
    """Runs each fn in its own thread; returns their results in order and
    re-raises the first exception."""
    results = [None] * len(fns)
    errors = []

    def wrap(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i, fn), daemon=True)
               for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "threads did not finish"
    if errors:
        raise errors[0]
    return results


# Hand-made protobuf: Python's protobuf refuses to serialize invalid UTF-8,
# and malformed messages must be written by hand anyway.

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fbytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def fvarint(num, value):
    return varint(num << 3) + varint(value)


def b(s):
    return s if isinstance(s, bytes) else s.encode()


def acquire_msg(session, owner):
    return fbytes(1, b(session)) + fbytes(2, b(owner))


def lease_msg(session, owner, token):
    return fbytes(1, b(session)) + fbytes(2, b(owner)) + fvarint(3, token)


def lease_req(session, owner, token):
    """A RenewRequest or ReleaseRequest (same shape)."""
    return fbytes(1, lease_msg(session, owner, token))


def raw_acquire(c, session, owner):
    return pb.LeaseResponse.FromString(
        c.raw("Acquire", acquire_msg(session, owner))).lease


def raw_renew(c, session, owner, token):
    return pb.LeaseResponse.FromString(
        c.raw("Renew", lease_req(session, owner, token))).lease


def raw_release(c, session, owner, token):
    c.raw("Release", lease_req(session, owner, token))


def lease(session, owner, token):
    return pb.Lease(session_id=session, owner=owner, token=token)


def check_encoder():
    """The hand encoder agrees with protobuf's own."""
    assert acquire_msg("s", "alice") == pb.AcquireRequest(
        session_id="s", owner="alice").SerializeToString()
    assert lease_req("s", "o", 300) == pb.RenewRequest(
        lease=lease("s", "o", 300)).SerializeToString()
    assert lease_req("s", "o", U64_MAX) == pb.ReleaseRequest(
        lease=lease("s", "o", U64_MAX)).SerializeToString()


def assert_still_held(c, held, intruder="intruder"):
    """`held` (a Lease) is still its owner's: another owner is refused,
    and the owner renews it with its token."""
    expect_code(HELD, c.acquire, held.session_id, intruder)
    got = c.renew(held)
    assert got.token == held.token, (got.token, held.token)
    assert got.owner == held.owner
    return got


# ---------------------------------------------------------------- shutdown

def _stop_with(sig, name):
    with harness.Leased() as d:
        c = d.client()
        c.acquire("s", "alice")
        d.close_channels()
        d.proc.send_signal(sig)
        rc = d.proc.wait(timeout=10)
        assert rc == 0, "exit %s:\n%s" % (rc, d.log_text())
        log = d.log_text()
        assert re.search(r"msg=stopping signal=%s\b" % name, log), log
        assert "msg=stopped" in log, log


def test_sigterm_exits_0():
    _stop_with(signal.SIGTERM, "TERM")


def test_sigint_exits_0():
    _stop_with(signal.SIGINT, "INT")


def test_sigterm_drains_inflight_call():
    """SIGTERM while a call waits for its commit: the call is finished and
    answered (OK once the database is free again), it is stored, and the
    daemon exits 0."""
    with harness.Leased(ttl="5s") as d:
        c = d.client()
        c.acquire("warm", "alice")
        out = {}
        with harness.WriteLock(d.db_path):
            t = threading.Thread(target=lambda: out.update(
                code=status_of(c.acquire, "drain", "bob")))
            t.start()
            time.sleep(0.3)
            d.proc.send_signal(signal.SIGTERM)
            d.wait_log(r"msg=stopping signal=TERM")
            time.sleep(0.5)
            assert d.proc.poll() is None, "exited with a call in flight"
        t.join(10)
        assert out.get("code") == OK, out
        d.close_channels()
        assert d.proc.wait(timeout=15) == 0, d.log_text()
        rows, _ = read_db(d.db_path)
        assert rows["drain"][:2] == ("bob", 1), rows


def test_sigterm_with_idle_connection_exits():
    """Idle client connections (raw TCP with no HTTP/2 at all, and a gRPC
    channel that made a call and stays open, as mecated's does) do not
    hold up the exit on SIGTERM: no call is in progress, so leased closes
    them at once rather than waiting out its 10 s grace for running calls.
    """
    with harness.Leased() as d:
        host, port = d.addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        ch = grpc.insecure_channel(d.addr)  # not closed by the harness
        harness.Client(ch).acquire("s", "alice")
        try:
            time.sleep(0.1)
            start = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            rc = d.proc.wait(timeout=15)
            took = time.monotonic() - start
        finally:
            s.close()
            ch.close()
        assert rc == 0, d.log_text()
        assert took < 3.0, "exit took %.1fs with idle connections" % took


# ---------------------------------------------------------------- data dir lock

def test_second_daemon_same_dir_refused():
    """A second leased on the same data directory (and the same unix
    socket path) exits non-zero at once, says why, and the first one keeps
    serving on its socket."""
    with tempfile.TemporaryDirectory(prefix="leased-sock-") as tmp:
        sock = "unix:" + os.path.join(tmp, "leased.sock")
        with harness.Leased(listen=sock) as d1:
            c = d1.client()
            first = c.acquire("s", "alice")
            d2 = harness.Leased(data_dir=d1.data_dir, listen=sock)
            start = time.monotonic()
            d2.start(wait=False)
            try:
                rc = d2.proc.wait(timeout=5)
            finally:
                d2.__exit__(None, None, None)
            assert rc != 0, "second leased exited 0"
            assert time.monotonic() - start < 3
            log = d2.log_text()
            want = ("data directory %s is in use by another leased (pid %d)"
                    % (d1.data_dir, d1.proc.pid))
            assert want in log, log
            assert "startup_failed" in log, log
            assert os.path.exists(sock[5:]), "the socket file was removed"
            # The first daemon still serves, on the same socket.
            c2 = harness.Client(d1.channel())
            got = c2.renew(first)
            assert got.token == first.token
            assert c2.acquire("t", "bob").token >= 1
            assert d1.proc.poll() is None


# ---------------------------------------------------------------- kill -9

class LoadWorker(threading.Thread):
    """Sequential acquire/renew/release on sessions of its own (so its
    model of what it holds is exact), recording every acknowledged result.
    The first failed call (the crash) ends it; that call's session has an
    unknown outcome."""

    def __init__(self, d, idx, nsessions, stop):
        super().__init__(daemon=True)
        self.c = harness.Client(own_channel(d), timeout=5.0)
        self.sessions = ["w%d-s%d" % (idx, i) for i in range(nsessions)]
        self.owners = ["w%d-a" % idx, "w%d-b" % idx]
        self.stop_ev = stop
        self.rng = random.Random()
        self.held = {}         # session -> Lease held (acknowledged)
        self.acked_max = {}    # session -> highest acknowledged token
        self.takeovers = []    # acknowledged (session, token)
        self.releases = []     # acknowledged (session, owner, token)
        self.released = set()  # sessions whose last acked op was a release
        self.unknown = set()   # the session of the call the crash cut off
        self.anomalies = []
        self.ops = 0

    def step(self, s):
        mine = self.held.get(s)
        r = self.rng.random()
        if mine is None:
            got = self.c.acquire(s, self.rng.choice(self.owners))
            if got.token <= self.acked_max.get(s, 0):
                self.anomalies.append(("token not raised", s, got.token))
            self.held[s] = got
            self.released.discard(s)
            self.acked_max[s] = got.token
            self.takeovers.append((s, got.token))
        elif r < 0.1:  # the other owner tries: live, so refused
            other = [o for o in self.owners if o != mine.owner][0]
            try:
                self.c.acquire(s, other)
                self.anomalies.append(("double grant", s))
            except grpc.RpcError as e:
                if e.code() != HELD:
                    raise
        elif r < 0.6:
            got = self.c.renew(mine)
            if got.token != mine.token or ns(got.expiry) <= ns(mine.expiry):
                self.anomalies.append(("bad renew", s, got.token))
            self.held[s] = got
        else:
            self.c.release(mine)
            del self.held[s]
            self.released.add(s)
            self.releases.append((s, mine.owner, mine.token))
        self.ops += 1

    def run(self):
        while not self.stop_ev.is_set():
            s = self.rng.choice(self.sessions)
            try:
                self.step(s)
            except grpc.RpcError as e:
                if e.code() == HELD:
                    self.anomalies.append(("unexpected FAILED_PRECONDITION",
                                           s, e.details()))
                self.unknown.add(s)
                return
            except ValueError as e:
                # kill9() closed the channels between two calls: the
                # crash, seen from here, like an RpcError.
                if "closed channel" not in str(e):
                    self.anomalies.append(("exception", repr(e)))
                self.unknown.add(s)
                return
            except Exception as e:  # noqa: BLE001 (reported by the test)
                self.anomalies.append(("exception", repr(e)))
                return


def test_kill9_mid_load_keeps_acknowledged_state():
    """kill -9 at a random moment under load, restart on the same data:
    every acknowledged token is still there (or a greater one), acked
    releases stay released, leases live at the crash keep their owner
    (others refused, the owner renews), and after the quarantine a new
    owner gets a token above every acknowledged one."""
    # 3 s: after the restart, every live session is checked in turn
    # inside the quarantine, and a worker's lease must outlive a pause of
    # its thread, on a loaded machine too.
    ttl_s = 3.0
    with harness.Leased(ttl="3s") as d:
        stop = threading.Event()
        workers = [LoadWorker(d, i, 6, stop) for i in range(8)]
        for w in workers:
            w.start()

        def done(what):
            return sum(len(getattr(w, what)) for w in workers)
        # Enough history to check (by counts, not by a time a loaded
        # machine may not be fast enough for), then a random moment more.
        deadline = time.monotonic() + 60
        while done("takeovers") < 20 or done("releases") < 5:
            assert time.monotonic() < deadline, (done("takeovers"),
                                                 done("releases"))
            time.sleep(0.02)
        time.sleep(random.uniform(0, 0.8))
        assert all(w.is_alive() for w in workers), "load ended before kill"
        d.kill9()
        crash_ns = now_ns()
        stop.set()
        for w in workers:
            w.join(10)
            assert not w.is_alive()
        anomalies = [a for w in workers for a in w.anomalies]
        assert not anomalies, anomalies
        takeovers = sum(len(w.takeovers) for w in workers)
        releases = sum(len(w.releases) for w in workers)
        ops = sum(w.ops for w in workers)
        assert takeovers >= 20 and releases >= 5, (takeovers, releases)
        print("     (%d acked ops: %d takeovers, %d releases before kill -9)"
              % (ops, takeovers, releases))

        acked = {}
        for w in workers:
            for s, t in w.acked_max.items():
                acked[s] = max(acked.get(s, 0), t)
        unknown = set().union(*(w.unknown for w in workers))
        live = {s: l for w in workers for s, l in w.held.items()
                if s not in unknown and ns(l.expiry) > crash_ns}
        released = {s for w in workers for s in w.released
                    if s not in unknown}
        assert live, "no lease was live at the crash"

        # Restart once every expiry promised before the crash has passed,
        # so that only the restart quarantine keeps those leases held.
        wait = max(ns(l.expiry) for l in live.values()) / 1e9 - time.time()
        time.sleep(max(0.0, wait) + 0.05)
        d.start()
        c = d.client()
        for s in sorted(live):
            expect_code(HELD, c.acquire, s, "intruder")
        renewed = {}  # session -> the expiry its renewal gave
        for s, l in sorted(live.items()):
            got = c.renew(l)
            assert got.token == l.token and got.owner == l.owner
            assert ns(got.expiry) > ns(l.expiry)
            renewed[s] = ns(got.expiry)
        # Acknowledged releases are free at once (no quarantine).
        for s in sorted(released)[:5]:
            got = c.acquire(s, "after-crash")
            assert got.token > acked[s], (s, got.token, acked[s])
            acked[s] = got.token
            c.release(got)
        assert d.stop() == 0, d.log_text()
        stopped_ns = now_ns()

        rows, floor = read_db(d.db_path)
        for s, t in acked.items():
            if s in rows:
                assert rows[s][1] >= t, (s, rows[s], t)
            else:
                assert floor >= t, (s, floor, t)
        for s, l in live.items():
            # Garbage collection takes a row a TTL after its expiry: on a
            # slow machine that may come before the stop.
            if s not in rows and stopped_ns > renewed[s] + ttl_s * 1e9:
                assert floor >= l.token, (s, floor, l.token)
                continue
            assert rows[s][:2] == (l.owner, l.token), (s, rows.get(s))
        for s in released:
            assert s not in rows or rows[s][0] == "", (s, rows[s])

        # Once every lease expired and the quarantine is over, a new
        # owner takes every session with a greater token.
        d.start()
        start = time.time()
        c = d.client()
        max_expiry = max(r[2] for r in rows.values()) / 1e9
        time.sleep(max(start + ttl_s, max_expiry) - time.time() + 0.3)
        for s in sorted(acked):
            got = c.acquire(s, "newcomer")
            assert got.token > acked[s], (s, got.token, acked[s])


def test_acked_release_survives_kill9():
    """An acknowledged release is on disk: after kill -9 and a restart,
    another owner acquires at once (no quarantine) with a greater token;
    a lease not released stays quarantined."""
    with harness.Leased(ttl="5s") as d:
        c = d.client()
        rel = {}
        for i in range(5):
            l = c.acquire("rel-%d" % i, "alice")
            l = c.renew(l)
            c.release(l)
            rel["rel-%d" % i] = l.token
        kept = c.acquire("kept", "alice")
        d.kill9()
        d.start()
        c = d.client()
        for s, t in sorted(rel.items()):
            got = c.acquire(s, "bob")
            assert got.token > t, (s, got.token, t)
        expect_code(HELD, c.acquire, "kept", "bob")
        assert c.renew(kept).token == kept.token


def test_kill9_after_renewals_keeps_the_lease_until_restart_plus_ttl():
    """Renewals are not written: kill -9 just after a burst of them
    leaves an older expiry on disk than the one last promised. The
    restart quarantine covers the difference: no competitor gets either
    lease before restart + TTL (so not before any promised expiry), the
    holder that renews keeps its lease, and the other lease goes to the
    competitor once the quarantine is over."""
    # Margins of a second or more throughout: a sanitizer build on a
    # loaded machine may take hundreds of milliseconds for a call.
    ttl_s = 3.0
    with harness.Leased(ttl="3s") as d:
        c = d.client()
        kept, dropped = c.acquire("kept", "alice"), c.acquire("dropped", "bob")
        first = {l.session_id: ns(l.expiry) for l in (kept, dropped)}
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            kept, dropped = c.renew(kept), c.renew(dropped)
        promised = max(ns(kept.expiry), ns(dropped.expiry))
        time.sleep(1.3)  # so that the quarantine below outlasts `promised`
        d.kill9()
        rows, _ = read_db(d.db_path)
        for s in ("kept", "dropped"):
            assert rows[s][2] == first[s], (s, rows[s], first[s])
            assert rows[s][2] < promised - 500_000_000, (rows[s], promised)
        before = time.monotonic()
        d.start()
        after = time.monotonic()
        c = d.client()
        assert c.renew(kept).token == kept.token
        refused = 0
        while time.monotonic() < before + ttl_s - 1.0:
            for s in ("kept", "dropped"):
                expect_code(HELD, c.acquire, s, "intruder")
                refused += 1
            time.sleep(0.05)
        assert now_ns() > promised, "the quarantine outlasts every promise"
        assert refused >= 4, refused  # two rounds, at least
        time.sleep(max(0.0, after + ttl_s + 0.3 - time.monotonic()))
        got = c.acquire("dropped", "intruder")
        assert got.token == dropped.token + 1, (got.token, dropped.token)
        kept = c.renew(kept)  # renewed within the last TTL: still alice's
        expect_code(HELD, c.acquire, "kept", "intruder")


# ---------------------------------------------------------------- quarantine

def _crash_after_expiry(d, c, session="q"):
    held = c.acquire(session, "alice")
    d.kill9()
    # Wait until the stored expiry has passed.
    wait = ns(held.expiry) / 1e9 - time.time() + 0.15
    if wait > 0:
        time.sleep(wait)
    assert time.time_ns() > ns(held.expiry)
    return held


def test_quarantine_owner_renews_after_restart():
    """A lease held at a crash is not taken by another owner right after
    the restart even though its stored expiry passed; its owner renews it
    with the same token."""
    # A TTL (and so a quarantine) long enough for a restart under a
    # sanitizer on a loaded machine to see the quarantine before it ends.
    with harness.Leased(ttl="3s") as d:
        held = _crash_after_expiry(d, d.client())
        d.start()
        c = d.client()
        assert "leases=1" in d.log_text(), d.log_text()
        expect_code(HELD, c.acquire, "q", "bob")
        got = c.renew(held)
        assert got.token == held.token
        assert ns(got.expiry) > ns(held.expiry)
        assert ns(got.expiry) > now_ns()
        expect_code(HELD, c.acquire, "q", "bob")


def test_quarantine_ends_after_ttl():
    """Without a renewal, the other owner gets the lease after start +
    TTL, with a greater token."""
    # A TTL long enough for a restart under a sanitizer on a loaded
    # machine to see the quarantine before it ends.
    with harness.Leased(ttl="3s") as d:
        held = _crash_after_expiry(d, d.client())
        before = time.monotonic()
        d.start()
        after = time.monotonic()  # the engine started in between
        c = d.client()
        expect_code(HELD, c.acquire, "q", "bob")
        assert time.monotonic() - before < 2.9, "too slow to see quarantine"
        time.sleep(max(0.0, after + 3.0 + 0.2 - time.monotonic()))
        got = c.acquire("q", "bob")
        assert got.token > held.token, (got.token, held.token)
        expect_code(HELD, c.renew, held)


# ---------------------------------------------------------------- reclaim

def test_reclaim_on_renew_after_expiry():
    # Long enough that the lease after the takeover or reclaim stays live
    # through the calls that follow, on a loaded machine.
    with harness.Leased(ttl="2s") as d:
        c = d.client()
        l = c.acquire("r", "alice")
        time.sleep(2.3)
        assert now_ns() > ns(l.expiry)
        got = c.renew(l)
        assert got.token == l.token
        assert ns(got.expiry) > ns(l.expiry)
        assert ns(got.expiry) > now_ns()
        # Reclaimed, so live again: another owner is refused.
        expect_code(HELD, c.acquire, "r", "bob")


def test_renew_after_expiry_and_takeover_fails():
    # Long enough that the lease after the takeover or reclaim stays live
    # through the calls that follow, on a loaded machine.
    with harness.Leased(ttl="2s") as d:
        c = d.client()
        old = c.acquire("r", "alice")
        time.sleep(2.3)
        new = c.acquire("r", "bob")
        assert new.token > old.token
        expect_code(HELD, c.renew, old)
        # Same owner as the new holder but the old token: still lost.
        expect_code(HELD, c.renew, lease("r", "bob", old.token))
        c.release(old)  # a no-op
        assert_still_held(c, new, intruder="alice")


# ---------------------------------------------------------------- GC

def _wait_collected(path, session, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows, floor = read_db(path)
        if session not in rows:
            return rows, floor
        time.sleep(0.1)
    raise AssertionError("%r not collected in %.0fs: %r"
                         % (session, timeout, rows.get(session)))


def test_gc_keeps_tokens_monotonic():
    """Garbage collection deletes released and long-expired rows but
    raises the token floor, so a later acquire gets a greater token, also
    after a restart."""
    with harness.Leased(ttl="500ms") as d:
        c = d.client()
        tokens = []
        for owner in ["a", "b", "a", "c"]:
            l = c.acquire("g", owner)
            tokens.append(l.token)
            c.release(l)
        assert tokens == sorted(set(tokens)), tokens
        exp = c.acquire("x", "a")  # left to expire, then collected
        rows, floor = _wait_collected(d.db_path, "g")
        assert floor >= tokens[-1], (floor, tokens)
        rows, floor = _wait_collected(d.db_path, "x")
        assert floor >= exp.token
        assert "msg=commit_failed" not in d.log_text()

        got = c.acquire("g", "d")
        assert got.token > max(tokens), (got.token, tokens)
        tokens.append(got.token)
        c.release(got)
        _wait_collected(d.db_path, "g")
        assert d.stop() == 0

        d.start()
        assert re.search(r"msg=loaded leases=0 token_floor=%d\b"
                         % tokens[-1], d.log_text()), d.log_text()
        got = d.client().acquire("g", "e")
        assert got.token > max(tokens), (got.token, tokens)


# ---------------------------------------------------------------- bad input

def _bad_input_daemon():
    d = harness.Leased(ttl="30s")
    d.start()
    return d


def _finish_bad_input(d, c, held, fresh_sessions, expected_rows):
    """Nothing changed: the held lease is still its owner's, sessions named
    in bad calls were never created (a new owner gets token 1), the
    database holds exactly the expected rows; and the daemon serves."""
    rows, _ = read_db(d.db_path)
    assert set(rows) == set(expected_rows), sorted(rows)
    for s in fresh_sessions:
        assert c.acquire(s, "fresh-owner").token == 1, s
    assert_still_held(c, held)
    assert d.proc.poll() is None


def test_bad_input_lengths():
    check_encoder()
    with _bad_input_daemon() as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        snap = read_db(d.db_path)
        s513, o257 = "s" * 513, "o" * 257
        for sess, owner in [("", "alice"), ("ghost", ""), ("", ""),
                            (s513, "alice"), ("ghost", o257),
                            ("keep", o257), ("é" * 257, "alice"),
                            ("ghost", "é" * 128 + "a")]:
            expect_invalid(raw_acquire, c, sess, owner)
            # Omitted fields (proto3 default) are blank too.
        expect_invalid(c.raw, "Acquire", b"")
        expect_invalid(c.raw, "Acquire", fbytes(1, b"ghost"))
        expect_invalid(c.raw, "Acquire", fbytes(2, b"alice"))
        for sess, owner, tok in [("", "alice", held.token),
                                 ("keep", "", held.token),
                                 (s513, "alice", 1),
                                 ("keep", o257, held.token),
                                 ("keep", "alice" + "x" * 252, held.token)]:
            expect_invalid(raw_renew, c, sess, owner, tok)
            expect_invalid(raw_release, c, sess, owner, tok)
        assert read_db(d.db_path) == snap, "a bad call changed the database"
        # Exactly at the limits: fine (bytes, not characters, count).
        for sess, owner in [("s" * 512, "o" * 256),
                            ("é" * 256, "ö" * 128),
                            ("😀" * 128, "€" * 85 + "x")]:
            got = raw_acquire(c, sess, owner)
            assert got.session_id == sess and got.owner == owner
            assert got.token == 1
            assert c.renew(got).token == 1
            c.release(got)
        expected = {"keep", "s" * 512, "é" * 256, "😀" * 128}
        _finish_bad_input(d, c, held, ["ghost"], expected)


BAD_UTF8 = [
    b"\xff", b"\xfe", b"\x80", b"ab\xbfcd",
    b"\xc0\xaf",              # overlong '/'
    b"\xc1\xbf",              # overlong
    b"\xe0\x80\xaf",          # overlong, 3 bytes
    b"\xf0\x80\x80\xaf",      # overlong, 4 bytes
    b"\xed\xa0\x80",          # lone high surrogate U+D800
    b"\xed\xbf\xbf",          # lone low surrogate U+DFFF
    b"\xed\xa0\xbd\xed\xb8\x80",  # surrogate pair in CESU-8
    b"\xf4\x90\x80\x80",      # U+110000
    b"\xf8\x88\x80\x80\x80",  # 5-byte form
    b"\xc3",                  # truncated at the end
    b"abc\xe2\x82",           # truncated at the end
    b"\xe2\x82abc",           # truncated in the middle
]

GOOD_UTF8 = [
    b"\xed\x9f\xbf",          # U+D7FF
    b"\xee\x80\x80",          # U+E000
    b"\xf4\x8f\xbf\xbf",      # U+10FFFF
    b"\xc2\x80",              # U+0080
    "ünï-€-😀".encode(),
]


def test_bad_input_invalid_utf8():
    with _bad_input_daemon() as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        snap = read_db(d.db_path)
        for bad in BAD_UTF8:
            expect_invalid(raw_acquire, c, b"s-" + bad, b"alice")
            expect_invalid(raw_acquire, c, b"ghost", b"o-" + bad)
            expect_invalid(raw_acquire, c, b"keep", b"alice" + bad)
            for fn in (raw_renew, raw_release):
                expect_invalid(fn, c, b"keep" + bad, b"alice", held.token)
                expect_invalid(fn, c, b"keep", b"alice" + bad, held.token)
                expect_invalid(fn, c, bad, b"alice", held.token)
        assert read_db(d.db_path) == snap, "a bad call changed the database"
        expected = {"keep"}
        for i, good in enumerate(GOOD_UTF8):
            got = raw_acquire(c, b"u-" + good, b"o-" + good)
            assert got.session_id.encode() == b"u-" + good
            assert got.owner.encode() == b"o-" + good
            assert raw_renew(c, b"u-" + good, b"o-" + good,
                             got.token).token == got.token
            expected.add(got.session_id)
        _finish_bad_input(d, c, held, ["ghost", "s-"], expected)


def test_bad_input_embedded_nul():
    """"alice\\0x" is refused, never taken for "alice"."""
    with _bad_input_daemon() as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        snap = read_db(d.db_path)
        for owner in [b"alice\0x", b"alice\0", b"\0alice", b"\0"]:
            expect_invalid(raw_acquire, c, b"keep", owner)
            expect_invalid(raw_renew, c, b"keep", owner, held.token)
            expect_invalid(raw_release, c, b"keep", owner, held.token)
            expect_invalid(raw_acquire, c, b"ghost", owner)
        for sess in [b"keep\0x", b"keep\0", b"\0keep", b"ghost\0"]:
            expect_invalid(raw_acquire, c, sess, b"alice")
            expect_invalid(raw_renew, c, sess, b"alice", held.token)
            expect_invalid(raw_release, c, sess, b"alice", held.token)
        # Python's own protobuf sends NULs as well: same answer.
        expect_invalid(c.acquire, "keep", "alice\0x")
        expect_invalid(c.release, lease("keep", "alice\0x", held.token))
        assert read_db(d.db_path) == snap, "a bad call changed the database"
        _finish_bad_input(d, c, held, ["ghost"], {"keep"})


def test_bad_input_missing_lease():
    with _bad_input_daemon() as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        snap = read_db(d.db_path)
        for method in ("Renew", "Release"):
            expect_invalid(c.raw, method, b"")
            expect_invalid(c.raw, method, fvarint(2, 5))  # unknown field only
            expect_invalid(c.raw, method, fbytes(1, b""))  # empty lease
            expect_invalid(c.raw, method, fbytes(1, fvarint(3, held.token)))
            expect_invalid(c.raw, method, fbytes(1, fbytes(1, b"keep") +
                                                 fvarint(3, held.token)))
            expect_invalid(c.raw, method, fbytes(1, fbytes(2, b"alice") +
                                                 fvarint(3, held.token)))
        expect_invalid(c.renew, pb.Lease())
        e = expect_invalid(c._renew, pb.RenewRequest())
        assert "lease" in e.details(), e.details()
        e = expect_invalid(c._release, pb.ReleaseRequest())
        assert "lease" in e.details(), e.details()
        assert read_db(d.db_path) == snap, "a bad call changed the database"
        _finish_bad_input(d, c, held, [], {"keep"})


def test_bad_input_malformed_protobuf():
    with _bad_input_daemon() as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        snap = read_db(d.db_path)
        good = lease_msg("keep", "alice", held.token)
        acquire_bad = [
            b"\x8a",                              # truncated tag varint
            b"\x0a\x85",                          # truncated length varint
            b"\x0a\x05ke",                        # length past the end
            acquire_msg("ghost", "alice") + b"\x12\x10abc",
            b"\x08\x01" + fbytes(2, b"alice"),     # field 1 as a varint
            b"\x0d\x00\x00\x00\x00" + fbytes(2, b"alice"),  # as fixed32
            fbytes(1, b"ghost") + b"\x11" + b"\0" * 8,      # owner as fixed64
            fbytes(1, b"ghost") + fbytes(2, b"alice") + b"\x0f",  # wire type 7
            fbytes(1, b"ghost") + fbytes(2, b"alice") + b"\x18\xff\xff",
        ]
        for m in acquire_bad:
            e = expect_invalid(c.raw, "Acquire", m)
            assert "malformed" in e.details(), (m, e.details())
        lease_bad = [
            b"\x0a",                          # lease tag, no length
            b"\x0a\xff",                      # truncated length varint
            b"\x0a\x40" + good,               # lease length past the end
            b"\x08\x05",                      # lease as a varint
            b"\x0d\x01\x02\x03\x04",          # lease as fixed32
            fbytes(1, good + b"\x18\xff"),    # truncated token varint
            fbytes(1, good + fbytes(3, b"\x07")),   # token length-delimited
            fbytes(1, b"\x08\x01" + good),    # session_id as a varint
            fbytes(1, good[:-3]) + b"\x00",   # nested length past the end
            fbytes(1, good + b"\x22\x05\x08"),  # expiry past the end
            fbytes(1, good + fbytes(4, b"\x08")),  # truncated expiry seconds
            good,  # a bare Lease where a RenewRequest belongs
        ]
        for method in ("Renew", "Release"):
            for m in lease_bad:
                e = expect_invalid(c.raw, method, m)
                assert e.details(), m
        assert read_db(d.db_path) == snap, "a bad call changed the database"
        _finish_bad_input(d, c, held, ["ghost"], {"keep"})


def test_bad_input_token_extremes():
    """Token 0, 2^63, 2^64-1 and wrong tokens: Renew FAILED_PRECONDITION,
    Release OK but nothing freed."""
    with _bad_input_daemon() as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        snap = read_db(d.db_path)
        for tok in [0, 2**63, U64_MAX, held.token + 1, 2**32 + held.token]:
            e = rpc_error(c.renew, lease("keep", "alice", tok))
            assert e.code() == HELD, (tok, e.code(), e.details())
            c.release(lease("keep", "alice", tok))
            expect_code(HELD, c.renew, lease("ghost", "alice", tok))
            c.release(lease("ghost", "alice", tok))
            expect_code(HELD, c.acquire, "keep", "bob")
        # Someone else's release, right token: also nothing.
        c.release(lease("keep", "bob", held.token))
        assert read_db(d.db_path) == snap, "a bad call changed the database"
        _finish_bad_input(d, c, held, ["ghost"], {"keep"})
        # The right token still works after all that.
        c.release(held)
        assert c.acquire("keep", "bob").token == held.token + 1


def test_bad_input_oversized_message():
    with _bad_input_daemon() as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        snap = read_db(d.db_path)
        big = b"x" * (70 * 1024)
        e = rpc_error(raw_acquire, c, big, b"alice")
        assert e.code() == EXHAUSTED, (e.code(), e.details())
        e = rpc_error(raw_renew, c, b"keep", b"alice" + big, held.token)
        assert e.code() == EXHAUSTED, (e.code(), e.details())
        e = rpc_error(raw_release, c, b"keep", b"alice" + big, held.token)
        assert e.code() == EXHAUSTED, (e.code(), e.details())
        # Just under 64 KiB: gRPC lets it through, the codec refuses it.
        expect_invalid(raw_acquire, c, b"y" * 60000, b"alice")
        expect_invalid(raw_renew, c, b"keep", b"a" * 60000, held.token)
        # Unknown fields are skipped (proto3): a valid message with a
        # 60 KB unknown field still works.
        got = pb.LeaseResponse.FromString(c.raw(
            "Renew", lease_req("keep", "alice", held.token) +
            fbytes(9, b"z" * 60000))).lease
        assert got.token == held.token
        rows, _ = read_db(d.db_path)
        assert set(rows) == set(snap[0])
        _finish_bad_input(d, c, held, ["ghost"], {"keep"})


def test_garbage_on_port_keeps_serving():
    # Nothing here waits for an expiry; the junk may take seconds.
    with harness.Leased(ttl="30s") as d:
        c = d.client()
        held = c.acquire("keep", "alice")
        host, port = d.addr.rsplit(":", 1)
        for junk in [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                     bytes(random.Random(1).randrange(256)
                           for _ in range(4096)),
                     b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 64]:
            s = socket.create_connection((host, int(port)))
            try:
                s.settimeout(2)
                s.sendall(junk)
                try:
                    s.recv(1024)
                except (socket.timeout, ConnectionError):
                    pass
            finally:
                s.close()
        assert_still_held(c, held)
        assert c.acquire("other", "bob").token == 1


# ---------------------------------------------------------------- unknown

def test_unknown_methods_unimplemented_promptly():
    with harness.Leased() as d:
        c = d.client()
        paths = ["/mecatl.driver.v1.SessionStoreService/Get",
                 "/foo.Bar/Baz",
                 "/mecatl.driver.v1.SessionLeaseService/Get",
                 "/grpc.reflection.v1alpha.ServerReflection/"
                 "ServerReflectionInfo"]
        for path in paths:
            start = time.monotonic()
            e = rpc_error(c.raw, path, b"\x0a\x01x", 10.0)
            took = time.monotonic() - start
            assert e.code() == UNIMPLEMENTED, (path, e.code())
            assert took < 2.0, (path, took)
        # More at once than the daemon keeps armed for unknown methods.
        start = time.monotonic()
        codes = run_threads([lambda p=p: status_of(c.raw, p, b"", 10.0)
                             for p in paths * 4])
        assert set(codes) == {UNIMPLEMENTED}, codes
        assert time.monotonic() - start < 2.0
        assert c.acquire("s", "alice").token == 1


# ---------------------------------------------------------------- concurrency

def test_64_parallel_clients():
    with harness.Leased(ttl="5s") as d:
        n = 64
        clients = [harness.Client(own_channel(d)) for _ in range(n)]
        barrier = threading.Barrier(n)

        def work(i):
            c = clients[i]
            barrier.wait(10)
            l = c.acquire("par-%d" % i, "owner-%d" % i)
            assert l.token >= 1 and l.session_id == "par-%d" % i
            r = c.renew(l)
            assert r.token == l.token and ns(r.expiry) > ns(l.expiry)
            c.release(r)
            again = c.acquire("par-%d" % i, "other-%d" % i)
            assert again.token > l.token
            return l.token

        tokens = run_threads([lambda i=i: work(i) for i in range(n)])
        assert len(tokens) == n
        rows, _ = read_db(d.db_path)
        assert len(rows) == n
        assert all(rows["par-%d" % i][0] == "other-%d" % i for i in range(n))


def test_32_owners_race_for_one_session():
    with harness.Leased(ttl="5s") as d:
        n = 32
        clients = [harness.Client(own_channel(d)) for _ in range(n)]
        last = 0
        for rnd in range(4):
            barrier = threading.Barrier(n)

            def attempt(i):
                barrier.wait(10)
                try:
                    return OK, clients[i].acquire("hot", "racer-%d" % i)
                except grpc.RpcError as e:
                    return e.code(), None

            results = run_threads([lambda i=i: attempt(i) for i in range(n)])
            wins = [l for code, l in results if code == OK]
            codes = [code for code, _ in results]
            assert len(wins) == 1, (rnd, codes)
            assert codes.count(HELD) == n - 1, (rnd, codes)
            win = wins[0]
            assert win.token > last, (rnd, win.token, last)
            last = win.token
            # Every loser is still refused; the winner holds it.
            for i in range(n):
                if "racer-%d" % i != win.owner:
                    expect_code(HELD, clients[i].acquire, "hot",
                                "racer-%d" % i)
            assert clients[0].renew(win).token == win.token
            clients[0].release(win)


# ---------------------------------------------------------------- storage

def test_storage_failure_unavailable_then_recovers():
    """The database locked by another process past the busy timeout:
    takeovers and releases get UNAVAILABLE, nothing is stored or changed,
    and the daemon recovers once the lock is gone. A renewal needs no
    storage: it is answered OK meanwhile, before the commits that wait
    for the lock."""
    with harness.Leased(ttl="5s") as d:
        c = d.client()
        renewed = c.acquire("renewed", "carol")
        freed = c.acquire("freed", "dave")
        snap = read_db(d.db_path)
        with harness.WriteLock(d.db_path):
            start = time.monotonic()
            done = []

            def timed(fn, *args):
                code = status_of(fn, *args)
                done.append(fn.__name__)
                return code

            codes = run_threads([
                lambda: timed(c.acquire, "s", "alice"),
                lambda: timed(c.renew, renewed),
                lambda: timed(c.release, freed),
            ])
            took = time.monotonic() - start
            time.sleep(max(0.0, 3.0 - took))
            # Read while the lock is still held: a probe waiting on it
            # recovers the moment it goes, before a read after it.
            log = d.log_text()
        assert codes == [UNAVAILABLE, OK, UNAVAILABLE], codes
        assert done[0] == "renew", done
        assert took >= 1.9, took  # the busy timeout was waited out
        assert read_db(d.db_path) == snap
        assert re.search(r"level=warn msg=commit_failed changes=\d+ error=",
                         log), log
        assert "msg=storage_recovered" not in log
        # The failed acquire stored nothing: another owner gets token 1.
        got = c.acquire("s", "bob")
        assert got.token == 1, got.token
        d.wait_log(r"msg=storage_recovered", timeout=2)
        # The failed renew and release changed nothing either.
        assert c.renew(renewed).token == renewed.token
        expect_code(HELD, c.acquire, "freed", "erin")
        assert c.renew(freed).token == freed.token
        expect_code(HELD, c.acquire, "s", "alice")
        assert d.stop() == 0
        rows, _ = read_db(d.db_path)
        assert rows["s"][:2] == ("bob", 1), rows


def test_disk_full_unavailable_then_recovers():
    """Writes past the daemon's file size limit fail (EFBIG), as on a full
    disk: every takeover and release gets UNAVAILABLE and nothing changes
    (renewals, never written, go on), the daemon
    keeps running (it ignores SIGXFSZ) and logs the failures at most once
    a second, and it recovers once the limit is lifted. liblease's client
    (leasectl) asks again within its deadline, ten times a second."""
    unlimited = resource.RLIM_INFINITY
    with harness.Leased(ttl="5s",
                        args=["--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        held = c.acquire("held", "carol")
        freed = c.acquire("freed", "dave")
        snap = read_db(d.db_path)
        # The WAL grows by appending: nothing more fits. The log file is
        # far smaller, so its lines still do.
        full = os.path.getsize(d.db_path + "-wal")
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (full, unlimited))
        calls = [lambda: status_of(c.acquire, "s", "alice"),
                 lambda: status_of(c.renew, held),
                 lambda: status_of(c.release, freed)]
        # For 2.5 s: long enough for a second log line, whatever the
        # machine's speed (the count is only a bound).
        codes = []
        end = time.monotonic() + 2.5
        while time.monotonic() < end and len(codes) < 60000:
            codes.extend(run_threads(calls))
        assert d.proc.poll() is None, "leased died"
        renewals = codes[1::3]
        assert set(renewals) == {OK}, set(renewals)
        del codes[1::3]
        assert set(codes) == {UNAVAILABLE}, set(codes)
        assert read_db(d.db_path) == snap
        failed = re.findall(r'level=warn msg=commit_failed changes=\d+ '
                            r'error="[^"]+" not_logged=(\d+)', d.log_text())
        assert 1 <= len(failed) <= 4, (len(codes), failed)
        assert sum(map(int, failed)) > 0, failed
        key = ("leased_requests_total",
               (("code", "UNAVAILABLE"), ("method", "Acquire")))
        before = d.metrics()[key]
        ctl = subprocess.run([os.environ["LEASECTL_BIN"], "--url", d.addr,
                              "--timeout", "1s", "acquire", "x", "--owner",
                              "o"], capture_output=True, text=True,
                             timeout=30)
        assert ctl.returncode == 4, ctl  # unavailable
        assert 5 <= d.metrics()[key] - before <= 15

        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE,
                         (unlimited, unlimited))
        assert c.acquire("s", "bob").token == 1
        d.wait_log(r"msg=storage_recovered", timeout=2)
        assert c.renew(held).token == held.token
        assert c.renew(freed).token == freed.token
        assert d.stop() == 0
        rows, _ = read_db(d.db_path)
        assert rows["s"][:2] == ("bob", 1), rows


def watch_start(c):
    """The revision a Watch from now starts at: the store's newest."""
    stream = c.changes(prefix="", timeout=10)
    first = next(stream)
    stream.cancel()
    return first.revision


def test_restore_of_an_older_backup_with_a_raised_floor():
    """Promise 3 across the restore of an older backup: started with
    --raise-token-floor N (N: the token high-water mark `leasectl stats`
    showed before), leased gives only tokens above N, to sessions in the
    backup, sessions newer than it and new ones; a holder the backup knew
    is told it lost the lease; the raise is kept across restarts. Its
    Watch revisions start again 10^9 past the backup's, and a watcher of
    the revisions since the backup (which the restore gives to other
    changes) is told to read again (OUT_OF_RANGE); the flag given again
    moves nothing."""
    with harness.Leased(ttl="1s") as d:
        c = d.client()
        alice = c.acquire("a", "alice")
        backup = os.path.join(d.data_dir, "..", "backup.db")
        with sqlite3.connect(d.db_path) as src, \
                sqlite3.connect(backup) as dst:
            src.backup(dst)
        c.release(alice)
        c.release(c.acquire("a", "bob"))
        assert c.acquire("a", "carol").token == 3
        assert c.acquire("b", "dave").token == 1  # newer than the backup
        stats = subprocess.run(
            [os.environ["LEASECTL_BIN"], "--url", d.addr, "--json", "stats"],
            capture_output=True, text=True, timeout=30, check=True)
        high = json.loads(stats.stdout)["token_high_water_mark"]
        assert high == 3
        # 6 changes at least (the backup held the first); more when a slow
        # run let leases expire meanwhile (each told EXPIRED).
        seen = watch_start(c)
        assert seen >= 6, seen
        assert d.stop() == 0

        for suffix in ("-wal", "-shm"):
            if os.path.exists(d.db_path + suffix):
                os.unlink(d.db_path + suffix)
        os.replace(backup, d.db_path)
        d.args += ["--raise-token-floor", str(high)]
        d.start()
        d.wait_log(r"msg=token_floor_raised to=3 rows=1")
        c = d.client()
        expect_code(HELD, c.renew, alice)  # its token is no longer 1
        for after in (1, seen):  # one the backup has, one it has not
            expect_code(grpc.StatusCode.OUT_OF_RANGE,
                        lambda: list(c.changes(prefix="", after=after,
                                               timeout=10)))
        # 10^9 past the backup's last revision (1, or 2 if alice's lease
        # was told expired before the copy), and a few more if a slow run
        # told expiries since the start.
        start = watch_start(c)
        assert 10**9 < start < 10**9 + 10, start
        time.sleep(1.2)  # the restart quarantine
        assert c.acquire("a", "erin").token == 4
        assert c.acquire("b", "frank").token == 4  # not 1 again
        assert c.acquire("c", "gina").token == 4
        assert d.stop() == 0

        # Given again, the flag raises and moves nothing.
        d.start()
        c = d.client()
        moved = watch_start(c)  # erin, frank, gina's grants
        assert start + 3 <= moved < 2 * 10**9, (start, moved)
        assert d.stop() == 0

        d.args = d.args[:-2]
        d.start()
        c = d.client()
        time.sleep(1.2)
        # Above the raised floor: 4, or 5 once garbage collection took a,
        # b and c (token 4 each, a TTL after their expiry) before it, as a
        # slow run's can.
        new = c.acquire("new", "hal").token
        assert new in (4, 5), new
        assert d.stop() == 0
        rows, floor = read_db(d.db_path)
        assert floor >= 3, floor
        assert rows["new"][1] == new, rows
        assert min(v[1] for v in rows.values()) >= 4, rows


def test_full_queue_resource_exhausted():
    with harness.Leased(ttl="5s", args=["--max-pending", "2"]) as d:
        n = 20
        clients = [harness.Client(own_channel(d), timeout=10)
                   for _ in range(n)]
        clients[0].acquire("warm", "w")
        with harness.WriteLock(d.db_path):
            barrier = threading.Barrier(n)

            def call(i):
                barrier.wait(10)
                start = time.monotonic()
                code = status_of(clients[i].acquire, "q-%d" % i, "alice")
                return code, time.monotonic() - start

            results = run_threads([lambda i=i: call(i) for i in range(n)],
                                  timeout=30)
        codes = [code for code, _ in results]
        assert OK not in codes, codes
        assert codes.count(EXHAUSTED) >= 1, codes
        assert set(codes) <= {EXHAUSTED, UNAVAILABLE}, codes
        assert codes.count(UNAVAILABLE) <= 2 * 2, codes
        # Refusals are immediate, not after the busy timeout.
        assert min(t for code, t in results if code == EXHAUSTED) < 1.0
        # Afterwards it serves normally, and nothing was stored.
        for i in range(n):
            assert clients[0].acquire("q-%d" % i, "bob").token == 1, i
        rows, _ = read_db(d.db_path)
        assert len(rows) == n + 1


# ---------------------------------------------------------------- config

def run_leased(args, env=None, cwd=None, timeout=10):
    full_env = dict(os.environ)
    for k in list(full_env):
        if k.startswith("LEASED_") and k != "LEASED_BIN":
            del full_env[k]
    full_env.update(env or {})
    return subprocess.run([harness.leased_bin()] + args, env=full_env,
                          cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_config_help_and_version():
    r = run_leased(["--help"])
    assert r.returncode == 0, r
    assert "--listen" in r.stdout and "--ttl" in r.stdout, r.stdout
    r = run_leased(["--version"])
    assert r.returncode == 0, r
    assert re.match(r"leased \d+\.\d+\.\d+", r.stdout), r.stdout


def test_config_errors_exit_2():
    with tempfile.TemporaryDirectory(prefix="leased-cfg-") as tmp:
        data = os.path.join(tmp, "data")
        cases = [
            (["--bogus"], "--bogus"),
            (["--ttl", "50ms"], "50ms"),
            (["--ttl", "2h"], "2h"),
            (["--ttl", "abc"], "abc"),
            (["--ttl", "0s"], "0s"),
            (["--ttl"], "--ttl"),
            (["--listen", "0.0.0.0:7443"], "loopback"),
            (["--listen", "8.8.8.8:1"], "loopback"),
            (["--listen", "[::]:7443"], "loopback"),
            (["--listen", "example.com:7443"], "loopback"),
            (["--listen", "127.0.0.1:99999"], "port"),
            (["--listen", "unix:"], "unix"),
            (["--log-level", "loud"], "loud"),
            (["--max-pending", "0"], "1..10000000"),
            (["--max-pending", "-1"], "1..10000000"),
            (["--data-dir", ""], "empty"),
            (["stray"], "stray"),
        ]
        for args, word in cases:
            r = run_leased(["--data-dir", data, "--listen", "127.0.0.1:0"]
                           + args, cwd=tmp)
            assert r.returncode == 2, (args, r.returncode, r.stderr)
            assert word in r.stderr, (args, r.stderr)
            assert not os.path.exists(data), args
        for env, word in [({"LEASED_TTL": "abc"}, "LEASED_TTL"),
                          ({"LEASED_LISTEN": "10.0.0.1:7443"}, "loopback"),
                          ({"LEASED_MAX_PENDING": "x"}, "LEASED_MAX_PENDING")]:
            r = run_leased(["--data-dir", data], env=env, cwd=tmp)
            assert r.returncode == 2, (env, r.returncode, r.stderr)
            assert word in r.stderr, (env, r.stderr)
            assert not os.path.exists(data), env


def test_config_error_names_the_flag():
    """A bad value's message names the flag it was given to (as it does
    for LEASED_TTL and --listen)."""
    with tempfile.TemporaryDirectory(prefix="leased-cfg-") as tmp:
        bad = []
        for args, flag in [(["--ttl", "50ms"], "--ttl"),
                           (["--ttl=50ms"], "--ttl"),
                           (["--max-pending", "0"], "--max-pending"),
                           (["--log-level", "loud"], "--log-level"),
                           (["--data-dir", ""], "--data-dir")]:
            r = run_leased(["--listen", "127.0.0.1:0"] + args, cwd=tmp)
            assert r.returncode == 2, (args, r.returncode, r.stderr)
            msg = r.stderr.strip()
            # The flag, not its value, must come first: "leased: --ttl 50ms:"
            if not msg.startswith("leased: " + flag):
                bad.append((args, msg))
        r = run_leased([], env={"LEASED_TTL": "50ms"}, cwd=tmp)
        assert r.returncode == 2 and "LEASED_TTL" in r.stderr, r.stderr
        assert not bad, "messages do not name the flag: %r" % bad


def _expiry_in(d):
    """How far past the call's start the granted expiry lies, and how long
    the call took: a fresh lease's expiry is the daemon's clock during the
    call plus its TTL."""
    c = d.client()
    before = now_ns()
    l = c.acquire("ttl", "alice")
    took = (now_ns() - before) / 1e9
    return (ns(l.expiry) - before) / 1e9, took


def test_config_env_ttl_and_flag_precedence():
    with harness.Leased(ttl=None, env={"LEASED_TTL": "3s"}) as d:
        left, took = _expiry_in(d)
        assert 2.95 < left <= 3.05 + took, (left, took)
        assert "ttl_ms=3000" in d.log_text()
    with harness.Leased(ttl="1s", env={"LEASED_TTL": "3s"}) as d:
        left, took = _expiry_in(d)
        assert 0.95 < left <= 1.05 + took, (left, took)


def test_config_env_listen():
    with harness.Leased(listen=None, ttl="10s",
                        env={"LEASED_LISTEN": "127.0.0.1:0,127.0.0.2:0"}) as d:
        d.wait_log(r"msg=started")
        addrs = re.findall(r"msg=listening addr=(\S+)", d.log_text())
        assert len(addrs) == 2 and addrs[1].startswith("127.0.0.2:"), addrs
        c1 = d.client()
        l = c1.acquire("s", "alice")
        d.addr = addrs[1]
        c2 = d.client()
        expect_code(HELD, c2.acquire, "s", "bob")
        assert c2.renew(l).token == l.token


def test_config_unix_socket():
    with tempfile.TemporaryDirectory(prefix="leased-sock-") as tmp:
        path = os.path.join(tmp, "leased.sock")
        # Even under a permissive umask the socket is 0660 from the moment
        # leased says it listens.
        old = os.umask(0)
        try:
            d = harness.Leased(listen="unix:" + path).start()
        finally:
            os.umask(old)
        with d:
            assert d.addr == "unix:" + path, d.addr
            mode = stat.S_IMODE(os.stat(path).st_mode)
            assert stat.S_ISSOCK(os.stat(path).st_mode)
            assert mode == 0o660, oct(mode)
            c = d.client()
            l = c.acquire("s", "alice")
            assert c.renew(l).token == l.token
            c.release(l)
            assert c.acquire("s", "bob").token == l.token + 1


def test_config_ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        try:
            s.bind(("::1", 0))
        finally:
            s.close()
    except OSError as e:
        # No IPv6 loopback on this machine: leased must then fail to start
        # cleanly, saying so, rather than crash or pretend.
        print("     (no [::1] here: %s; checking the clean failure)" % e)
        d = harness.Leased(listen="[::1]:0").start(wait=False)
        rc = d.proc.wait(timeout=10)
        assert rc == 1, rc
        assert "cannot listen on [::1]:0" in d.log_text(), d.log_text()
        d.__exit__(None, None, None)
        return
    with harness.Leased(listen="[::1]:0") as d:
        assert d.addr.startswith("[::1]:"), d.addr
        c = d.client()
        l = c.acquire("s", "alice")
        assert l.token == 1
        assert c.renew(l).token == 1


def _refused_listen(listen, args=()):
    """Starts leased on an address it cannot listen on and returns its
    startup_failed line, having checked that the failure is clean: exit 1
    (leased's code for a refused start), one error line and nothing but
    leased's own `ts=… level=…` lines. gRPC's error dump must not be
    there: it was a `level=error msg=grpc file=chttp2_server.cc:…` line
    holding gRPC's error tree, `detail="UNKNOWN:No address added out of
    total 1 resolved for '…' {file:'…', children:[UNKNOWN:Unable to
    configure socket {…, children:[UNKNOWN:Address already in use
    {syscall:'bind', os_error:'…', errno:98, …}]}]}"` (and several lines
    when gRPC logs unrouted)."""
    rc, log = harness.Leased(listen=listen, args=args).run_to_exit()
    assert rc == 1, (rc, log)
    lines = log.splitlines()
    assert all(re.match(r"ts=\S+ level=(debug|info|warn|error) msg=\w+", l)
               for l in lines), log
    errors = [l for l in lines if " level=error " in l]
    assert len(errors) == 1, log
    assert " msg=startup_failed reason=" in errors[0], log
    for dump in ("msg=grpc", "chttp2_server", "children:", "os_error:",
                 "No address added"):
        assert dump not in log, (dump, log)
    return errors[0]


def test_config_listen_port_in_use():
    """A port another process listens on: leased exits 1 saying why in
    one line, `cannot listen on ADDR: address already in use`."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = "127.0.0.1:%d" % holder.getsockname()[1]
        line = _refused_listen(addr)
        want = 'reason="cannot listen on %s: address already in use"' % addr
        assert line.endswith(want), line
    finally:
        holder.close()


def test_config_listen_second_address_in_use():
    """The same when an address after the first is taken: the first
    one, already bound, is let go and leased still says why (gRPC 1.51
    aborts when a server holding a listener is destroyed unshut)."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = "127.0.0.1:%d" % holder.getsockname()[1]
        with tempfile.TemporaryDirectory(prefix="leased-sock-") as tmp:
            sock = os.path.join(tmp, "leased.sock")
            line = _refused_listen(None, ["--listen", "unix:" + sock,
                                          "--listen", addr])
            want = ('reason="cannot listen on %s: address already in use"'
                    % addr)
            assert line.endswith(want), line
            assert not os.path.exists(sock), "the first socket stayed"
    finally:
        holder.close()


def test_config_listen_failing_late_exits_promptly():
    """frontend_create failing once its uv handle, gRPC server and queue
    exist (here the second of two TCP addresses is taken, the first one
    bound): leased still exits 1 at once, saying why. Its failure path
    left the handle open, and the loop main.c then runs to close the rest
    never returned."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = "127.0.0.1:%d" % holder.getsockname()[1]
        start = time.monotonic()
        line = _refused_listen("127.0.0.1:0", ["--listen", addr])
        took = time.monotonic() - start
        want = 'reason="cannot listen on %s: address already in use"' % addr
        assert line.endswith(want), line
        assert took < 5, took
    finally:
        holder.close()


def test_config_listen_address_not_on_this_host():
    """An address no interface of this host has (192.0.2.1, TEST-NET-1,
    for documentation only): `cannot assign requested address`."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind(("192.0.2.1", 0))
        raise AssertionError("this host has 192.0.2.1: the case needs an "
                             "address it does not have")
    except OSError as e:
        assert e.errno == errno.EADDRNOTAVAIL, e
    finally:
        probe.close()
    line = _refused_listen("192.0.2.1:7443", ["--insecure"])
    want = ('reason="cannot listen on 192.0.2.1:7443: cannot assign '
            'requested address"')
    assert line.endswith(want), line


def test_config_listen_unix_socket_missing_dir():
    """A unix socket whose directory does not exist: the same form of
    reason, naming the directory."""
    with tempfile.TemporaryDirectory(prefix="leased-sock-") as tmp:
        missing = os.path.join(tmp, "missing")
        addr = "unix:" + os.path.join(missing, "leased.sock")
        line = _refused_listen(addr)
        want = ('reason="cannot listen on %s: socket directory %s: no such '
                'file or directory"' % (addr, missing))
        assert line.endswith(want), line


harness.main(globals())
