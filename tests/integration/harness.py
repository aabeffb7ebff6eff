"""Shared helpers for leased's integration and interop tests (Python).

Starts the real `leased` binary (path in $LEASED_BIN) in a temporary data
directory on an ephemeral loopback port, and talks to it with Debian's
python3-grpcio through code that protoc generates from proto/ at run time.

A test file defines functions named `test_*` and ends with
`harness.main(globals())`: `python3 FILE` runs every case, `python3 FILE
CASE` runs one, `python3 FILE --list` lists them (meson registers one test
per case from that list). A case passes when it
returns; any exception fails it. So does a sanitizer report (or a
sanitizer's exit status) from any leased the case started, whether the
case stopped it, killed it or expected it to fail; leased processes a case
leaves running are stopped after it.
"""
import atexit
import importlib.util
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import cases  # noqa: E402  (tests/cases.py)
PROTO = os.path.join(ROOT, "proto")
SERVICE = "/mecatl.driver.v1.SessionLeaseService/"
HEALTH = "/grpc.health.v1.Health/"
ADMIN = "/leased.admin.v1.Admin/"
LEASES = "/leased.v1.Leases/"


def _generate():
    out = tempfile.mkdtemp(prefix="leased-pb2-")
    atexit.register(shutil.rmtree, out, True)
    subprocess.run(
        ["protoc", "-I", PROTO, "-I", "/usr/include", "--python_out=" + out,
         "mecatl/driver/v1/session_lease.proto",
         "grpc/health/v1/health.proto", "leased/admin/v1/admin.proto",
         "leased/v1/leases.proto"],
        check=True)
    sys.path.insert(0, out)
    from mecatl.driver.v1 import session_lease_pb2

    # Loaded by path: "grpc" is grpcio's own package, "leased" the
    # client's (client/python).
    def load(name, path):
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(out, path))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    health_pb2 = load("health_pb2", "grpc/health/v1/health_pb2.py")
    admin_pb2 = load("admin_pb2", "leased/admin/v1/admin_pb2.py")
    leases_pb2 = load("leases_pb2", "leased/v1/leases_pb2.py")
    return session_lease_pb2, health_pb2, admin_pb2, leases_pb2


pb, health_pb, admin_pb, leases_pb = _generate()


