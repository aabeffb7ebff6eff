"""leased.v1.Leases/Watch on the real daemon, in both modes: every change
of owner as an event with a revision, once durable; resuming from a
revision across restarts and kill -9 with no gap and no duplicate,
checked against the events the store holds (SQLite's, or PostgreSQL's);
compaction's status; filters, bad input, policy, draining; over
PostgreSQL, the same revisions at every replica. A watcher's events are
waited for, never slept for.
"""
import os
import json
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time

import grpc

import harness
from harness import Leased, expect_code

INVALID = grpc.StatusCode.INVALID_ARGUMENT
OUT_OF_RANGE = grpc.StatusCode.OUT_OF_RANGE
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
GRANTED, RELEASED, EXPIRED, REVOKED = 1, 2, 3, 4
METRICS = ["--metrics-listen", "127.0.0.1:0"]
KINDS = {GRANTED: "GRANTED", RELEASED: "RELEASED", EXPIRED: "EXPIRED",
         REVOKED: "REVOKED"}


def until(what, cond, timeout=20.0):
    """Returns once cond() is true; fails (saying what) after timeout s."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


class Watcher:
    """A Watch stream read on a thread of its own: its messages, in
    order, and how it ended (an RpcError, or None while it runs)."""

    def __init__(self, client, **request):
        self.call = client.changes(**request)
        self.messages = []
        self.error = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            for m in self.call:
                self.messages.append(m)
        except grpc.RpcError as e:
            self.error = e
        finally:
            self.done.set()

    def events(self):
        return [e for m in list(self.messages) for e in m.events]

    def started(self):
        """The revision the stream starts after (its first message)."""
        until("the first message", lambda: self.messages or self.done.is_set())
        assert self.messages, self.error
        assert not self.messages[0].events
        return self.messages[0].revision

    def until_events(self, n):
        until("%d events (have %d)" % (n, len(self.events())),
              lambda: len(self.events()) >= n or self.done.is_set())
        assert len(self.events()) >= n, (self.events(), self.error)
        return self.events()

    def ended(self, timeout=20.0):
        assert self.done.wait(timeout), "the stream did not end"
        return self.error

    def cancel(self):
        self.call.cancel()
        self.done.wait(10)


def streams(d):
    return d.metrics()[("leased_watch_streams", ())]


def brief(events):
    """(revision, kind, session, owner, token) of each event."""
    return [(e.revision, KINDS[e.kind], e.lease.session_id, e.lease.owner,
             e.lease.token) for e in events]


POSTGRES = os.environ.get("LEASED_TEST_STORE") == "postgres"


def psql(d, sql):
    """Runs sql in d's PostgreSQL database: its rows."""
    name = dict(kv.split("=", 1) for kv in d.postgres.split())["dbname"]
    return harness.shared_postgres().psql(sql, dbname=name)


def stored_events(d):
    """What the store holds, as brief() says it (leased stopped, or over
    PostgreSQL any time)."""
    if d.postgres is not None:
        rows = psql(d, "SELECT revision, kind, convert_from(session, 'UTF8'),"
                    " convert_from(owner, 'UTF8'), token FROM leased_events "
                    "ORDER BY revision")
        return [(int(r), KINDS[int(k)], s, o, int(t)) for r, k, s, o, t in
                (line.split("|") for line in rows.splitlines())]
    db = sqlite3.connect(d.db_path)
    try:
        return [(r, KINDS[k], s, o, t) for r, k, s, o, t in db.execute(
            "SELECT revision, kind, session_id, owner, token FROM events "
            "ORDER BY revision")]
    finally:
        db.close()


def test_every_change_of_owner_is_an_event_in_revision_order():
    with Leased(ttl="1s") as d:
        c = d.client()
        w = Watcher(c, prefix="")
        assert w.started() == 0
        a = c.acquire("a", "o1")
        c.renew(a)                       # a renewal: no event
        assert c.acquire("a", "o1").token == a.token  # nor a re-acquire
        c.release(a)
        b = c.acquire("b", "o2")
        c.revoke("b")
        x = c.acquire("x", "o3")
        until("x expired", lambda: not c.get("x").live)
        y = c.acquire("x", "o4")         # its taker says it expired
        got = brief(w.until_events(7))
        assert got == [
            (1, "GRANTED", "a", "o1", a.token),
            (2, "RELEASED", "a", "o1", a.token),
            (3, "GRANTED", "b", "o2", b.token),
            (4, "REVOKED", "b", "o2", b.token),
            (5, "GRANTED", "x", "o3", x.token),
            (6, "EXPIRED", "x", "o3", x.token),
            (7, "GRANTED", "x", "o4", y.token),
        ], got
        grant = w.events()[0]
        assert grant.lease.expiry.seconds > 0
        # Each message says where the stream got to: resume after it.
        assert w.messages[-1].revision == 7
        w.cancel()
        d.stop()
        assert stored_events(d) == got


