"""Durability and group commit, seen from outside the daemon.

- Takeovers and releases are fsynced before they are answered; renewals
  are not even written (docs/protocol.md, guarantee 7 and the restart
  quarantine). Syncs counted with strace on the real binary, rows read
  from the database file.
- Calls that arrive while a commit is in flight share the next
  transaction (group commit), seen in the daemon's debug log.
- An answer that depends on a takeover waits for the takeover's fsync,
  and a failed fsync ends the daemon (exit 74) before anything else is
  answered: syncs are slowed down or failed with strace's fault injection
  on the real binary.
"""
import os
import re
import subprocess
import sqlite3
import tempfile
import threading
import time

import harness

SYNCS = re.compile(r"\b(fsync|fdatasync)\(")
# LeakSanitizer cannot run under ptrace; other tests check leaks.
NO_LEAK_CHECK = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
                                 ":detect_leaks=0"}
OK = harness.grpc.StatusCode.OK
HELD = harness.grpc.StatusCode.FAILED_PRECONDITION
METRICS = ["--metrics-listen", "127.0.0.1:0"]
EX_IOERR = 74


def until(what, ok, timeout=20):
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "%s: not after %ss" % (what,
                                                                  timeout)
        time.sleep(0.01)


def traced(pid, tracer):
    """Whether every thread of process pid is traced by process tracer."""
    task = "/proc/%d/task" % pid
    for tid in os.listdir(task):
        try:
            with open(os.path.join(task, tid, "status")) as f:
                status = f.read()
        except FileNotFoundError:
            continue  # the thread ended
        if "\nTracerPid:\t%d\n" % tracer not in status:
            return False
    return True


def queued(d, n):
    """Waits until n calls are in the daemon, unanswered."""
    until("%d calls queued" % n,
          lambda: d.metrics()[("leased_queue_depth", ())] == n)


def count_syncs(work):
    """Runs work(client) against a leased with strace attached to all its
    threads; returns the number of fsync/fdatasync calls the daemon made
    from then until it exited."""
    with tempfile.TemporaryDirectory(prefix="leased-strace-") as tmp:
        out = os.path.join(tmp, "strace.out")
        with harness.Leased(ttl="30s", env=NO_LEAK_CHECK) as d:
            c = d.client()
            c.acquire("warm-up", "A")
            tracer = subprocess.Popen(
                ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync",
                 "-o", out, "-p", str(d.proc.pid)])
            until("strace attached", lambda: traced(d.proc.pid, tracer.pid))
            work(c)
        tracer.wait(timeout=15)  # ends with the daemon
        with open(out) as f:
            return len(SYNCS.findall(f.read()))


