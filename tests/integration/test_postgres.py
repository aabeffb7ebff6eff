"""leased over PostgreSQL (`--postgres`): replicas sharing one database,
the schema made once and checked, configuration refused with a clear
message, a database that stops or restarts, the metrics of the mode, and
garbage collection in the database.

Each case starts its own PostgreSQL (tests/integration/pg.py) when it
stops or restarts it; the others share one server per test process
(harness.shared_postgres()), each with a database of its own.
"""
import concurrent.futures
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import certs  # noqa: E402
import harness  # noqa: E402
import pg  # noqa: E402
from harness import Leased, expect_code, status_of  # noqa: E402

OK = grpc.StatusCode.OK
HELD = grpc.StatusCode.FAILED_PRECONDITION
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
SCHEMA_VERSION = "7"  # storage/pgsql.h

_names = 0


def unique(prefix):
    """A name no other database or role of this process has."""
    global _names
    _names += 1
    return "%s_%d_%d" % (prefix, os.getpid(), _names)


def new_database(server=None):
    """A new, empty database: (its name, its conninfo)."""
    server = server or harness.shared_postgres()
    name = unique("pgtest")
    server.psql("CREATE DATABASE %s" % name)
    return name, server.conninfo(dbname=name)


def wait_for(what, ok, timeout):
    """Polls ok() until it is true; fails after timeout s. Returns the
    time it took."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        last = ok()
        if last:
            return time.monotonic() - start
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %s s" % (what, timeout))
        time.sleep(0.05)


def startup_failure(log):
    """The one error line of a refused start: its reason."""
    errors = [ln for ln in log.splitlines() if "level=error" in ln]
    assert len(errors) == 1, "want one error line:\n" + log
    m = re.search(r'msg=startup_failed reason="(.*)"$', errors[0])
    assert m, "not a startup_failed line:\n" + log
    return m.group(1)


def refused(conninfo, timeout=10.0, **kw):
    """Starts leased on conninfo expecting it to exit by itself within
    timeout s: (exit code, log, the startup_failed reason)."""
    start = time.monotonic()
    rc, log = Leased(postgres=conninfo, **kw).run_to_exit(timeout=timeout)
    took = time.monotonic() - start
    assert took < timeout, took
    assert rc != 0, "exit 0:\n" + log
    return rc, log, startup_failure(log)


def metric(d, name):
    return d.metrics()[(name, ())]


def floor_lock(server, name, granted):
    """How many hold ("true") or wait for ("false") the token floor's
    advisory lock in database name."""
    return server.psql(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        " AND classid = 1818583411 AND objid = 2 AND granted = %s"
        % granted, dbname=name)


@contextlib.contextmanager
def floor_lock_held(server, name):
    """Holds the token floor's lock in database name, from a psql session
    of its own, until the with block ends. Every batch takes it shared:
    held exclusively, it keeps a connection's batches in flight for as
    long as the test needs, however slow the machine."""
    psql = subprocess.Popen(
        [pg.BIN + "/psql", "-X", "-w", "-q", "-v", "ON_ERROR_STOP=1", "-d",
         server.conninfo(dbname=name, host=server.dir)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        env=pg._env())
    try:
        psql.stdin.write("SELECT pg_advisory_lock(1818583411, 2);\n")
        psql.stdin.flush()
        wait_for("the lock held", lambda: floor_lock(server, name, "true")
                 == "1", 10)
        yield
    finally:
        psql.stdin.close()  # psql ends, its session and lock with it
        psql.wait(timeout=30)


# --- 1. Replicas over one database --------------------------------------

def test_replicas_share_one_database():
    _, conninfo = new_database()
    with contextlib.ExitStack() as stack:
        reps = [stack.enter_context(Leased(ttl="30s", postgres=conninfo))
                for _ in range(3)]
        clients = [d.client() for d in reps]
        # 64 owners at once, round-robin over the replicas, a channel
        # each (connected before they start, so that they race).
        n = 64
        channels = [reps[i % 3].channel() for i in range(n)]
        for ch in channels:
            grpc.channel_ready_future(ch).result(timeout=10)
        callers = [harness.Client(ch) for ch in channels]
        barrier = threading.Barrier(n)
        results = [None] * n

        def race(i):
            barrier.wait(timeout=10)
            try:
                results[i] = (OK, callers[i].acquire("race", "owner-%d" % i))
            except grpc.RpcError as e:
                results[i] = (e.code(), None)

        threads = [threading.Thread(target=race, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert all(r is not None for r in results), results
        codes = [code for code, _ in results]
        assert codes.count(OK) == 1, codes
        assert codes.count(HELD) == n - 1, codes
        winner = codes.index(OK)
        lease = results[winner][1]
        assert (lease.owner, lease.token) == ("owner-%d" % winner, 1)
        # Every replica sees the same holder.
        for c in clients:
            got = c.get("race")
            assert (got.owner, got.token, got.live) == (lease.owner, 1, True)

        # Tokens rise whichever replica answers: the holder releases on
        # its replica, the next owner takes over on the next one at once.
        holder_rep = winner % 3
        for step in range(9):
            other = (holder_rep + 1) % 3
            new_owner = "next-%d" % step
            # Held: refused on every replica.
            for c in clients:
                expect_code(HELD, c.acquire, "race", new_owner)
            clients[holder_rep].release(lease)
            nxt = clients[other].acquire("race", new_owner)
            assert nxt.token == lease.token + 1, (nxt.token, lease.token)
            assert nxt.owner == new_owner
            # The old holder's lease is dead on every replica.
            for c in clients:
                expect_code(HELD, c.renew, lease)
            lease, holder_rep = nxt, other
        assert lease.token == 10
        for c in clients:
            got = c.get("race")
            assert (got.owner, got.token) == (lease.owner, 10)


FLEET_NAME = "leased-fleet.test"


def in_mount_namespace_with_hosts(case, hosts):
    """Runs case of this file again, in a mount namespace of its own
    whose /etc/hosts is hosts (a bind mount: the machine's file stays as
    it is), with LEASED_TEST_HOSTS set to that text. Fails with the run's
    output unless it passes."""
    with tempfile.TemporaryDirectory(prefix="leased-hosts-") as tmp:
        path = os.path.join(tmp, "hosts")
        with open(path, "w") as f:
            f.write(hosts)
        p = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount --bind "$1" /etc/hosts && shift && exec "$@"', "sh",
             path, sys.executable, os.path.abspath(__file__), case],
            env=dict(os.environ, LEASED_TEST_HOSTS=hosts),
            capture_output=True, text=True, timeout=100)
        assert p.returncode == 0, (
            "%s in a mount namespace (needs root, and unshare(1) and "
            "mount(8) allowed) exited %d:\n%s%s"
            % (case, p.returncode, p.stdout, p.stderr))


def test_a_dns_name_of_every_replica_reaches_the_one_left():
    """docs/ha.md: a client that dials one target, as Mecatl's driver
    does, reaches several replicas through one DNS name that resolves to
    every replica's address; gRPC's default policy (pick_first) moves to
    the next address when the one it used goes away. Here the name is in
    /etc/hosts (of a mount namespace of the test's own) with two loopback
    addresses, a replica over one database on the same port of each,
    over TLS as off loopback. A Python channel kept open (a running
    server) and leasectl (a process per call) use the name; each replica
    is stopped in turn, and the lease goes on being renewed, with its
    token, by the other."""
    if os.environ.get("LEASED_TEST_HOSTS") is None:
        in_mount_namespace_with_hosts(
            "test_a_dns_name_of_every_replica_reaches_the_one_left",
            "127.0.0.1 localhost\n127.0.0.1 %s\n127.0.0.2 %s\n"
            % (FLEET_NAME, FLEET_NAME))
        return
    # The namespace's /etc/hosts is the one the case was given.
    addrs = sorted({a[4][0] for a in socket.getaddrinfo(
        FLEET_NAME, 1, socket.AF_INET, socket.SOCK_STREAM)})
    assert addrs == ["127.0.0.1", "127.0.0.2"], addrs
    _, conninfo = new_database()
    with tempfile.TemporaryDirectory(prefix="leased-fleet-") as tmp, \
            contextlib.ExitStack() as stack:
        c = certs.make(os.path.join(tmp, "certs"))
        a = stack.enter_context(Leased(ttl="30s", postgres=conninfo, tls=c))
        port = a.addr.rsplit(":", 1)[1]
        a.listen = a.addr  # its next start: the same port
        b = stack.enter_context(Leased(ttl="30s", postgres=conninfo, tls=c,
                                       listen="127.0.0.2:" + port))
        target = "%s:%s" % (FLEET_NAME, port)
        # The server certificate is for localhost (certs.py).
        channel = grpc.secure_channel(
            target, harness.tls_creds(c),
            options=[("grpc.ssl_target_name_override", "localhost")])
        stack.callback(channel.close)
        client = harness.Client(channel)

        def leasectl(*args):
            p = subprocess.run(
                [os.environ["LEASECTL_BIN"], "--url", target, "--tls-ca",
                 c.path("ca.pem"), "--tls-server-name", "localhost",
                 "--json"] + list(args),
                capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, (args, p.returncode, p.stderr)
            return json.loads(p.stdout)

        lease = client.acquire("fleet", "web-1")
        assert lease.token == 1
        assert leasectl("acquire", "fleet-ctl", "--owner", "ops-1")[
            "token"] == 1
        # Each replica stopped in turn (the other one started again
        # first): whichever the channel used, it has to reach the one
        # left, as a new leasectl does.
        for gone, left in ((a, b), (b, a)):
            if left.proc.poll() is not None:
                left.start()
            assert gone.stop() == 0
            lease = client.renew(lease)
            assert (lease.owner, lease.token) == ("web-1", 1)
            got = leasectl("acquire", "fleet-ctl", "--owner", "ops-1")
            assert (got["owner"], got["token"]) == ("ops-1", 1)
        # The control: with no replica left, the name reaches nothing.
        a.stop()
        expect_code(UNAVAILABLE, client.renew, lease)


def test_a_call_waiting_for_a_busy_connection_is_answered():
    """While every connection's pipeline is full, new calls wait without
    waking the loop; the connection, once it has room, must still take
    them, even when no further call comes."""
    name, conninfo = new_database()
    server = harness.shared_postgres()
    with Leased(ttl="30s", postgres=conninfo,
                args=["--postgres-connections", "1",
                      "--postgres-timeout", "60s",
                      "--metrics-listen", "127.0.0.1:0"]) as d:
        c = harness.Client(d.channel(), timeout=60)
        c.acquire("warm", "w")
        results = {}

        def acquire(session):
            try:
                results[session] = c.acquire(session, "owner")
            except grpc.RpcError as e:
                results[session] = e.code()

        sessions = ("first", "second", "third")
        calls = [threading.Thread(target=acquire, args=(s,))
                 for s in sessions]
        with floor_lock_held(server, name):
            calls[0].start()
            wait_for("the first batch waits",
                     lambda: floor_lock(server, name, "false") == "1", 30)
            # The second goes into the pipeline behind the first; the
            # third finds it full and waits in the hand-off.
            for i in (1, 2):
                calls[i].start()
                wait_for("call %d in" % (i + 1), lambda: metric(
                    d, "leased_queue_depth") == i + 1, 30)
        for t in calls:
            t.join(timeout=90)
        # The client's deadline is 60 s: a call left behind would get
        # DEADLINE_EXCEEDED.
        for session in sessions:
            got = results[session]
            assert not isinstance(got, grpc.StatusCode), (session, got)
            assert (got.owner, got.token) == ("owner", 1), got
        assert metric(d, "leased_queue_depth") == 0
        # warm, first, second (pipelined), third (once there was room).
        assert metric(d, "leased_pg_batch_calls_count") == 4


def test_a_batch_bigger_than_the_socket_takes_is_written_in_parts():
    """A batch of a thousand calls with the longest session ids and
    owners (some 800 KB) is more than the socket takes at once: the rest
    goes out as the socket drains (the loop watches it for writable), and
    every call is decided."""
    name, _ = new_database()
    server = harness.shared_postgres()
    # Over the unix socket, whose buffer (about 200 KB) does not grow.
    conninfo = server.conninfo(dbname=name, host=server.dir)
    n = 1000
    with Leased(ttl="30s", postgres=conninfo,
                args=["--postgres-connections", "1",
                      "--postgres-timeout", "60s",
                      "--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        c.acquire("warm", "w")
        owner = "o" * 256
        with floor_lock_held(server, name):  # until every call waits
            calls = [c._acquire.future(harness.pb.AcquireRequest(
                session_id="%04d" % i + "s" * 508, owner=owner), timeout=90)
                for i in range(n)]
            wait_for("every call in", lambda: metric(
                d, "leased_queue_depth") == n, 60)
        tokens = [f.result(timeout=90).lease.token for f in calls]
        assert tokens == [1] * n
        m = d.metrics()
        big = m[("leased_pg_batch_calls_bucket", (("le", "1024"),))] - \
            m[("leased_pg_batch_calls_bucket", (("le", "512"),))]
        assert big >= 1, "no batch of more than 512 calls"
        assert server.psql("SELECT count(*) FROM leased_leases WHERE "
                           "length(owner) = 256", dbname=name) == str(n)


def test_tokens_no_row_can_have_are_decided_without_the_database():
    """Tokens are below 2^63 in the database: a renewal or release with a
    higher one is decided in the replica, as a call with a token nobody
    holds (renewal refused, release a no-op), alone or beside calls the
    database decides, and the lease stays its holder's."""
    name, conninfo = new_database()
    with Leased(ttl="30s", postgres=conninfo) as d:
        c = d.client()
        held = c.acquire("t", "alice")
        for token in (2**63, 2**64 - 1):
            wrong = harness.pb.Lease(session_id="t", owner="alice",
                                     token=token)
            expect_code(HELD, c.renew, wrong)
            c.release(wrong)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            wrong = harness.pb.Lease(session_id="t", owner="alice",
                                     token=2**63 + held.token)
            calls = [pool.submit(status_of, c.renew, wrong),
                     pool.submit(status_of, c.release, wrong),
                     pool.submit(c.renew, held),
                     pool.submit(c.acquire, "u", "bob")]
            assert calls[0].result(timeout=10) == HELD
            assert calls[1].result(timeout=10) == OK
            assert calls[2].result(timeout=10).token == held.token
            assert calls[3].result(timeout=10).token == 1
        got = c.get("t")
        assert (got.owner, got.token, got.live) == ("alice", held.token,
                                                    True), got


def test_a_failed_batch_leaves_the_next_in_the_pipeline_alone():
    """A batch that fails in the database (here: a row lock held past
    the lock timeout) is rolled back alone: the batch behind it in the
    same connection's pipeline is decided and stored, and the connection
    stays up."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with Leased(ttl="30s", postgres=conninfo,
                args=["--postgres-connections", "1",
                      "--postgres-timeout", "4s",
                      "--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        held = c.acquire("locked", "alice")
        errors = metric(d, "leased_pg_errors_total")
        # Longer than the lock timeout (3/4 of --postgres-timeout: 3 s).
        holder = threading.Thread(target=server.psql, kwargs=dict(
            sql="BEGIN; SELECT 1 FROM leased_leases WHERE session = "
                "'locked' FOR UPDATE; SELECT pg_sleep(5); COMMIT",
            dbname=name))
        holder.start()

        def row_lock_waiters():
            return server.psql(
                "SELECT count(*) FROM pg_locks WHERE NOT granted",
                dbname=name)

        wait_for("the row locked", lambda: server.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE "
            "'%%pg_sleep(5)%%' AND state = 'active' AND datname = '%s' "
            "AND pid <> pg_backend_pid()" % name) == "1", 10)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            blocked = pool.submit(status_of, c.acquire, "locked", "bob")
            wait_for("the first batch waits for the row",
                     lambda: row_lock_waiters() != "0", 10)
            # Sent while the first still waits (its lock timeout is 3 s
            # off), with its own deadline 4 s on: a second or more to
            # spare on a loaded machine.
            time.sleep(1)
            behind = pool.submit(c.acquire, "free", "carol")
            assert blocked.result(timeout=10) == UNAVAILABLE
            got = behind.result(timeout=10)
        assert (got.owner, got.token) == ("carol", 1), got
        holder.join(timeout=30)
        assert metric(d, "leased_pg_errors_total") == errors + 1
        assert c.health() == "SERVING"
        assert "lock timeout" in d.log_text()
        assert server.psql("SELECT owner FROM leased_leases WHERE session "
                           "= 'free'", dbname=name) == "\\x6361726f6c"
        # Nothing of the failed batch was applied.
        expect_code(HELD, c.acquire, "locked", "bob")
        assert c.renew(held).token == held.token


def test_a_batch_given_up_while_it_still_runs_is_rolled_back():
    """A batch still running at the database when its deadline passes is
    answered UNAVAILABLE and its connection closed; the database notices
    the closed connection and rolls the batch back, rather than commit it
    later, when its client may have gone on. Here a trigger keeps the
    release of one session running for twice --postgres-timeout (as a
    batch waiting for lock after lock would be)."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with Leased(ttl="30s", postgres=conninfo,
                args=["--postgres-connections", "1",
                      "--postgres-timeout", "2s"]) as d:
        c = d.client()
        kept = c.acquire("slow", "alice")
        server.psql("CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql "
                    "AS $$ BEGIN IF NEW.session = 'slow' THEN "
                    "PERFORM pg_sleep(4); END IF; RETURN NEW; END $$;"
                    "CREATE TRIGGER slow BEFORE UPDATE ON leased_leases "
                    "FOR EACH ROW EXECUTE FUNCTION slow()", dbname=name)
        expect_code(UNAVAILABLE, c.release, kept)
        server.psql("DROP TRIGGER slow ON leased_leases", dbname=name)
        # Until the trigger's sleep would have ended, and a little more.
        time.sleep(2.5)
        assert server.psql("SELECT owner FROM leased_leases WHERE session "
                           "= 'slow'", dbname=name) == "\\x616c696365"
        expect_code(HELD, c.acquire, "slow", "bob")
        assert c.renew(kept).token == kept.token