# What the sanitizers print when they find a bug (tests/run.sh builds
# leased with ASan+UBSan and with TSan), and their exit statuses there:
# TSan's default 66 and the 23 run.sh gives ASan (leased itself exits 0, 1,
# 2 or EX_IOERR 74).
SANITIZER_REPORT = re.compile(
    r"WARNING: ThreadSanitizer|ThreadSanitizer: CHECK failed|"
    r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|: runtime error: ")
SANITIZER_EXIT = {66: "ThreadSanitizer", 23: "AddressSanitizer"}

# Every Leased started during the current case, for main() to check after
# it (the references also keep their logs).
_started = []


def sanitizer_excerpt(text, max_lines=80):
    """The first sanitizer report in text, from its first line to its
    SUMMARY line (at most max_lines), or None."""
    m = SANITIZER_REPORT.search(text)
    if m is None:
        return None
    lines = text[text.rfind("\n", 0, m.start()) + 1:].splitlines()
    end = next((i for i, l in enumerate(lines) if l.startswith("SUMMARY:")),
               len(lines) - 1)
    return "\n".join(lines[:min(end + 1, max_lines)])


# With LEASED_TEST_STORE=postgres, every Leased keeps its leases in a
# database of its own on one PostgreSQL server this process starts
# (tests/integration/pg.py), instead of SQLite in its data directory.
_postgres = None
_databases = 0


def shared_postgres():
    """This process's PostgreSQL server, started at first use and stopped
    at exit (pg.py)."""
    global _postgres
    if _postgres is None:
        import pg
        _postgres = pg.Postgres()
        _postgres.start()
    return _postgres


# A condition on pg_stat_activity: the backend is a replica's listening
# connection, which holds advisory lock (key, its own pid) for as long as
# it is open (storage/pg_listen.c).
LISTENING = ("EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = "
             "'advisory' AND l.granted AND l.pid = pg_stat_activity.pid "
             "AND l.objid = l.pid::oid)")


def fresh_database(server=None):
    """A new, empty database on server (shared_postgres() by default):
    its libpq conninfo."""
    global _databases
    server = server or shared_postgres()
    _databases += 1
    name = "leases_%d_%d" % (os.getpid(), _databases)
    server.psql("CREATE DATABASE %s" % name)
    return server.conninfo(dbname=name)


def leased_bin():
    path = os.environ.get("LEASED_BIN")
    if not path:
        raise RuntimeError("LEASED_BIN is not set (run through meson test)")
    return path


class Leased:
    """One leased process. Use as a context manager, or call stop()."""

    def __init__(self, data_dir=None, ttl="1s", args=(), listen="127.0.0.1:0",
                 env=None, tls=None, token=None, postgres=None):
        """tls: a certs.Certs; leased then serves TLS with its server
        certificate, and channel() trusts its CA and presents client1's
        certificate. token: a bearer token leased requires (from a file
        of its own) and client() sends. postgres: a conninfo for
        --postgres (by default a fresh database when
        LEASED_TEST_STORE=postgres, else SQLite)."""
        if postgres is None and \
                os.environ.get("LEASED_TEST_STORE") == "postgres":
            postgres = fresh_database()
        self.postgres = postgres
        self._tmp = tempfile.TemporaryDirectory(prefix="leased-test-")
        if data_dir is None:
            data_dir = os.path.join(self._tmp.name, "data")
        self.data_dir = data_dir
        self.ttl = ttl
        self.args = list(args)
        self.tls = tls
        self.token = token
        if tls is not None:
            self.args += ["--tls-cert", tls.path("server.pem"),
                          "--tls-key", tls.path("server.key")]
        if token is not None:
            self.token_file = os.path.join(self._tmp.name, "tokens")
            write_private(self.token_file, "# test token\n%s\n" % token)
            self.args += ["--auth-token-file", self.token_file]
        self.listen = listen
        self.env = env
        self.proc = None
        self.addr = None
        self.log_path = None
        self.log = None
        # Removed when this object goes away, so that tests can still read
        # the log after stopping the daemon.
        self._logs = tempfile.TemporaryDirectory(prefix="leased-log-")
        self._starts = 0
        self._channels = []
        self._procs = []  # (process, log path) of every start

    @property
    def db_path(self):
        return os.path.join(self.data_dir, "leased.db")

    def start(self, wait=True):
        """Starts leased; with wait, returns once it logs `listening`.
        May be called again after stop() or kill9() to restart on the same
        data directory (with a fresh log and a new address). ttl=None
        passes no --ttl (e.g. to test LEASED_TTL)."""
        if self.log is not None:
            self.log.close()
        self._starts += 1
        self.log_path = os.path.join(self._logs.name, "log-%d" % self._starts)
        cmd = [leased_bin(), "--data-dir", self.data_dir]
        if self.ttl is not None:
            cmd += ["--ttl", self.ttl]
        if self.listen is not None:
            cmd += ["--listen", self.listen]
        if self.postgres is not None:
            cmd += ["--postgres", self.postgres]
        cmd += self.args
        env = dict(os.environ)
        env.update(self.env or {})
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log,
                                     env=env)
        self._procs.append((self.proc, self.log_path))
        if self not in _started:
            _started.append(self)
        if wait:
            self.addr = self.wait_log(r"msg=listening addr=(\S+)").group(1)
        return self

    def run_to_exit(self, timeout=10.0):
        """Starts leased expecting it to exit by itself (a refused start);
        returns (exit code, log text) and cleans up."""
        try:
            self.start(wait=False)
            rc = self.proc.wait(timeout=timeout)
            return rc, self.log_text()
        finally:
            self.__exit__(None, None, None)

    def metrics(self):
        """Scrapes /metrics (leased must run with --metrics-listen) and
        parses it with prometheus_client's parser: {(name, ((label,
        value), ...)): value} for every sample."""
        from prometheus_client.parser import text_string_to_metric_families
        addr = self.wait_log(r"msg=metrics_listening addr=(\S+)").group(1)
        with urllib.request.urlopen("http://%s/metrics" % addr,
                                    timeout=5) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; "
                                                        "version=0.0.4")
            text = r.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def sanitizer_report(self):
        """What went wrong under a sanitizer in any start of this leased
        so far (a report in its log, or a sanitizer's exit status), as
        text to show; None if nothing. Meaningful once it has exited."""
        for n, (proc, path) in enumerate(self._procs, 1):
            with open(path, errors="replace") as f:
                text = f.read()
            excerpt = sanitizer_excerpt(text)
            if excerpt is not None:
                return ("a sanitizer report from leased (start %d, pid %d):"
                        "\n%s" % (n, proc.pid, excerpt))
            if proc.returncode in SANITIZER_EXIT:
                return ("leased (start %d, pid %d) exited %d, as %s does "
                        "after a report; the end of its log:\n%s"
                        % (n, proc.pid, proc.returncode,
                           SANITIZER_EXIT[proc.returncode],
                           "\n".join(text.splitlines()[-40:])))
        return None

    def wait_log(self, pattern, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log_text())
            if m:
                return m
            if self.proc.poll() is not None:
                raise AssertionError("leased exited (%s) before logging %r:\n%s"
                                     % (self.proc.returncode, pattern,
                                        self.log_text()))
            time.sleep(0.02)
        raise AssertionError("timed out waiting for %r:\n%s"
                             % (pattern, self.log_text()))

    def wait_file(self, path, timeout=10.0):
        """Waits until path exists (a helper process has started)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise AssertionError("no %s after %ss" % (path, timeout))
            time.sleep(0.02)

    def stop(self, timeout=15.0):
        """Closes the channels made by channel(), then SIGTERM; returns the
        exit code."""
        self.close_channels()
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill9(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.close_channels()

    def channel(self, options=None, creds=None, plain=False):
        """A new channel to leased, closed by stop() and kill9(): with
        creds if given, else TLS as set up by tls= (unless plain), else
        plaintext."""
        if creds is None and self.tls is not None and not plain:
            creds = tls_creds(self.tls, "client1")
        if creds is not None:
            ch = grpc.secure_channel(self.addr, creds, options=options)
        else:
            ch = grpc.insecure_channel(self.addr, options=options)
        self._channels.append(ch)
        return ch

    def close_channels(self):
        for ch in self._channels:
            ch.close()
        self._channels = []

    def client(self):
        return Client(self.channel(), token=self.token)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        try:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    rc = self.stop()
                except subprocess.TimeoutExpired:
                    raise AssertionError("leased did not stop within 15 s of "
                                         "SIGTERM:\n%s" % self.log_text())
                if exc[0] is None and rc != 0:
                    raise AssertionError("leased exited %s:\n%s"
                                         % (rc, self.log_text()))
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.kill9()
            if self.log is not None:
                self.log.close()
            self._tmp.cleanup()


def write_private(path, text, mode=0o600):
    """Writes a file that only its owner may read (mode set before the
    contents arrive)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def tls_creds(certs, client=None, ca="ca.pem"):
    """Channel credentials trusting certs' CA (or another file), presenting
    the client certificate named (e.g. "client1"), if any."""
    kw = {"root_certificates": certs.read(ca)}
    if client is not None:
        kw["private_key"] = certs.read(client + ".key")
        kw["certificate_chain"] = certs.read(client + ".pem")
    return grpc.ssl_channel_credentials(**kw)