def test_takeovers_and_releases_fsync_renewals_do_not():
    n = 60

    def renewals(c):
        lease = c.acquire("s", "A")
        for _ in range(n):
            lease = c.renew(lease)

    def ownership_changes(c):
        for i in range(n // 2):
            c.release(c.acquire("s", "owner-%d" % i))

    quiet = count_syncs(renewals)
    busy = count_syncs(ownership_changes)
    print("     (syncs: %d renewals -> %d, %d takeovers+releases -> %d)"
          % (n, quiet, n, busy))
    # Start-up, the one takeover and the close sync a handful of times;
    # every renewal syncing would add n.
    assert quiet < n // 3, quiet
    # One sync (at least) per sequential takeover or release.
    assert busy >= n, busy


def test_renewals_are_kept_in_memory_only():
    """A renewal is answered without a write: the stored row keeps the
    expiry of its takeover, while Renew, admin Get and List all show the
    renewed one (the restart quarantine covers it after a crash; see
    test_daemon's kill -9 tests)."""
    def stored_expiry(d, session):
        con = sqlite3.connect(d.db_path, timeout=5)
        try:
            return con.execute("SELECT expiry_ns FROM leases "
                               "WHERE session_id = ?", (session,)).fetchone()[0]
        finally:
            con.close()

    with harness.Leased(ttl="30s") as d:
        c = d.client()
        first = c.acquire("mem-a", "A")
        c.acquire("mem-b", "B")
        time.sleep(0.05)
        lease = first
        for _ in range(5):
            lease = c.renew(lease)
        renewed = lease.expiry.ToNanoseconds()
        assert renewed > first.expiry.ToNanoseconds()
        assert stored_expiry(d, "mem-a") == first.expiry.ToNanoseconds()
        got = c.get("mem-a")
        assert (got.token, got.live) == (first.token, True)
        assert got.expiry.ToNanoseconds() == renewed
        listed = {l.session_id: l for l in c.list(prefix="mem-").leases}
        assert sorted(listed) == ["mem-a", "mem-b"], listed
        assert listed["mem-a"].expiry.ToNanoseconds() == renewed
        assert listed["mem-a"].live and listed["mem-b"].live
        # A release matches the stored row on owner and token, whatever
        # its expiry: it is written, and the session is free at once.
        c.release(lease)
        assert c.acquire("mem-a", "C").token == first.token + 1


def test_calls_arriving_during_a_commit_share_the_next():
    with harness.Leased(args=["--log-level", "debug"] + METRICS) as d:
        c = d.client()
        c.acquire("warm-up", "A")
        con = sqlite3.connect(d.db_path, isolation_level=None, timeout=5)
        con.execute("BEGIN IMMEDIATE")  # the next commit waits for this
        results = []

        def call(i):
            results.append(harness.status_of(c.acquire, "s-%d" % i, "A"))

        threads = [threading.Thread(target=call, args=(i,))
                   for i in range(20)]
        for t in threads:
            t.start()
        queued(d, 20)  # all in: one committing, the rest waiting
        con.execute("ROLLBACK")
        con.close()
        for t in threads:
            t.join(10)
        assert results == [harness.grpc.StatusCode.OK] * 20, results
        sizes = [int(m) for m in
                 re.findall(r"msg=committed changes=(\d+)", d.log_text())]
        # warm-up, then the first of the 20 alone, then the rest together.
        assert sum(sizes) == 21, sizes
        assert max(sizes) >= 10, sizes


def test_a_renewal_does_not_overtake_its_holders_waiting_release():
    """The calls of one session are decided in the order they arrived. A
    release that waits behind a slow commit (the database locked from
    outside) ends the lease before a renewal that arrives after it is
    decided: the renewal is refused, never an OK for a lease the release
    then ends (a holder that gave up waiting for its release may renew)."""
    # live throughout, however slow
    with harness.Leased(ttl="5s", args=METRICS) as d:
        c = d.client()
        lease = c.acquire("s", "A")
        with harness.WriteLock(d.db_path):
            other = Timed(c.acquire, "t", "B")  # its commit waits
            queued(d, 1)
            release = Timed(c.release, lease)  # waits for the next batch
            queued(d, 2)
            renewal = Timed(c.renew, lease)
            queued(d, 3)
            early = [t.code for t in (other, release, renewal)
                     if not t.is_alive()]
        for t in (other, release, renewal):
            t.join(10)
        assert early == [], early
        assert other.code == OK, other.code
        assert release.code == OK, release.code
        assert renewal.code == HELD, renewal.code
        assert c.acquire("s", "C").token > lease.token


class FaultySyncs:
    """strace attached to every thread of the daemon, injecting into each
    of its fsync and fdatasync calls from now on (strace's inject= syntax,
    e.g. "delay_enter=1000000" or "error=EIO")."""

    def __init__(self, d, inject):
        self.d = d
        self.inject = inject

    def __enter__(self):
        self.out = os.path.join(self.d.data_dir, "..", "strace.out")
        self.tracer = subprocess.Popen(
            ["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync",
             "-e", "inject=fsync,fdatasync:" + self.inject,
             "-o", self.out, "-p", str(self.d.proc.pid)])
        until("strace attached",
              lambda: traced(self.d.proc.pid, self.tracer.pid))
        return self

    def __exit__(self, *exc):
        if self.tracer.poll() is None:
            self.tracer.terminate()
        self.tracer.wait(timeout=15)


class Timed(threading.Thread):
    """Runs fn(*args) on a thread of its own: .code is its status, .value
    its result, .done the monotonic time it returned."""

    def __init__(self, fn, *args):
        super().__init__()
        self.fn, self.args = fn, args
        self.start()

    def run(self):
        try:
            self.value = self.fn(*self.args)
            self.code = OK
        except harness.grpc.RpcError as e:
            self.value, self.code = None, e.code()
        self.done = time.monotonic()


def test_answers_wait_for_the_takeover_they_depend_on():
    """A re-acquire by the new owner, its renewal, and a competitor's
    refusal change no owner themselves, but each was decided from a
    takeover: none is answered before that takeover's fsync ends, however
    slow the fsync is."""
    with harness.Leased(ttl="5s", env=NO_LEAK_CHECK) as d:
        c = d.client()
        c.acquire("warm-up", "A")
        with FaultySyncs(d, "delay_enter=1000000"):
            start = time.monotonic()
            takeover = Timed(c.acquire, "s", "A")
            time.sleep(0.3)  # committed by now, its fsync still slow
            again = Timed(c.acquire, "s", "A")
            lease = harness.pb.Lease(session_id="s", owner="A", token=1)
            renewal = Timed(c.renew, lease)
            refusal = Timed(c.acquire, "s", "B")
            for t in (takeover, again, renewal, refusal):
                t.join(10)
        assert takeover.code == OK and takeover.value.token == 1
        assert again.code == OK and again.value.token == 1, again.code
        assert renewal.code == OK, renewal.code
        assert refusal.code == HELD, refusal.code
        for t in (again, renewal, refusal):
            # Answered with the takeover, a second after it began: not as
            # soon as decided (0.3 s).
            assert t.done - start >= 0.9, t.done - start


def test_answers_about_a_collected_lease_wait_for_the_collection():
    """Garbage collection deletes the row of a lease expired for more than
    a TTL: committed, not yet synced. A no-op release and a refused
    renewal of that lease are decided from the row's absence, so they are
    answered only once the deletion is durable: after a power loss the
    row would come back, and with it a lease they said was gone."""
    with harness.Leased(ttl="1s", env=NO_LEAK_CHECK) as d:
        c = d.client()
        lease = c.acquire("s", "A")
        deadline = time.monotonic() + 10
        while True:  # expires at 1 s, collectable after 2 s
            con = sqlite3.connect(d.db_path, timeout=5)
            rows = con.execute("SELECT count(*) FROM leases").fetchone()[0]
            con.close()
            if rows == 0:
                break
            assert time.monotonic() < deadline, "never collected"
            time.sleep(0.1)
        with FaultySyncs(d, "delay_enter=1000000"):
            start = time.monotonic()
            release = Timed(c.release, lease)
            renewal = Timed(c.renew, lease)
            release.join(10)
            renewal.join(10)
        assert release.code == OK, release.code
        assert renewal.code == HELD, renewal.code
        for t in (release, renewal):
            assert t.done - start >= 0.9, t.done - start


def test_a_failed_fsync_fails_what_depends_on_it_and_ends_the_daemon():
    """fdatasync fails (EIO): the takeover and every answer decided from it
    (a re-acquire, a renewal with its token) get no OK, and leased exits
    with EX_IOERR at once, answering nothing more: the page cache is no
    longer the truth. Restarted, it has every lease it acknowledged."""
    with harness.Leased(ttl="5s", env=NO_LEAK_CHECK) as d:
        c = d.client()
        held = c.acquire("held", "A")
        with FaultySyncs(d, "error=EIO:delay_enter=1000000"):
            takeover = Timed(c.acquire, "s", "A")
            time.sleep(0.3)
            again = Timed(c.acquire, "s", "A")
            lease = harness.pb.Lease(session_id="s", owner="A", token=1)
            renewal = Timed(c.renew, lease)
            for t in (takeover, again, renewal):
                t.join(10)
            for t in (takeover, again, renewal):
                assert t.code not in (OK, HELD), t.code
            rc = d.proc.wait(timeout=10)
        assert rc == EX_IOERR, (rc, d.log_text())
        log = d.log_text()
        assert re.search(r"level=error msg=sync_failed error=\"fdatasync of "
                         r"the WAL failed: Input/output error\" action=exit "
                         r"exit_code=74", log), log
        d.start()
        c = d.client()
        assert c.renew(held).token == held.token
        harness.expect_code(HELD, c.acquire, "held", "B")


def test_health_does_not_flap_while_every_fsync_fails():
    """With every fsync failing, renewals are still answered (they write
    nothing); they must not make storage count as recovered. The first failed sync ends the daemon:
    health goes from SERVING to the end of the stream, and no
    storage_recovered is ever logged."""
    with harness.Leased(ttl="5s", env=NO_LEAK_CHECK) as d:
        c = d.client()
        leases = [c.acquire("r%d" % i, "A") for i in range(4)]
        stream, statuses = c.watch(timeout=30)
        assert next(statuses) == "SERVING"
        seen = []

        def watch():
            try:
                seen.extend(statuses)
            except harness.grpc.RpcError:
                pass  # the daemon is gone: the stream ends with an error

        watcher = threading.Thread(target=watch)
        watcher.start()
        with FaultySyncs(d, "error=EIO"):
            end = time.monotonic() + 3
            i = 0
            while time.monotonic() < end and d.proc.poll() is None:
                calls = [Timed(c.renew, l) for l in leases]
                calls.append(Timed(c.acquire, "t%d" % i, "A"))
                for t in calls:
                    t.join(10)
                i += 1
            assert "msg=storage_recovered" not in d.log_text()
            assert "SERVING" not in seen, seen
            rc = d.proc.wait(timeout=10)
        watcher.join(10)
        assert rc == EX_IOERR, rc
        assert "SERVING" not in seen, seen


def test_storage_recovers_only_when_the_kind_that_failed_works():
    """A takeover's commit fails (the database locked past the busy
    timeout); renewals answered afterwards (never written) say nothing
    about takeovers, so storage counts as recovered only after a commit that
    changes an owner, or the daemon's own probe of one, succeeds."""
    with harness.Leased(ttl="5s", args=["--log-level", "debug"]) as d:
        c = d.client()
        held = c.acquire("held", "A")
        with harness.WriteLock(d.db_path):
            harness.expect_code(harness.grpc.StatusCode.UNAVAILABLE,
                                c.acquire, "s", "B")
        for _ in range(20):
            c.renew(held)
        d.wait_log(r"msg=storage_recovered")
        log = d.log_text()
        lines = log[:log.index("msg=storage_recovered")].splitlines()
        commits = [re.search(r"msg=committed changes=\d+ durable=(\d)"
                             r"(?: probe=(\d))?", l) for l in lines]
        last = [m for m in commits if m][-1]
        assert "1" in (last.group(1), last.group(2)), last.group(0)


def test_shorter_ttl_after_restart_keeps_the_old_quarantine():
    """A lease granted under a 3 s TTL whose last renewal never reached the
    disk (a power loss: its stored expiry is stale) stays with its owner
    for 3 s after a restart, even when leased comes back with a 500 ms
    TTL; after that the stored quarantine TTL drops to the new one."""
    d = harness.Leased(ttl="3s").start()
    c = d.client()
    a = c.acquire("s", "A")
    d.kill9()
    con = sqlite3.connect(d.db_path, isolation_level=None)
    con.execute("UPDATE leases SET expiry_ns = 1 WHERE session_id = 's'")
    con.close()
    d.ttl = "500ms"
    d.start()
    started = time.monotonic()
    with d:
        c = d.client()
        time.sleep(1.0)
        harness.expect_code(harness.grpc.StatusCode.FAILED_PRECONDITION,
                            c.acquire, "s", "B")
        time.sleep(max(0.0, 3.3 - (time.monotonic() - started)))
        b = c.acquire("s", "B")
        assert b.token == a.token + 1, (a.token, b.token)

        def stored_ttl():
            con = sqlite3.connect(d.db_path)
            try:
                return con.execute(
                    "SELECT value FROM meta "
                    "WHERE key = 'quarantine_ttl_ns'").fetchone()[0]
            finally:
                con.close()
        # A garbage-collection tick (every second) lowers it.
        until("the stored TTL lowered", lambda: stored_ttl() == 500_000_000)


harness.main(globals())