def test_admin_calls_and_collection_take_turns_with_a_steady_load():
    """Admin calls and garbage collection run on the connection between
    batches: under a load that keeps its pipeline full (leasebench, 64
    calls in flight), each still gets its turn, and the batches go on
    after each."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    # A TTL long enough for the leases below to be renewed in time in a
    # sanitizer build under the load (a lease is collected two TTLs after
    # its last renewal), short enough for the released rows to be
    # collected well within the load: between one and two TTLs after
    # their release, with a collection every TTL.
    with Leased(ttl="3s", postgres=conninfo,
                args=["--postgres-connections", "1",
                      "--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        for i in range(20):
            c.release(c.acquire("gone-%d" % i, "x"))
        held = c.acquire("admin-held", "owner")
        # One session per slot, renewed at each of its turns (with four,
        # picked at random, one sometimes went two TTLs without).
        load = subprocess.Popen(
            [os.environ["LEASEBENCH_BIN"], "--target", "leased://" + d.addr,
             "--workload", "renew", "--sessions", "64", "--concurrency",
             "64", "--duration", "12s", "--warmup", "0s", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for("the load running", lambda: metric(
                d, "leased_pg_batch_calls_sum") > 1000, 10)
            admin = 0
            collected = False  # the released rows, while the load ran
            while load.poll() is None:
                # Each within the client's 5 s deadline.
                assert c.get("admin-held").owner == "owner"
                assert c.stats().live_leases >= 1
                assert len(c.list(prefix="admin-").leases) == 1
                admin += 3
                held = c.renew(held)
                if not collected:
                    left = server.psql("SELECT count(*) FROM leased_leases "
                                       "WHERE session LIKE 'gone-%'",
                                       dbname=name)
                    collected = left == "0" and load.poll() is None
            out, err = load.communicate(timeout=60)
        finally:
            if load.poll() is None:
                load.kill()
                load.wait()
        assert load.returncode == 0, (out, err)
        assert json.loads(out)["errors"] == 0, out
        assert admin >= 30, admin
        assert collected, "the released rows outlived the load"
        assert metric(d, "leased_pg_errors_total") == 0


def test_a_call_waits_for_a_batch_in_flight_with_its_session():
    """The calls of one session are decided in the order they arrived,
    whichever connection is free: a holder's renewal that arrives while
    its release is in flight on one connection, stalled, does not go
    ahead on the other (its OK would promise a lease the release then
    ends: the holder may have given up on the release). It waits for the
    release and is refused."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with Leased(ttl="30s", postgres=conninfo,
                args=["--postgres-connections", "2",
                      "--postgres-timeout", "10s"]) as d:
        c = d.client()
        lease = c.acquire("s", "A")
        # The connections in the order leased made them: the first one
        # free takes the next batch, and both are free now. (Not the
        # listening one, which decides nothing.)
        pids = [int(p) for p in server.psql(
            "SELECT pid FROM pg_stat_activity WHERE datname = '%s' AND "
            "application_name = 'leased' AND NOT %s "
            "ORDER BY backend_start" % (name, harness.LISTENING)).split()]
        assert len(pids) == 2, pids
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            os.kill(pids[0], signal.SIGSTOP)
            try:
                release = pool.submit(status_of, c.release, lease)
                time.sleep(0.3)
                assert not release.done()  # stalled on the first connection
                renewal = pool.submit(status_of, c.renew, lease)
                time.sleep(0.5)
                early = renewal.done() and renewal.result()
            finally:
                os.kill(pids[0], signal.SIGCONT)
            assert early is False, early
            assert release.result(timeout=10) == OK
            assert renewal.result(timeout=10) == HELD
        assert c.acquire("s", "B").token == lease.token + 1