class Client:
    """The three lease calls over one channel; errors raise grpc.RpcError.
    With a token, every call carries `authorization: Bearer <token>`."""

    def __init__(self, channel, timeout=5.0, token=None):
        self.channel = channel
        self.timeout = timeout
        self.metadata = (("authorization", "Bearer " + token),) if token else None
        self._acquire = channel.unary_unary(
            SERVICE + "Acquire", pb.AcquireRequest.SerializeToString,
            pb.LeaseResponse.FromString)
        self._renew = channel.unary_unary(
            SERVICE + "Renew", pb.RenewRequest.SerializeToString,
            pb.LeaseResponse.FromString)
        self._release = channel.unary_unary(
            SERVICE + "Release", pb.ReleaseRequest.SerializeToString,
            pb.ReleaseResponse.FromString)

    def acquire(self, session, owner):
        return self._acquire(pb.AcquireRequest(session_id=session, owner=owner),
                             timeout=self.timeout,
                             metadata=self.metadata).lease

    def renew(self, lease):
        return self._renew(pb.RenewRequest(lease=lease),
                           timeout=self.timeout, metadata=self.metadata).lease

    def release(self, lease):
        self._release(pb.ReleaseRequest(lease=lease), timeout=self.timeout,
                      metadata=self.metadata)

    def wait(self, session, owner, timeout=None):
        """leased.v1.Leases/Wait, started: a grpc.Future of its Lease
        (cancel() ends the call; result() raises its error)."""
        call = self.channel.unary_unary(
            LEASES + "Wait", leases_pb.WaitRequest.SerializeToString,
            leases_pb.WaitResponse.FromString)
        return call.future(
            leases_pb.WaitRequest(session_id=session, owner=owner),
            timeout=timeout or self.timeout, metadata=self.metadata)

    def changes(self, session="", prefix="", after=0, timeout=None):
        """leased.v1.Leases/Watch, started: the call (cancel() ends it),
        an iterator of its WatchResponses."""
        call = self.channel.unary_stream(
            LEASES + "Watch", leases_pb.WatchRequest.SerializeToString,
            leases_pb.WatchResponse.FromString)
        return call(leases_pb.WatchRequest(session_id=session, prefix=prefix,
                                           after_revision=after),
                    timeout=timeout, metadata=self.metadata)

    def health(self, service=""):
        """grpc.health.v1 Check: the ServingStatus name ("SERVING", ...)."""
        call = self.channel.unary_unary(
            HEALTH + "Check", health_pb.HealthCheckRequest.SerializeToString,
            health_pb.HealthCheckResponse.FromString)
        resp = call(health_pb.HealthCheckRequest(service=service),
                    timeout=self.timeout)
        return health_pb.HealthCheckResponse.ServingStatus.Name(resp.status)

    def watch(self, service="", timeout=None):
        """grpc.health.v1 Watch: an iterator of ServingStatus names."""
        call = self.channel.unary_stream(
            HEALTH + "Watch", health_pb.HealthCheckRequest.SerializeToString,
            health_pb.HealthCheckResponse.FromString)
        stream = call(health_pb.HealthCheckRequest(service=service),
                      timeout=timeout)
        return stream, (health_pb.HealthCheckResponse.ServingStatus.Name(
            m.status) for m in stream)

    def _admin(self, method, request, reply):
        call = self.channel.unary_unary(ADMIN + method,
                                        type(request).SerializeToString,
                                        reply.FromString)
        return call(request, timeout=self.timeout, metadata=self.metadata)

    def get(self, session):
        return self._admin("Get", admin_pb.GetRequest(session_id=session),
                           admin_pb.GetResponse).lease

    def list(self, prefix="", page_size=0, page_token=""):
        return self._admin("List", admin_pb.ListRequest(
            prefix=prefix, page_size=page_size, page_token=page_token),
            admin_pb.ListResponse)

    def stats(self):
        return self._admin("Stats", admin_pb.StatsRequest(),
                           admin_pb.StatsResponse)

    def snapshot(self):
        return self._admin("Snapshot", admin_pb.SnapshotRequest(),
                           admin_pb.SnapshotResponse).database

    def revoke(self, session, token=0):
        return self._admin("Revoke", admin_pb.RevokeRequest(
            session_id=session, token=token), admin_pb.RevokeResponse).lease

    def raw(self, method, payload, timeout=None):
        """Sends raw bytes to SERVICE + method (or a full path)."""
        path = method if method.startswith("/") else SERVICE + method
        call = self.channel.unary_unary(path)
        return call(payload, timeout=timeout or self.timeout,
                    metadata=self.metadata)