def test_an_expiry_is_told_as_it_happens_and_a_reclaim_after_it():
    """EXPIRED comes with no call to make the expiry known; the holder's
    renewal after it reclaims the lease (the same token), told GRANTED
    again."""
    with Leased(ttl="1s") as d:
        c = d.client()
        w = Watcher(c, session="x")
        w.started()
        x = c.acquire("x", "o")
        got = brief(w.until_events(2))
        assert got == [(1, "GRANTED", "x", "o", x.token),
                       (2, "EXPIRED", "x", "o", x.token)], got
        back = c.renew(x)
        assert back.token == x.token
        got = brief(w.until_events(3))
        assert got[2] == (3, "GRANTED", "x", "o", x.token), got
        # Told once: its next expiry is told again, after the reclaim.
        assert brief(w.until_events(4))[3][:2] == (4, "EXPIRED")
        w.cancel()


def test_an_expiry_told_before_a_restart_is_not_told_again():
    """A lease told expired, still held in the store when leased
    restarts, is quarantined and then expired again: the events say it
    once."""
    with Leased(ttl="1s") as d:
        c = d.client()
        w = Watcher(c, prefix="")
        w.started()
        x = c.acquire("x", "o")
        w.until_events(2)
        w.cancel()
        d.stop()
        d.start()
        c = d.client()
        w = Watcher(c, prefix="", after=2)
        w.started()
        # z expires after the quarantine ended; w a whole pass of the
        # table (a second of ticks) after z was told.
        z = c.acquire("z", "o")
        w.until_events(2)
        y = c.acquire("y", "o")
        got = brief(w.until_events(4))
        w.cancel()
        assert got == [(3, "GRANTED", "z", "o", z.token),
                       (4, "EXPIRED", "z", "o", z.token),
                       (5, "GRANTED", "y", "o", y.token),
                       (6, "EXPIRED", "y", "o", y.token)], got
        d.stop()
        assert [e[1:3] for e in stored_events(d)] == [
            ("GRANTED", "x"), ("EXPIRED", "x"), ("GRANTED", "z"),
            ("EXPIRED", "z"), ("GRANTED", "y"), ("EXPIRED", "y")]
        assert x.token >= 1


def test_a_session_or_a_prefix_sees_only_its_own():
    with Leased(ttl="20s") as d:
        c = d.client()
        one = Watcher(c, session="p/1")
        pre = Watcher(c, prefix="p/")
        one.started()
        pre.started()
        for s in ["q/1", "p/1", "p/2", "p", "p/10"]:
            c.release(c.acquire(s, "o"))
        assert [e[2] for e in brief(pre.until_events(6))] == \
            ["p/1", "p/1", "p/2", "p/2", "p/10", "p/10"]
        assert [e[2] for e in brief(one.until_events(2))] == ["p/1", "p/1"]
        # Nothing else came: p/10's release is the newest revision.
        c.release(c.acquire("p/1", "last"))
        assert brief(one.until_events(4))[2][3] == "last"
        assert [e[2] for e in brief(one.events())] == ["p/1"] * 4


def test_a_watcher_resumes_across_restarts_without_gap_or_duplicate():
    """Events come from a watcher that reconnects after every stop, a
    clean one and a kill -9, with its last revision: together they are
    exactly what the store holds, in order, and every answered change is
    among them."""
    with Leased(ttl="20s") as d:
        seen = []
        answered = []

        def changes(prefix, n):
            c = d.client()
            for i in range(n):
                lease = c.acquire("%s%d" % (prefix, i), "o")
                answered.append(("GRANTED", lease.session_id, lease.token))
                if i % 2 == 0:
                    c.release(lease)
                    answered.append(("RELEASED", lease.session_id,
                                     lease.token))

        def resume():
            """From the last revision seen (its first message may bring
            what the last stream missed), or from now."""
            if seen:
                return Watcher(d.client(), prefix="", after=seen[-1][0])
            w = Watcher(d.client(), prefix="")
            w.started()
            return w

        w = resume()
        changes("a", 10)
        seen += brief(w.until_events(15))
        w.cancel()
        d.stop()
        d.start()
        w = resume()
        changes("b", 6)
        d.kill9()
        assert w.ended() is not None
        seen += brief(w.events())
        d.start()
        w = resume()
        changes("c", 4)
        total = 15 + 9 + 6
        until("every event", lambda: len(seen) + len(w.events()) >= total)
        seen += brief(w.events())
        w.cancel()
        d.stop()
        assert [e[0] for e in seen] == list(range(1, total + 1)), seen
        assert seen == stored_events(d)
        assert [(k, s, t) for _, k, s, _, t in seen] == answered