def test_renewals_are_decided_and_stored_by_the_database():
    server = harness.shared_postgres()
    name, conninfo = new_database()

    def stored(session):
        return server.psql("SELECT owner, token, expiry_ns FROM "
                           "leased_leases WHERE session = '%s'" % session,
                           dbname=name)

    with Leased(ttl="4s", postgres=conninfo) as d:
        c = d.client()
        held = c.acquire("r", "alice")
        # A live lease renewed by its holder: same token, a later
        # expiry, stored before the reply.
        renewed = c.renew(held)
        assert renewed.token == held.token
        assert renewed.expiry.ToNanoseconds() > held.expiry.ToNanoseconds()
        row = "\\x616c696365|%d|%d" % (held.token,
                                         renewed.expiry.ToNanoseconds())
        assert stored("r") == row, (stored("r"), row)
        # Another token, another owner: refused, nothing written.
        expect_code(HELD, c.renew, harness.pb.Lease(
            session_id="r", owner="alice", token=held.token + 1))
        expect_code(HELD, c.renew, harness.pb.Lease(
            session_id="r", owner="bob", token=held.token))
        assert stored("r") == row
        assert c.stats().reclaims == 0
        # Expired, nobody took it over: the holder gets it back, counted
        # as a reclaim.
        wait_for("expiry", lambda: time.time_ns()
                 > renewed.expiry.ToNanoseconds() + 200000000, 10)
        late = c.renew(renewed)
        assert late.token == held.token
        assert late.expiry.ToNanoseconds() > renewed.expiry.ToNanoseconds()
        assert c.stats().reclaims == 1
        # Released: a renewal is refused.
        c.release(late)
        expect_code(HELD, c.renew, late)
        assert stored("r").startswith("\\x|%d|" % held.token), stored("r")


LIVE_NS = 8 * 10**18  # far beyond any clock: a renewal adds 1
GONE_NS = 1000  # long expired


def decide(calls, ttl_ns, columns="code, tok, exp, flags, now_ns"):
    """SQL selecting columns of leased_decide on calls [(op, session,
    owner, token)]."""
    def arr(values, cast):
        return "ARRAY[%s]::%s[]" % (",".join(values), cast)
    return ("SELECT %s FROM leased_decide(%s, %s, %s, %s, %d);\n" % (
                columns, arr([str(c[0]) for c in calls], "int"),
                arr(["'%s'" % c[1] for c in calls], "bytea"),
                arr(["'%s'" % c[2] for c in calls], "bytea"),
                arr([str(c[3]) for c in calls], "bigint"), ttl_ns))


def rows_sql(rows):
    """SQL storing rows {session: (owner, token, expiry_ns)}, taken over
    in the current generation."""
    return "".join(
        "INSERT INTO leased_leases VALUES ('%s', '%s', %d, %d, "
        "(SELECT value FROM leased_meta WHERE key = 'generation'));\n"
        % (session, owner, token, expiry)
        for session, (owner, token, expiry) in rows.items())