class WriteLock:
    """Holds the database's write lock from outside (BEGIN IMMEDIATE), as
    another process would."""

    def __init__(self, path):
        self.con = sqlite3.connect(path, isolation_level=None, timeout=5)

    def __enter__(self):
        self.con.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc):
        self.con.execute("ROLLBACK")
        self.con.close()


def status_of(fn, *args):
    """Runs fn; returns grpc.StatusCode.OK or the error's code."""
    try:
        fn(*args)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def expect_code(code, fn, *args):
    got = status_of(fn, *args)
    if got != code:
        raise AssertionError("want %s, got %s" % (code, got))


def _check_started():
    """Stops the leased processes the case left running (each must stop
    cleanly), then returns what went wrong with any it started (a list of
    texts: unclean stops, sanitizer reports), and forgets them."""
    reports = []
    for d in _started:
        if d.proc.poll() is None:
            try:
                d.__exit__(None, None, None)
            except Exception:
                reports.append("a leased the case left running: "
                               + traceback.format_exc())
        report = d.sanitizer_report()
        if report is not None:
            reports.append(report)
    _started.clear()
    return reports


def main(namespace):
    """Runs the file's cases (tests/cases.py); after each, the leased
    processes it started are checked (_check_started)."""
    cases.main(namespace, after=lambda name: _check_started())