def test_a_revision_no_longer_kept_ends_the_stream_out_of_range():
    with Leased(ttl="20s", args=["--watch-history", "3"]) as d:
        c = d.client()
        for s in ["a", "b", "c"]:
            c.release(c.acquire(s, "o"))        # revisions 1..6
        w = Watcher(c, prefix="", after=4)      # 5 and 6 are kept
        assert [e[0] for e in brief(w.until_events(2))] == [5, 6]
        w.cancel()
        for after in [1, 2]:                    # 2 and 3 are gone
            w = Watcher(c, prefix="", after=after)
            err = w.ended()
            assert err.code() == OUT_OF_RANGE, err
            assert "no longer kept (the oldest is 4)" in err.details(), \
                err.details()
            assert w.messages[-1].compact_revision == 4
        w = Watcher(c, prefix="", after=3)      # the next one is 4: kept
        assert [e[0] for e in brief(w.until_events(3))] == [4, 5, 6]
        w.cancel()
        w = Watcher(c, session="a", after=99)   # ahead of this store
        err = w.ended()
        assert err.code() == OUT_OF_RANGE
        assert "ahead" in err.details(), err.details()
        if POSTGRES:  # the replica deletes the rest within a second
            until("the events compacted", lambda: [
                e[0] for e in stored_events(d)] == [4, 5, 6])
        else:
            d.stop()
            assert [e[0] for e in stored_events(d)] == [4, 5, 6]


def test_a_watcher_that_falls_behind_the_history_reads_again():
    """A stream is not a queue: one whose reader stopped reading is cut
    OUT_OF_RANGE once what it has not taken is no longer kept, rather
    than buffered without bound; a reader that keeps up is not."""
    with Leased(ttl="20s", args=["--watch-history", "50"]) as d:
        c = d.client()
        keeps_up = Watcher(c, prefix="")
        keeps_up.started()
        # Never read until the end, on a channel whose window stays at
        # HTTP/2's 64 KiB (no bandwidth probe to widen it).
        small = harness.Client(d.channel(options=[("grpc.http2.bdp_probe",
                                                   0)]))
        stalled = small.changes(prefix="", timeout=60)
        owner = "o" * 256
        n = 400                              # ~320 KB of events
        for i in range(n):
            c.release(c.acquire("%04d" % i + "s" * 508, owner))
        assert keeps_up.until_events(2 * n)
        try:
            for _ in stalled:
                pass
            raise AssertionError("the stalled stream was not cut")
        except grpc.RpcError as e:
            assert e.code() == OUT_OF_RANGE, e
        assert keeps_up.error is None
        keeps_up.cancel()


def test_bad_watch_requests_are_refused():
    with Leased(ttl="20s") as d:
        c = d.client()
        for req in [dict(session="s", prefix="p"), dict(session="a\x00b"),
                    dict(prefix="p" * 600)]:
            err = Watcher(c, **req).ended()
            assert err.code() == INVALID, (req, err)
        expect_code(INVALID, lambda: list(c.channel.unary_stream(
            harness.LEASES + "Watch")(b"\xff\xff", timeout=5)))
        assert len(c.list().leases) == 0


def test_watch_needs_the_token_and_the_policy_of_its_sessions():
    with tempfile.TemporaryDirectory() as tmp:
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write("alice t-alice\nbob t-bob\n")
        os.chmod(tokens, 0o600)
        policy = os.path.join(tmp, "policy")
        with open(policy, "w") as f:
            f.write("alice sessions=a/ owners=*\n"
                    "bob sessions=* owners=*\n")
        with Leased(ttl="20s", args=["--auth-token-file", tokens,
                                     "--policy-file", policy]) as d:
            ch = d.channel()
            nobody = harness.Client(ch)
            alice = harness.Client(ch, token="t-alice")
            bob = harness.Client(ch, token="t-bob")
            err = Watcher(nobody, prefix="").ended()
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED
            for req in [dict(prefix=""), dict(prefix="b/"),
                        dict(session="b/1"), dict(prefix="a")]:
                err = Watcher(alice, **req).ended()
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED, req
            w = Watcher(alice, prefix="a/x")
            w.started()
            bob.release(bob.acquire("a/x1", "o"))
            assert [e[2] for e in brief(w.until_events(2))] == ["a/x1"] * 2
            w.cancel()