def answers(out, ttl_ns):
    """leased_decide's rows, an expiry of now + TTL as "now+ttl" (the
    clock moves between the two databases)."""
    rows = []
    for line in out.splitlines():
        code, tok, exp, flags, now = line.split("|")
        if exp and int(exp) == int(now) + ttl_ns:
            exp = "now+ttl"
        rows.append((code, tok, exp, flags))
    return rows


def test_a_batch_decides_as_its_calls_one_at_a_time():
    # leased_decide takes short paths for renewals: consecutive ones, each
    # the first call of its session in the batch, as one UPDATE; a lone
    # one as another. Batches of mixed calls over rows in every state,
    # decided at once on one database and one call at a time on another,
    # must get the same answers and leave the same rows.
    server = harness.shared_postgres()
    ttl_ns = 20 * 10**9
    dbs = []
    for _ in range(2):
        name, conninfo = new_database()
        with Leased(ttl="20s", postgres=conninfo):
            pass  # makes the schema
        dbs.append(name)
    rng = random.Random(12)
    seen = set()  # what the runs of renewals met
    for _ in range(6):
        # 40 sessions: missing, live, long expired, or released.
        rows = {}
        for i in range(40):
            state = rng.choice(["missing", "live", "live", "gone", "free"])
            if state != "missing":
                rows["s%02d" % i] = (
                    "" if state == "free" else rng.choice(["alice", "bob"]),
                    rng.randint(1, 3), GONE_NS if state == "gone" else LIVE_NS)
        # 48 calls, mostly renewals, mostly of a session of their own.
        calls = []
        for _ in range(48):
            if calls and rng.random() < 0.2:
                session = rng.choice(calls)[1]
            else:
                session = "s%02d" % rng.randrange(40)
            op = rng.choice([2] * 7 + [1] * 2 + [3])
            row = rows.get(session, ("alice", 1, 0))
            owner = row[0] if row[0] and rng.random() < 0.8 else "alice"
            token = row[1] if rng.random() < 0.8 else rng.randint(1, 4)
            calls.append((op, session, owner, token))
        calls.sort(key=lambda c: c[1])  # stable, as the replica sorts
        # What the runs met: the first call of a session decides on its
        # row as it was.
        first = [i == 0 or calls[i - 1][1] != c[1]
                 for i, c in enumerate(calls)]
        may_run = [c[0] == 2 and f for c, f in zip(calls, first)]
        for i, (op, session, owner, token) in enumerate(calls):
            if may_run[i] and ((i > 0 and may_run[i - 1]) or
                               (i + 1 < len(calls) and may_run[i + 1])):
                row = rows.get(session)
                seen.add("missing" if row is None else
                         "other" if (row[0], row[1]) != (owner, token) else
                         "renewed" if row[2] == LIVE_NS else "expired")
            elif op == 2 and not first[i]:
                seen.add("renewal after another call of its session")
        fill = "TRUNCATE leased_leases;\n" + rows_sql(rows)
        for name in dbs:
            server.psql(fill, dbname=name)
        at_once = answers(server.psql(
            decide(calls, ttl_ns), dbname=dbs[0]), ttl_ns)
        one_by_one = answers(server.psql("".join(
            decide([c], ttl_ns) for c in calls),
            dbname=dbs[1]), ttl_ns)
        assert len(at_once) == len(one_by_one) == len(calls)
        for c, a, b in zip(calls, at_once, one_by_one):
            assert a == b, (c, a, b)
        # The same rows, an expiry set from the clock as "recent".
        table = ("SELECT session, owner, token, CASE WHEN expiry_ns "
                 "BETWEEN %d AND %d THEN 'recent' ELSE expiry_ns::text "
                 "END FROM leased_leases ORDER BY session"
                 % (GONE_NS + 1, LIVE_NS - 1))
        assert (server.psql(table, dbname=dbs[0]) ==
                server.psql(table, dbname=dbs[1]))
    # Runs met rows of every kind, and sessions had several calls.
    assert seen == {"missing", "other", "renewed", "expired",
                    "renewal after another call of its session"}, seen


def test_crossing_batches_never_deadlock():
    # Two connections decide batches over the same sessions at once:
    # renewals by the holder (runs of them, one UPDATE each) and acquires
    # by a contender (a locking read each), on random sets. Each batch
    # locks its rows in session order, so neither waits for the other in
    # a cycle, which PostgreSQL would end with "deadlock detected".
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with Leased(ttl="20s", postgres=conninfo):
        pass  # makes the schema
    sessions = ["s%02d" % i for i in range(48)]
    server.psql(rows_sql({session: ("alice", 1, LIVE_NS)
                          for session in sessions}), dbname=name)

    def script(seed):
        rng = random.Random(seed)
        sql, want = "", ""
        for _ in range(150):
            calls = [(2, session, "alice", 1) if rng.random() < 0.7
                     else (1, session, "bob", 0)
                     for session in sorted(rng.sample(sessions, 24))]
            sql += decide(calls, 20 * 10**9,
                          columns="string_agg(code::text, '')")
            want += "".join("0" if c[0] == 2 else "1" for c in calls) + "\n"
        return sql, want.rstrip("\n")

    results = {}

    def run(seed):
        sql, want = script(seed)
        try:
            results[seed] = (server.psql(sql, dbname=name, timeout=120),
                             want)
        except pg.PsqlError as e:
            results[seed] = (e.stderr, want)

    workers = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(results) == 2
    for got, want in results.values():
        # Every renewal granted, every acquire refused: nothing failed.
        assert got == want, got[:300]


# The rules in SQL (leased_rule) against the table of cases both
# statements of them read (tests/rules_cases.txt) and random cases with
# rules_decide's answers (tests/unit/rules_cases_gen.c).
RULE_OPS = {"acquire": 1, "renew": 2, "release": 3, "revoke": 4}
RULE_CODES = {"ok": 0, "held": 1, "lost": 2, "noop": 3}
RULE_COLUMNS = ("n, op, had, r_owner, r_token, r_expiry, r_quarantined, "
                "q_owner, q_token, now_ns, ttl, code, owner, tok, exp, flags")


def rule_case_files():
    """(the table, the generator), from meson's environment, else the
    source tree and the build of $LEASED_BIN."""
    here = os.path.dirname(os.path.abspath(__file__))
    table = os.environ.get("RULES_CASES") or os.path.join(
        here, "..", "rules_cases.txt")
    gen = os.environ.get("RULES_CASES_GEN") or os.path.join(
        os.path.dirname(os.path.dirname(harness.leased_bin())), "tests",
        "rules_cases_gen")
    return table, gen


def rule_case(line):
    """One case of the table's format (its opening comment) as a row of
    RULE_COLUMNS less n, in SQL; None for a blank or comment line."""
    words = line.split("#", 1)[0].split()
    if not words:
        return None

    def owner(w):
        return "''::bytea" if w == '""' else "'%s'::bytea" % w

    op = RULE_OPS[words.pop(0)]
    if words[0] in ("none", "floor"):
        # No row: leased_decide passes the floor as the row's token.
        token = words[1] if words[0] == "floor" else "0"
        del words[:2 if words[0] == "floor" else 1]
        row = ["false", "NULL", token, "NULL", "NULL"]
    else:
        assert words[3] in ("q", "-"), line
        row = ["true", owner(words[0]), words[1], words[2],
               "true" if words[3] == "q" else "false"]
        del words[:4]
    q_owner, q_token, now, ttl, arrow, code = words[:6]
    assert arrow == "->", line
    after = words[6:9]
    if code == "ok":
        after = [owner(after[0]), after[1], after[2]]
    else:
        assert after == ["-", "-", "-"], line
        after = ["NULL", "NULL", "NULL"]
    assert len(words) == 10, line
    return ([str(op)] + row + [owner(q_owner), q_token, now, ttl,
                               str(RULE_CODES[code])] + after + [words[9]])


def rule_cases_sql(cases):
    """A temporary table rule_cases of cases (rows of rule_case())."""
    return ("CREATE TEMP TABLE rule_cases (n int, op int, had boolean, "
            "r_owner bytea, r_token bigint, r_expiry bigint, "
            "r_quarantined boolean, q_owner bytea, q_token bigint, "
            "now_ns bigint, ttl bigint, code int, owner bytea, tok bigint, "
            "exp bigint, flags int);\n"
            "INSERT INTO rule_cases VALUES %s;\n" % ",\n".join(
                "(%d, %s)" % (n, ", ".join(c)) for n, c in enumerate(cases)))


# leased_rule's answers that are not the case's: label|count, then up to
# 5 of them (n|code|owner|tok|exp|flags) when list_them.
def rule_mismatches_sql(label, list_them=False):
    wrong = ("FROM rule_cases c, LATERAL leased_rule(c.op, c.had, c.r_owner,"
             " c.r_token, c.r_expiry, c.r_quarantined, c.q_owner, c.q_token,"
             " c.now_ns, c.ttl) d WHERE (d.code, d.owner, d.tok, d.exp, "
             "d.flags) IS DISTINCT FROM (c.code, c.owner, c.tok, c.exp, "
             "c.flags)")
    sql = "SELECT '%s', count(*) %s;\n" % (label, wrong)
    if list_them:
        sql += ("SELECT c.n, d.code, d.owner, d.tok, d.exp, d.flags %s "
                "ORDER BY c.n LIMIT 5;\n" % wrong)
    return sql


def rule_cases_of_both():
    """The table's cases with their written answers, then the table's
    and 2,000 random ones with rules_decide's: (lines, SQL rows)."""
    table, gen = rule_case_files()
    with open(table) as f:
        lines = f.read().splitlines()
    out = subprocess.run([gen, table, "20261205", "2000"], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    lines += out.splitlines()
    cases = [(ln, c) for ln, c in ((ln, rule_case(ln)) for ln in lines)
             if c is not None]
    return [ln for ln, _ in cases], [c for _, c in cases]


def rules_database():
    """A database with this leased's schema: its name."""
    name, conninfo = new_database()
    with Leased(ttl="20s", postgres=conninfo):
        pass  # makes the schema
    return name


def test_leased_rule_decides_every_case_as_rules_decide():
    # The SQL statement of the rules, with no table and no clock, gives
    # the answers of the C one: the table's, as written, and those of
    # 2,000 random cases, all in one query.
    lines, cases = rule_cases_of_both()
    table_cases = sum(1 for ln in open(rule_case_files()[0])
                      if rule_case(ln) is not None)
    assert table_cases >= 40 and len(cases) == 2 * table_cases + 2000
    # The random cases meet every answer of every op, and every flag.
    seen = {(c[0], c[10]) for c in cases[2 * table_cases:]}  # op, code
    assert seen == {("1", "0"), ("1", "1"), ("2", "0"), ("2", "2"),
                    ("3", "0"), ("3", "3"), ("4", "0"), ("4", "2"),
                    ("4", "3")}, seen
    assert {c[14] for c in cases[2 * table_cases:]} == {"0", "1", "3", "4"}
    got = harness.shared_postgres().psql(
        rule_cases_sql(cases) + rule_mismatches_sql("wrong", True),
        dbname=rules_database()).splitlines()
    assert got[0] == "wrong|0", "\n".join(
        ["leased_rule answers otherwise:"] +
        ["%s\n  SQL: %s" % (lines[int(r.split("|")[0])], r)
         for r in got[1:]])


# Broken copies of leased_rule and its words: (what, function, text of
# its definition, replaced by). Each must be caught by the cases.
RULE_BREAKS = [
    ("extend without its + 1", "leased_extend", "expiry_ns + 1",
     "expiry_ns"),
    ("expired only after the expiry", "leased_expired",
     "expiry_ns <= now_ns", "expiry_ns < now_ns"),
    ("holds without the token", "leased_holds", " AND r_token = q_token",
     ""),
    ("a revoke with token 0 not for any holder", "leased_rule",
     "q_token <> 0 AND ", ""),
    ("a takeover of a held row not flagged", "leased_rule",
     "THEN 3 ELSE 1", "THEN 1 ELSE 1"),
    ("a takeover keeps the token", "leased_rule", "tok := r_token + 1",
     "tok := r_token"),
]


def test_a_broken_leased_rule_is_caught():
    # The negative control of the test above: each break of the SQL,
    # made in a transaction rolled back after, makes some case's answer
    # wrong; with the functions restored, none is.
    _, cases = rule_cases_of_both()
    sql = rule_cases_sql(cases) + rule_mismatches_sql("real")
    for what, func, old, new in RULE_BREAKS:
        sql += ("BEGIN;\nDO $b$ DECLARE f text := pg_get_functiondef("
                "'%s'::regproc); g text := replace(f, '%s', '%s'); BEGIN "
                "IF g = f THEN RAISE EXCEPTION 'no %s in %s'; END IF; "
                "EXECUTE g; END $b$;\n" % (func, old, new, old, func)
                + rule_mismatches_sql(what) + "ROLLBACK;\n")
    sql += rule_mismatches_sql("restored")
    got = dict(line.split("|") for line in harness.shared_postgres().psql(
        sql, dbname=rules_database()).splitlines())
    assert got.pop("real") == "0" and got.pop("restored") == "0", got
    assert sorted(got) == sorted(b[0] for b in RULE_BREAKS), got
    caught = {what: int(n) > 0 for what, n in got.items()}
    assert all(caught.values()), caught


# --- 2. Replicas starting at once on an empty database ------------------

def test_replicas_starting_at_once_make_the_schema_once():
    server = harness.shared_postgres()
    for attempt in range(3):
        name, conninfo = new_database()
        a = Leased(ttl="5s", postgres=conninfo)
        b = Leased(ttl="5s", postgres=conninfo)
        a.start(wait=False)
        b.start(wait=False)
        with a, b:
            for d in (a, b):
                d.addr = d.wait_log(r"msg=listening addr=(\S+)").group(1)
            assert server.psql("SELECT count(*) FROM leased_meta WHERE "
                               "key = 'schema_version'", dbname=name) == "1"
            assert server.psql("SELECT value FROM leased_meta WHERE "
                               "key = 'schema_version'",
                               dbname=name) == SCHEMA_VERSION
            assert server.psql("SELECT count(*) FROM pg_proc WHERE "
                               "proname = 'leased_decide'",
                               dbname=name) == "2"
            # Both serve, the same leases.
            ca, cb = a.client(), b.client()
            s = "start-%d" % attempt
            la = ca.acquire(s, "alice")
            expect_code(HELD, cb.acquire, s, "bob")
            ca.release(la)
            assert cb.acquire(s, "bob").token == la.token + 1


# --- 3. A database this replica must not use ----------------------------

def test_other_ttl_and_newer_schema_are_refused():
    server = harness.shared_postgres()
    name, conninfo = new_database()
    # TTLs long enough that "keep" outlives a slow refused start.
    with Leased(ttl="20s", postgres=conninfo) as d:
        d.client().acquire("keep", "alice")
        _, _, why = refused(conninfo, ttl="21s")
        assert why.startswith("--postgres: "), why
        assert "--ttl 20000ms" in why and "21000ms" in why, why
        assert "same TTL" in why, why
        # The first replica was not disturbed.
        expect_code(HELD, d.client().acquire, "keep", "bob")
    # The same TTL starts.
    with Leased(ttl="20s", postgres=conninfo) as d:
        d.client().acquire("again", "alice")
    server.psql("UPDATE leased_meta SET value = 99 "
                "WHERE key = 'schema_version'", dbname=name)
    _, _, why = refused(conninfo, ttl="20s")
    assert why.startswith("--postgres: "), why
    assert "version 99" in why and "newer" in why, why
    # Refused without changing it.
    assert server.psql("SELECT value FROM leased_meta WHERE "
                       "key = 'schema_version'", dbname=name) == "99"


SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          "pg_schema")
UPGRADE_TTL, UPGRADE_TTL_NS = "20s", 20 * 10**9  # the upgrade tests'


def functions(name):
    """The leased_ functions of database name: {signature: md5 of its
    definition}."""
    rows = harness.shared_postgres().psql(
        "SELECT p.oid::regprocedure, md5(pg_get_functiondef(p.oid)) "
        "FROM pg_proc p WHERE proname LIKE 'leased\\_%'", dbname=name)
    return dict(line.split("|") for line in rows.splitlines())