def test_stopping_ends_every_stream_unavailable():
    with Leased(ttl="20s") as d:
        ws = [Watcher(d.client(), prefix=""), Watcher(d.client(), session="s")]
        for w in ws:
            w.started()
        d.proc.send_signal(signal.SIGTERM)
        for w in ws:
            err = w.ended()
            assert err.code() == UNAVAILABLE and "draining" in err.details()
        assert d.proc.wait(timeout=15) == 0


def leasectl(d, *args, url=None):
    """Starts leasectl against d (JSON output)."""
    return subprocess.Popen(
        [os.environ["LEASECTL_BIN"], "--url", url or d.addr, "--json"] +
        list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lines(p, n):
    """The first n JSON lines leasectl p prints (it runs on)."""
    got = []
    for _ in range(n):
        line = p.stdout.readline()
        assert line, (got, p.stderr.read() if p.poll() is not None else "")
        got.append(json.loads(line))
    return got


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_leasectl_watch_follows_the_daemon_through_a_restart():
    """leasectl watch (liblease's lease_watch) prints each change as it
    comes, and when the daemon stops and comes back, resumes from the
    last revision it printed: no change missed, none twice."""
    addr = "127.0.0.1:%d" % free_port()
    with Leased(ttl="20s", listen=addr, args=METRICS) as d:
        p = leasectl(d, "watch", "--prefix", "j/", "--limit", "4")
        c = d.client()
        until("leasectl watching", lambda: streams(d) == 1)
        a = c.acquire("j/1", "o1")
        c.release(a)
        first = lines(p, 2)
        d.stop()
        d.start()
        b = d.client().acquire("j/2", "o2")
        d.client().release(b)
        rest = lines(p, 2)
        assert p.wait(timeout=20) == 0, p.stderr.read()
        got = [(e["revision"], e["kind"], e["session_id"], e["owner"],
                e["token"]) for e in first + rest]
        assert got == [(1, "granted", "j/1", "o1", a.token),
                       (2, "released", "j/1", "o1", a.token),
                       (3, "granted", "j/2", "o2", b.token),
                       (4, "released", "j/2", "o2", b.token)], got


def test_leasectl_watch_after_a_revision_no_longer_kept_exits_10():
    with Leased(ttl="20s", args=["--watch-history", "2"]) as d:
        c = d.client()
        for s in ["a", "b"]:
            c.release(c.acquire(s, "o"))
        # Once the store's newest (4) is leased's: over PostgreSQL, once
        # the replica's copy read it, which a watcher from 4 waits for.
        synced = Watcher(c, prefix="", after=4)
        synced.started()
        synced.cancel()
        p = leasectl(d, "watch", "--prefix", "", "--after", "1")
        out, err = p.communicate(timeout=20)
        assert p.returncode == 10, (p.returncode, out, err)
        assert "OUT_OF_RANGE" in err, err
        p = leasectl(d, "watch", "b", "--after", "2", "--limit", "1")
        out, err = p.communicate(timeout=20)
        assert p.returncode == 0, err
        assert (json.loads(out)["kind"], json.loads(out)["revision"]) == \
            ("granted", 3)


def test_the_election_recipe():
    """docs/client.md's election: candidates hold the session with
    --wait inf, in line; an observer watches it and sees each leader in
    turn, with rising tokens."""
    with Leased(ttl="20s", args=METRICS) as d, \
            tempfile.TemporaryDirectory() as tmp:
        stop = os.path.join(tmp, "stop")
        observer = leasectl(d, "watch", "election", "--limit", "4")
        until("the observer watching", lambda: streams(d) == 1)
        first = leasectl(d, "hold", "election", "--owner", "c1", "--wait",
                         "inf", "--", "sh", "-c",
                         "while [ ! -e %s ]; do sleep 0.05; done" % stop)
        led = lines(observer, 1)
        assert (led[0]["kind"], led[0]["owner"]) == ("granted", "c1")
        second = leasectl(d, "hold", "election", "--owner", "c2", "--wait",
                          "inf", "--", "true")
        until("c2 in line", lambda: d.metrics()[
            ("leased_waiting_calls", ())] == 1)
        open(stop, "w").close()
        rest = lines(observer, 3)
        assert [(e["kind"], e["owner"]) for e in rest] == [
            ("released", "c1"), ("granted", "c2"), ("released", "c2")]
        assert rest[1]["token"] > led[0]["token"]
        for p in (first, second, observer):
            assert p.wait(timeout=20) == 0, p.stderr.read()


def replicas(ttl="20s"):
    """Two replicas over one new database (not started)."""
    conninfo = harness.fresh_database()
    return (Leased(ttl=ttl, args=METRICS, postgres=conninfo),
            Leased(ttl=ttl, args=METRICS, postgres=conninfo))


def test_every_replica_serves_the_same_revisions():
    """Changes made through two replicas at once: each replica's
    watchers see every one of them, with the same revisions, in the
    order the database committed them (its events table)."""
    a, b = replicas()
    with a, b:
        wa, wb = Watcher(a.client(), prefix=""), Watcher(b.client(), prefix="")
        wa.started()
        wb.started()

        def churn(d, who):
            c = d.client()
            for i in range(30):
                c.release(c.acquire("%s%d" % (who, i % 3), who))

        threads = [threading.Thread(target=churn, args=(d, who))
                   for d, who in ((a, "A"), (b, "B"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = brief(wa.until_events(120))
        assert brief(wb.until_events(120)) == got
        assert [e[0] for e in got] == list(range(1, 121))
        assert got == stored_events(a)
        # Each session's changes alternate: a grant, then its release.
        for s in ("A0", "A1", "A2", "B0", "B1", "B2"):
            kinds = [e[1] for e in got if e[2] == s]
            assert kinds == ["GRANTED", "RELEASED"] * 10, kinds
        wa.cancel()
        wb.cancel()


def test_a_watcher_moves_to_another_replica_without_gap_or_duplicate():
    """A watcher whose replica is killed resumes at the other one from
    its last revision: together its streams are the database's events,
    once each, with every answered change among them."""
    a, b = replicas()
    with a, b:
        answered = []

        def changes(d, prefix, n):
            c = d.client()
            for i in range(n):
                lease = c.acquire("%s%d" % (prefix, i), "o")
                c.release(lease)
                answered.extend([("GRANTED", lease.session_id, lease.token),
                                 ("RELEASED", lease.session_id, lease.token)])

        w = Watcher(a.client(), prefix="")
        w.started()
        changes(b, "x", 5)
        seen = brief(w.until_events(10))
        changes(b, "y", 5)
        a.kill9()
        assert w.ended() is not None
        seen += brief(w.events()[10:])
        w = Watcher(b.client(), prefix="", after=seen[-1][0])
        changes(b, "z", 5)
        until("every event", lambda: len(seen) + len(w.events()) >= 30)
        seen += brief(w.events())
        w.cancel()
        assert [e[0] for e in seen] == list(range(1, 31)), seen
        assert seen == stored_events(b)
        assert [(k, s, t) for _, k, s, _, t in seen] == answered


def test_a_replica_behind_the_database_is_asked_before_ahead():
    """A replica's copy of the events may be behind the database (here
    its listening connection's backend is stopped, so it hears and reads
    nothing): a watcher that asks for a revision above the copy's newest
    waits for the copy to catch up, rather than being told it is ahead;
    one truly ahead of the database is told."""
    a, b = replicas()
    with a, b:
        ca = a.client()
        ca.release(ca.acquire("s", "o"))              # revisions 1, 2
        pids = [int(p) for p in psql(
            a, "SELECT pid FROM pg_stat_activity WHERE datname = "
               "current_database() AND " + harness.LISTENING).split()]
        assert len(pids) == 2, pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            lease = ca.acquire("s", "o2")             # 3
            ca.release(lease)                         # 4
            late = Watcher(b.client(), session="s", after=3)
            until("the stream started",
                  lambda: streams(b) == 1 or late.done.is_set())
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert brief(late.until_events(1)) == [
            (4, "RELEASED", "s", "o2", lease.token)], late.error
        late.cancel()
        err = Watcher(b.client(), prefix="", after=5).ended()
        assert err.code() == OUT_OF_RANGE and "ahead" in err.details(), err


def test_an_expiry_is_told_with_no_watcher_by_collection():
    """With nobody watching, no replica looks for expiries; collection
    tells each before it deletes the lease's row."""
    with Leased(ttl="1s") as d:
        x = d.client().acquire("x", "o")
        until("x told expired", lambda: stored_events(d)[1:] == [
            (2, "EXPIRED", "x", "o", x.token)], timeout=30)
        until("x collected", lambda: psql(
            d, "SELECT count(*) FROM leased_leases") == "0", timeout=30)
        w = Watcher(d.client(), session="x", after=1)
        assert brief(w.until_events(1)) == [(2, "EXPIRED", "x", "o", x.token)]
        w.cancel()


def test_a_restore_moves_the_revisions_on():
    """--raise-token-floor at a restore of the database moves its
    revisions on by 10^9 and forgets the events kept: a watcher of the
    revisions before reads again. The same flag again moves nothing."""
    d = Leased(ttl="20s")
    with d:
        c = d.client()
        c.release(c.acquire("s", "o"))                # revisions 1, 2
        d.stop()
        d.args = d.args + ["--raise-token-floor", "100"]
        for again in (False, True):
            d.start()
            err = Watcher(d.client(), prefix="", after=1).ended()
            assert err.code() == OUT_OF_RANGE, err
            w = Watcher(d.client(), prefix="")
            first = w.started()
            assert first == 10**9 + 2 + 2 * again, first
            lease = d.client().acquire("s", "o")
            assert lease.token > 100
            d.client().release(lease)
            assert [e[0] for e in brief(w.until_events(2))] == [
                first + 1, first + 2]
            w.cancel()
            d.stop()
        assert [e[0] for e in stored_events(d)] == [
            10**9 + 3, 10**9 + 4, 10**9 + 5, 10**9 + 6]


def test_a_failed_read_of_the_events_keeps_the_copy():
    """The replica cannot read the events (their counter deleted by
    hand): it says so, keeps its copy and its watchers, refuses the
    changes whose events cannot be numbered rather than make them
    untold, and goes on once the database is mended."""
    with Leased(ttl="20s") as d:
        c = d.client()
        w = Watcher(c, prefix="")
        w.started()
        c.release(c.acquire("s", "o"))                # 1, 2
        w.until_events(2)
        psql(d, "DELETE FROM leased_meta WHERE key = 'revision'")
        d.wait_log(r"msg=database_failed during=events .*no revision "
                   r"counter", 10)
        expect_code(UNAVAILABLE, c.acquire, "t", "o")
        assert psql(d, "SELECT count(*) FROM leased_leases "
                       "WHERE session = 't'") == "0"
        assert not w.done.is_set()
        psql(d, "INSERT INTO leased_meta VALUES ('revision', 2)")
        lease = c.acquire("t", "o")
        assert brief(w.until_events(3))[2:] == [
            (3, "GRANTED", "t", "o", lease.token)]
        w.cancel()


def test_a_database_gone_back_ends_the_streams_ahead_of_it():
    """The database's events go back (a restore without
    --raise-token-floor; here deleted, and their counter set back, by
    hand): the replica's copy starts again lower, and every stream now
    ahead of it ends OUT_OF_RANGE, one of a session that never changes
    again too."""
    with Leased(ttl="20s") as d:
        c = d.client()
        c.release(c.acquire("s", "o"))                # revisions 1, 2
        c.release(c.acquire("t", "o"))                # 3, 4
        quiet = Watcher(c, session="s", after=4)
        assert quiet.started() == 4
        psql(d, "DELETE FROM leased_events; UPDATE leased_meta "
                "SET value = 1 WHERE key = 'revision'")
        c.release(c.acquire("u", "o"))                # 2, 3 now
        err = quiet.ended()
        assert err.code() == OUT_OF_RANGE and "ahead" in err.details(), err
        w = Watcher(c, prefix="", after=3)           # the new newest
        lease = c.acquire("v", "o")                   # 4, and goes on
        assert brief(w.until_events(1)) == [(4, "GRANTED", "v", "o",
                                             lease.token)]
        w.cancel()


POSTGRES_ONLY = ["test_a_failed_read_of_the_events_keeps_the_copy",
                 "test_a_database_gone_back_ends_the_streams_ahead_of_it",
                 "test_a_restore_moves_the_revisions_on",
                 "test_every_replica_serves_the_same_revisions",
                 "test_a_watcher_moves_to_another_replica_without_gap_or_"
                 "duplicate",
                 "test_a_replica_behind_the_database_is_asked_before_ahead",
                 "test_an_expiry_is_told_with_no_watcher_by_collection"]
if not POSTGRES:
    for name in POSTGRES_ONLY:
        del globals()[name]

harness.main(globals())