def old_database(version):
    """A new database as leased of schema `version` made it
    (pg_schema/vN.sql), for UPGRADE_TTL, holding one live lease,
    ("kept", "alice", token 7): (its name, its conninfo)."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with open(os.path.join(SCHEMA_DIR, "v%d.sql" % version)) as f:
        server.psql(f.read(), dbname=name)
    server.psql(
        "INSERT INTO leased_meta VALUES ('schema_version', %d), "
        "('ttl_ns', %d), ('token_floor', 0), ('generation', 0), "
        "('quarantine_end_ns', 0), ('primary_started_us', "
        "(extract(epoch FROM pg_postmaster_start_time()) * 1000000)"
        "::bigint);"
        "INSERT INTO leased_leases VALUES ('kept', 'alice', 7, "
        "leased_now() + %d, 0)" % (version, UPGRADE_TTL_NS, UPGRADE_TTL_NS),
        dbname=name)
    return name, conninfo


def upgraded_keeping_leases(version):
    """Starts a replica on a database of schema `version`: it upgrades
    it to this version's functions, the lease kept. Returns the
    database's name."""
    server = harness.shared_postgres()
    fresh, fresh_conninfo = new_database()
    with Leased(ttl=UPGRADE_TTL, postgres=fresh_conninfo):
        pass
    name, conninfo = old_database(version)
    old = functions(name)
    with Leased(ttl=UPGRADE_TTL, postgres=conninfo) as d:
        c = d.client()
        held = harness.pb.Lease(session_id="kept", owner="alice", token=7)
        expect_code(HELD, c.acquire, "kept", "bob")
        assert c.renew(held).token == 7
        assert c.acquire("kept", "alice").token == 7
        expect_code(HELD, c.renew, harness.pb.Lease(
            session_id="kept", owner="alice", token=8))
        assert c.acquire("new", "bob").token == 1
    assert server.psql("SELECT value FROM leased_meta WHERE "
                       "key = 'schema_version'", dbname=name) == SCHEMA_VERSION
    # Every function a new database has, the upgraded one has, the same;
    # at least one of them changed.
    now, want = functions(name), functions(fresh)
    assert {f: now.get(f) for f in want} == want, (now, want)
    assert any(old.get(f) != md5 for f, md5 in want.items()), old
    return name


def test_every_older_schema_version_has_its_fixture():
    have = sorted(os.listdir(SCHEMA_DIR))
    assert have == ["v%d.sql" % v for v in range(1, int(SCHEMA_VERSION))], \
        have


def test_schema_of_version_1_is_upgraded_keeping_its_leases():
    name = upgraded_keeping_leases(1)
    # Version 1's functions, one call each, stay for its replicas still
    # running during the upgrade, and decide as before.
    got = harness.shared_postgres().psql(
        "SELECT code, tok FROM leased_acquire('kept', 'alice', %d);"
        "SELECT code FROM leased_acquire('kept', 'carol', %d)"
        % (UPGRADE_TTL_NS, UPGRADE_TTL_NS), dbname=name)
    assert got.splitlines() == ["0|7", "1"], got


def test_schema_of_version_2_is_upgraded_keeping_its_leases():
    upgraded_keeping_leases(2)


def test_schema_of_version_3_is_upgraded_keeping_its_leases():
    upgraded_keeping_leases(3)


def test_schema_of_version_4_is_upgraded_keeping_its_leases():
    upgraded_keeping_leases(4)


def test_schema_of_version_5_is_upgraded_keeping_its_leases():
    name = upgraded_keeping_leases(5)
    # Replicas of version 5 still running call the batch with five
    # arguments: it decides as before.
    got = harness.shared_postgres().psql(
        "SELECT code, tok FROM leased_decide(ARRAY[1, 1], "
        "ARRAY['kept', 'kept']::bytea[], ARRAY['alice', 'carol']::bytea[], "
        "ARRAY[0, 0]::bigint[], %d)" % UPGRADE_TTL_NS, dbname=name)
    assert got.splitlines() == ["0|7", "1|"], got


def test_schema_of_version_6_is_upgraded_keeping_its_leases():
    name = upgraded_keeping_leases(6)
    # Version 7 stores the events of Watch: the upgraded database counts
    # them from 1 (its one new lease), and its rows have the told column.
    got = harness.shared_postgres().psql(
        "SELECT revision, kind, convert_from(session, 'UTF8') "
        "FROM leased_events; "
        "SELECT value FROM leased_meta WHERE key = 'revision'; "
        "SELECT count(*) FROM leased_leases WHERE NOT told; "
        "SELECT to_regprocedure('leased_hand_over(bytea, bigint, bigint, "
        "bigint)') IS NULL", dbname=name)
    assert got.splitlines() == ["1|1|new", "1", "2", "t"], got


# --- 4. Bad configuration ------------------------------------------------

def test_bad_configuration_is_refused_clearly():
    server = harness.shared_postgres()
    # Nothing listens there.
    port = pg._free_port()
    _, _, why = refused(server.conninfo(port=port))
    assert why.startswith("--postgres: "), why
    assert "Connection refused" in why and str(port) in why, why

    # A wrong password: said so, the password given nowhere.
    role = unique("pgtest_pw")
    server.add_role(role, password="Right-Horse-7731")
    wrong = "Wr0ng-Zebra-Staple-4412"
    _, log, why = refused(server.conninfo(user=role, password=wrong))
    assert why.startswith("--postgres: "), why
    assert "password authentication failed" in why, why
    assert wrong not in log, log

    # Not something libpq parses.
    _, _, why = refused("not a conninfo")
    assert why.startswith("--postgres: "), why
    assert "not a libpq connection string" in why, why
    # libpq quotes a URI it cannot parse: not with its password.
    _, log, why = refused("postgresql://leased:Secret-Pass-991@[::1/db")
    assert "not a libpq connection string" in why, why
    assert "Secret-Pass-991" not in log, log
    assert "leased:***@" in why, why
    # libpq ends a URI's user info at its first '@' or '/': the rest of
    # such a password, not percent-encoded, would be the host or port,
    # which its messages quote. Refused before libpq sees it.
    for uri in ("postgresql://leased:Open@Sesame-818@127.0.0.1:%d/db",
                "postgresql://leased:Open/Sesame-818@127.0.0.1:%d/db",
                "postgres://leased:O?pen@Sesame-818@127.0.0.1:%d/db"):
        _, log, why = refused(uri % server.port)
        assert "percent-encode" in why, why
        assert "Sesame" not in log, log
    # An '@' in the query, a password with '?', percent-encoded ones: the
    # URI is libpq's to read (here: a role without a password is refused).
    for uri in ("postgresql://127.0.0.1:%d/db?user=no@body",
                "postgresql://nobody:O?pen@127.0.0.1:%d/db",
                "postgresql://nobody:Open%%40Sesame%%2F8@127.0.0.1:%d/db"):
        _, log, why = refused(uri % server.port)
        assert "percent-encode" not in why, why
        assert "Sesame" not in log, log
    # libpq quotes the word of a key=value string it stopped at: with a
    # password in the string, that word may be the password's (a password
    # with a space, unquoted), so it is not shown; without, it is.
    for conninfo, hidden in (("host=h password=Open Sesame-818 dbname=d",
                              "Sesame-818"),
                             ('password=x "Sesame-818" port=1',
                              "Sesame-818"),
                             ("password=Open Sesame-818=1", "Sesame-818")):
        _, log, why = refused(conninfo)
        assert "not a libpq connection string" in why, why
        assert hidden not in log and "'***'" in why, log
    _, _, why = refused("host=h dbname=d pasword=1")
    assert "invalid connection option 'pasword'" in why, why

    # A password that is one letter of the message: each of its
    # occurrences masked in place, nothing else changed.
    port = pg._free_port()
    _, _, plain = refused(server.conninfo(port=port, password="Q"))
    _, _, masked = refused(server.conninfo(port=port, password="e"))
    what = masked[len("--postgres: "):]
    assert "e" not in what and "*" in what, masked
    assert masked.replace("*", "e") == plain, (masked, plain)

    # libpq quotes a bad port: a message with the password in it, cut
    # short at every place in the password in turn, shows none of it.
    secret = "Horse-Staple-42"
    for pad in range(150, 260, 2):
        _, log, why = refused(server.conninfo(
            port="9" * pad + secret, password=secret))
        assert "invalid integer value" in why, why
        assert not any(secret[:k] in log for k in range(4, 16)), log

    # A role that may not create in schema public (PostgreSQL 15's
    # default for everyone but the database's owner).
    name, _ = new_database()
    role2 = unique("pgtest_nocreate")
    right = "Quiet-Lantern-5520"
    server.add_role(role2, password=right)
    _, log, why = refused(server.conninfo(user=role2, password=right,
                                          dbname=name))
    assert why.startswith("--postgres: "), why
    assert "permission denied" in why, why
    assert right not in log, log
    # Nothing was left half made.
    assert server.psql("SELECT count(*) FROM pg_tables WHERE tablename "
                       "LIKE 'leased%'", dbname=name) == "0"


def test_a_role_with_table_rights_only_uses_a_made_schema():
    # docs/ha.md: after the first start, the rights on the tables (and
    # EXECUTE on the functions, which every role has) are enough.
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with Leased(ttl="20s", postgres=conninfo) as d:
        d.client().acquire("made", "alice")
    role = unique("pgtest_user")
    password = "Table-Rights-6620"
    server.add_role(role, password=password)
    server.psql("GRANT SELECT, INSERT, UPDATE, DELETE ON leased_leases, "
                "leased_meta, leased_waiters, leased_events TO %s;"
                "GRANT USAGE ON SEQUENCE leased_waiters_id_seq TO %s"
                % (role, role), dbname=name)
    with Leased(ttl="20s", postgres=server.conninfo(
            user=role, password=password, dbname=name)) as d:
        c = d.client()
        expect_code(HELD, c.acquire, "made", "bob")
        assert c.acquire("new", "bob").token == 1
        # Watch reads and writes the events with the same rights.
        watch = c.changes(session="new", after=2)     # "made", "new"
        assert next(watch).revision == 2
        c.release(harness.pb.Lease(session_id="new", owner="bob", token=1))
        assert [e.kind for e in next(watch).events] == [2]  # RELEASED
        watch.cancel()


# --- 5. The database stops ----------------------------------------------

def test_database_paused_then_resumed():
    server = pg.Postgres("paused").start()
    with Leased(ttl="20s", postgres=server.conninfo(),
                args=["--postgres-timeout", "1s"]) as d:
        c = d.client()
        held = [c.acquire("p%d" % i, "owner-%d" % i) for i in range(5)]
        c.release(c.acquire("gone", "x"))
        assert c.health() == "SERVING"
        server.pause()
        try:
            start = time.monotonic()
            expect_code(UNAVAILABLE, c.acquire, "p-new", "newcomer")
            took = time.monotonic() - start
            # Bounded by --postgres-timeout (1 s), with room for a loaded
            # machine; a hang would run into the call's own 5 s deadline.
            assert took < 4.0, took
            # Told before the answer: the other connections are most
            # likely lost too (closed, or doubted while a job has them).
            assert c.health() == "NOT_SERVING"
            # While down, every call is refused at once.
            start = time.monotonic()
            expect_code(UNAVAILABLE, c.renew, held[0])
            assert time.monotonic() - start < 3.0
        finally:
            server.resume()
        wait_for("SERVING again", lambda: c.health() == "SERVING", 10)
        for lease in held:
            assert_kept(c, lease)
        assert c.acquire("gone", "y").token == 2
    server.stop()


def assert_kept(c, lease):
    """The lease is still its holder's after an outage: Get shows it live
    with its token, another owner is refused, and its holder renews it
    with the same token. Returns the renewal."""
    got = c.get(lease.session_id)
    assert (got.owner, got.token, got.live) == \
        (lease.owner, lease.token, True), got
    expect_code(HELD, c.acquire, lease.session_id, "intruder")
    renewed = c.renew(lease)
    assert renewed.token == lease.token
    return renewed


def test_database_restarted():
    server = pg.Postgres("restarted").start()
    # A quarantine (TTL + skew: 10 s) well beyond the lease's own expiry.
    with Leased(ttl="1s", postgres=server.conninfo(),
                args=["--postgres-timeout", "1s",
                      "--max-clock-skew", "9s"]) as d:
        c = d.client()
        held = c.acquire("r1", "alice")
        assert "database_primary_changed" not in d.log_text()
        server.stop()
        expect_code(UNAVAILABLE, c.acquire, "r2", "bob")
        assert c.health() == "NOT_SERVING"  # told before the answer
        expect_code(UNAVAILABLE, c.renew, held)
        # Past the lease's expiry (the database's clock is this host's)
        # while the database is down.
        expiry = held.expiry.ToNanoseconds()
        wait_for("the lease's expiry", lambda: time.time_ns() > expiry, 5)
        server.start()
        wait_for("SERVING again", lambda: c.health() == "SERVING", 10)
        m = d.wait_log(r"msg=database_primary_changed quarantine_ms=(\d+)")
        # What is left of the quarantine stored: TTL + skew, less the
        # moments since it was set.
        assert 9000 < int(m.group(1)) <= 10000, m.group(0)
        # Expired by its own expiry, but quarantined: nobody takes it.
        assert time.time_ns() > expiry
        assert c.stats().quarantine_remaining_ms > 0
        renewed = assert_kept(c, held)
        assert renewed.expiry.ToNanoseconds() > time.time_ns()
        # A session nobody held is free at once.
        assert c.acquire("r2", "bob").token == 1
    server.stop()


def test_a_cancelled_wait_for_the_standby_is_not_answered_ok():
    """A commit whose wait for a synchronous standby an operator cancels
    reports success with a warning, though no standby confirmed it: the
    calls of its batch get UNAVAILABLE (outcome unknown), never OK."""
    server = pg.Postgres("syncwait").start()
    with Leased(ttl="20s", postgres=server.conninfo(),
                args=["--postgres-timeout", "20s"]) as d:
        c = d.client()
        held = c.acquire("s1", "alice")
        # A standby that never comes: every commit waits for it, once the
        # checkpointer has read the setting after the reload (it tells
        # the backends that a standby is wanted). Until a commit of
        # psql's waits, one of leased's might not.
        server.psql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        server.psql("SELECT pg_reload_conf()")
        # The sessions of one application_name whose commit waits.
        syncrep = "FROM pg_stat_activity WHERE application_name = '%s' " \
                  "AND wait_event = 'SyncRep'"
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            probe = pool.submit(server.psql, "CREATE TABLE probe ()",
                                application_name="probe")
            wait_for("psql's commit waiting for the standby",
                     lambda: server.psql("SELECT pid " + syncrep % "probe")
                     != "", 10)
            server.psql("SELECT pg_cancel_backend(pid) " + syncrep % "probe")
            probe.result(timeout=10)
            call = pool.submit(status_of, c.acquire, "s2", "bob")
            wait_for("a commit waiting for the standby",
                     lambda: server.psql("SELECT pid " + syncrep % "leased")
                     != "", 10)
            assert not call.done()
            server.psql("SELECT pg_cancel_backend(pid) " + syncrep % "leased")
            assert call.result(timeout=10) == UNAVAILABLE
        # Logged as the call is answered (its connection is closed then).
        wait_for("the reason in the log",
                 lambda: "synchronous standby" in d.log_text(), 10)
        server.psql("ALTER SYSTEM RESET synchronous_standby_names")
        server.psql("SELECT pg_reload_conf()")
        # It was committed on the primary: the replica reconnects and
        # decides on what is stored.
        assert server.psql("SELECT count(*) FROM leased_leases WHERE "
                           "session = 's2'") == "1"
        wait_for("bob's lease", lambda: status_of(
            c.acquire, "s2", "bob") == OK, 10)
        assert_kept(c, held)
    server.stop()


def test_a_warning_of_another_kind_changes_no_outcome():
    """Warnings other than the standby's (here a trigger's RAISE WARNING
    on every write) leave the batch's answers as they are; they are
    counted and logged (a line a second at most)."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with Leased(ttl="20s", postgres=conninfo,
                args=["--metrics-listen", "127.0.0.1:0"]) as d:
        c = d.client()
        first = c.acquire("w", "alice")
        assert metric(d, "leased_pg_warnings_total") == 0
        server.psql("CREATE FUNCTION warn() RETURNS trigger LANGUAGE plpgsql "
                    "AS $$ BEGIN RAISE WARNING 'noted: %', "
                    "convert_from(NEW.owner, 'UTF8'); RETURN NEW; END $$;"
                    "CREATE TRIGGER warn BEFORE INSERT OR UPDATE ON "
                    "leased_leases FOR EACH ROW EXECUTE FUNCTION warn()",
                    dbname=name)
        renewed = c.renew(first)
        assert renewed.token == first.token
        c.release(renewed)
        assert c.acquire("w", "bob").token == first.token + 1
        assert c.acquire("w2", "carol").token == 1
        assert server.psql("SELECT count(*) FROM leased_leases",
                           dbname=name) == "2"
        # One warning a row written: the renewal, the release, bob's and
        # carol's acquires.
        assert metric(d, "leased_pg_warnings_total") == 4
        d.wait_log(r'msg=database_warning message="noted: alice" '
                   r'not_logged=0')


# --- 6. Metrics -----------------------------------------------------------

def test_metrics_over_postgres():
    server = pg.Postgres("metrics").start()
    with Leased(ttl="20s", postgres=server.conninfo(),
                args=["--metrics-listen", "127.0.0.1:0",
                      "--postgres-timeout", "1s"]) as d:
        c = d.client()
        for i in range(4):
            c.release(c.acquire("m%d" % i, "alice"))
        held = c.acquire("m-held", "alice")
        m = d.metrics()
        assert m[("leased_pg_round_trip_seconds_count", ())] > 0
        assert m[("leased_pg_batch_calls_count", ())] > 0
        assert m[("leased_pg_batch_calls_sum", ())] >= 9
        assert m[("leased_pg_failovers_total", ())] == 0
        assert m[("leased_storage_failing", ())] == 0
        errors = m[("leased_pg_errors_total", ())]

        server.restart()
        # Until leased notices and reconnects, calls may fail.
        wait_for("a call after the restart",
                 lambda: status_of(c.acquire, "m-after", "bob") == OK, 10)
        wait_for("failovers_total 1", lambda: metric(
            d, "leased_pg_failovers_total") == 1, 5)
        assert metric(d, "leased_pg_errors_total") > errors
        d.wait_log(r"msg=database_primary_changed")

        server.pause()
        try:
            expect_code(UNAVAILABLE, c.renew, held)
            # Failing once no connection works: each learns of the pause
            # by its own call's deadline (--postgres-timeout), and another
            # connection's job in flight as the server stopped is answered
            # after the renewal.
            wait_for("storage_failing 1", lambda: metric(
                d, "leased_storage_failing") == 1, 5)
        finally:
            server.resume()
        wait_for("storage_failing 0", lambda: metric(
            d, "leased_storage_failing") == 0, 10)
        assert metric(d, "leased_pg_failovers_total") == 1  # not a pause
    server.stop()


# --- 7. Garbage collection ---------------------------------------------

def test_garbage_collection():
    server = harness.shared_postgres()
    name, conninfo = new_database()

    def sql(q):
        return server.psql(q, dbname=name)

    # 2 s: no row is collectable before the count right after the calls,
    # however slowly they go.
    with Leased(ttl="2s", postgres=conninfo) as d:
        c = d.client()
        had = {}
        # One session taken over a few times: token 5.
        for i in range(5):
            lease = c.acquire("gc-high", "o%d" % i)
            c.release(lease)
        had["gc-high"] = lease.token
        assert lease.token == 5
        for i in range(3):  # released
            lease = c.acquire("gc-rel-%d" % i, "alice")
            c.release(lease)
            had[lease.session_id] = lease.token
        for i in range(3):  # left to expire
            lease = c.acquire("gc-exp-%d" % i, "bob")
            had[lease.session_id] = lease.token
        assert sql("SELECT count(*) FROM leased_leases") == str(len(had))
        wait_for("rows collected", lambda: sql(
            "SELECT count(*) FROM leased_leases") == "0", 20)
        floor = int(sql("SELECT value FROM leased_meta "
                        "WHERE key = 'token_floor'"))
        assert floor >= max(had.values()), (floor, had)
        for s, token in sorted(had.items()):
            again = c.acquire(s, "carol")
            assert again.token > token, (s, again.token, token)
            assert again.token > floor



def test_an_answer_this_leased_does_not_know_is_no_refusal():
    """leased_decide of another version (here: one that answers code 9)
    must not reach a client as a refusal, nor as an OK: the calls of that
    batch get UNAVAILABLE (their outcome is unknown), the log says why,
    and leased keeps serving once the function is its own again."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    with Leased(ttl="30s", postgres=conninfo) as d:
        c = d.client()
        assert c.acquire("s", "alice").token == 1
        server.psql(
            "ALTER FUNCTION leased_decide(int[], bytea[], bytea[], bigint[], "
            "bigint, int, int) RENAME TO leased_decide_kept;"
            "CREATE FUNCTION leased_decide(op int[], s bytea[], o bytea[], "
            "t bigint[], ttl bigint, wk int, wp int, OUT code int, "
            "OUT tok bigint, "
            "OUT exp bigint, OUT flags int, OUT now_ns bigint) "
            "RETURNS SETOF record LANGUAGE plpgsql AS $$ BEGIN "
            "FOR i IN 1 .. cardinality(op) LOOP code := 9; tok := NULL; "
            "exp := NULL; flags := 0; now_ns := leased_now(); RETURN NEXT; "
            "END LOOP; END $$", dbname=name)
        expect_code(UNAVAILABLE, c.acquire, "t", "bob")
        d.wait_log(r"the database answered code 9, flags 0 to a call of "
                   r"op 1, which this leased does not know")
        server.psql("DROP FUNCTION leased_decide(int[], bytea[], bytea[], "
                    "bigint[], bigint, int, int);"
                    "ALTER FUNCTION leased_decide_kept(int[], bytea[], "
                    "bytea[], bigint[], bigint, int, int) "
                    "RENAME TO leased_decide",
                    dbname=name)
        wait_for("calls decided again", lambda: status_of(
            c.acquire, "u", "carol") == OK, 20)
        assert c.renew(c.acquire("s", "alice")).token == 1


# --- 8. Restoring an older backup of the database -------------------------

def test_restore_of_an_older_backup_with_a_raised_floor():
    """Promise 3 across a restore of an older pg_dump: started with
    --raise-token-floor N (N: the token high-water mark before), a
    replica gives only tokens above N; a holder the backup knew is told
    it lost the lease; the leases of the backup stay held through a
    quarantine, as after a change of primary; the raise is stored."""
    server = harness.shared_postgres()
    name, conninfo = new_database()
    skew = ["--max-clock-skew", "0s"]
    with Leased(ttl="4s", postgres=conninfo, args=skew) as d:
        c = d.client()
        alice = c.acquire("a", "alice")
        backup = subprocess.run(
            [pg.BIN + "/pg_dump", "-d", server.conninfo(dbname=name)],
            capture_output=True, text=True, timeout=60, check=True).stdout
        c.release(alice)
        c.release(c.acquire("a", "bob"))
        assert c.acquire("a", "carol").token == 3
        assert c.acquire("b", "dave").token == 1  # newer than the backup
        high = c.stats().token_high_water_mark
        assert high == 3
    server.psql("DROP DATABASE %s" % name)
    server.psql("CREATE DATABASE %s" % name)
    server.psql(backup, dbname=name)
    # By now the backup's lease of alice has expired.
    wait_for("alice's expiry", lambda: time.time_ns()
             > alice.expiry.ToNanoseconds() + 200000000, 10)

    with Leased(ttl="4s", postgres=conninfo,
                args=skew + ["--raise-token-floor", str(high)]) as d:
        d.wait_log(r"msg=token_floor_raised to=3 rows=1")
        c = d.client()
        expect_code(HELD, c.renew, alice)  # its token is no longer 1
        # alice's lease of the backup has expired, but the quarantine
        # keeps it from everyone else for a TTL.
        expect_code(HELD, c.acquire, "a", "erin")
        assert c.stats().quarantine_remaining_ms > 0
        wait_for("the quarantine's end", lambda: status_of(
            c.acquire, "a", "erin") == OK, 10)
        assert c.acquire("a", "erin").token == 4
        assert c.acquire("b", "frank").token == 4  # not 1 again
        assert c.acquire("c", "gina").token == 4
    # Stored: a start without the flag keeps it; the flag again is
    # harmless.
    with Leased(ttl="4s", postgres=conninfo, args=skew) as d:
        assert d.client().acquire("new", "hal").token == 4
    with Leased(ttl="4s", postgres=conninfo,
                args=skew + ["--raise-token-floor", str(high)]) as d:
        d.wait_log(r"msg=token_floor_raised to=3 rows=0")
        assert d.client().acquire("newer", "ivy").token == 4
    assert server.psql("SELECT min(token) FROM leased_leases",
                       dbname=name) == "4"


harness.main(globals())
