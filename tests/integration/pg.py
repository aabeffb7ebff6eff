"""Throwaway PostgreSQL 15 servers for leased's PostgreSQL-mode tests.

A Postgres is a cluster of its own in a temporary directory, run with
Debian's binaries (/usr/lib/postgresql/15/bin): no system service. It
listens on 127.0.0.1 at a free port and on a unix socket in the directory.
`leased` is its superuser and owns a database `leased`. pg_hba.conf trusts
every role on the socket (psql() uses it) and `leased` over TCP
(conninfo()); over TCP any other role must give its password (scram), so
add_role() makes the roles that see leased refused or short of rights.
standby() adds a streaming, by default synchronous, standby. With
$LEASED_PG_TEMPLATE set, a new server's data directory is a copy of one
cluster initdb made there once (_initdb()).

faketime="+2s" (or the path of a file holding such an offset, read
again every second, to step the clock while it runs) offsets the wall
clock (libfaketime; monotonic left real) of client backends, walsenders,
startup, checkpointer and bgwriter, but
not of what the postmaster forks from its signal handlers (walreceiver,
autovacuum, walwriter, background workers): libfaketime gives real time
inside its wrapper of the postmaster's select(), and they keep that state.

PostgreSQL refuses to run as root, and the tests run as root on CI: then
initdb, postgres, pg_ctl and pg_basebackup run as Debian's `postgres` user
(the package creates it) through util-linux's setpriv, in directories
chowned to it. psql, a mere client, runs as the caller.

kill9(), pause() and resume() signal every process of a server: the
postmaster and each of its children (each one a session of its own). At
exit, those still running are killed and the directories removed
(atexit). A server also gets SIGKILL when the thread that started it ends
(setpriv --pdeathsig), so one the test process leaves without atexit (at
a timeout) does not outlive it: start servers from the main thread.
"""
import atexit
import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time

BIN = "/usr/lib/postgresql/15/bin"
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
HBA = """\
local all all trust
host all leased 127.0.0.1/32 trust
host replication leased 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
"""
CREDS = []
if os.geteuid() == 0:
    CREDS = ["--reuid=postgres", "--regid=postgres", "--init-groups"]
AS_POSTGRES = ["setpriv"] + CREDS if CREDS else []
_root = None
_servers = []


class PsqlError(Exception):
    """psql failed; .stderr has its message."""
    def __init__(self, stderr):
        super().__init__(stderr.strip())
        self.stderr = stderr


def _env(**extra):
    """The caller's environment without libpq's PG* variables, plus extra
    (None values left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def _run(cmd, timeout=60):
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(),
                       cwd="/", timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n"
                           f"{r.stdout}{r.stderr}")
    return r.stdout


def _mkdir(name):
    """A new directory for one server, owned by the user postgres runs as,
    under one for the whole run that the atexit hook removes."""
    global _root
    if _root is None:
        _root = tempfile.mkdtemp(prefix="leased-pg-")
        atexit.register(_cleanup)
    d = tempfile.mkdtemp(prefix=name + "-", dir=_root)
    if AS_POSTGRES:
        pw = pwd.getpwnam("postgres")
        for p in (_root, d):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    return d


def _initdb_into(data):
    # --no-locale: initdb fails when LANG names a locale the machine has
    # not generated.
    _run(AS_POSTGRES + [BIN + "/initdb", "-D", data, "-A", "trust", "-U",
                        "leased", "--no-sync", "-E", "UTF8", "--no-locale"])


def _initdb(data):
    """A new cluster in data. initdb takes seconds of CPU, so where
    $LEASED_PG_TEMPLATE names a directory (tests/run.sh gives one for the
    whole run), the first test to get there makes a cluster in it and
    every server after is a copy of that one."""
    template = os.environ.get("LEASED_PG_TEMPLATE")
    if not template:
        return _initdb_into(data)
    with open(template + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(template):
            # Made aside and renamed: a test killed midway leaves none.
            part = template + ".part"
            shutil.rmtree(part, True)
            os.makedirs(part, mode=0o700)
            if AS_POSTGRES:
                pw = pwd.getpwnam("postgres")
                for d in (os.path.dirname(template), part):
                    os.chown(d, pw.pw_uid, pw.pw_gid)
            _initdb_into(part)
            os.rename(part, template)
    # Owner and modes kept (postgres refuses a data directory others can
    # read).
    _run(["cp", "-a", template, data])


def _cleanup():
    try:
        for s in _servers:
            s._kill()
    finally:
        shutil.rmtree(_root, True)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _send(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kv(k, v):
    v = str(v)
    if v and not any(c in v for c in " '\\"):
        return f"{k}={v}"
    return "%s='%s'" % (k, v.replace("\\", "\\\\").replace("'", "\\'"))


class Postgres:
    """One PostgreSQL server; start() it (it keeps its port and data)."""

    host = "127.0.0.1"

    def __init__(self, name="primary", faketime=None, conf=None):
        self.name, self.faketime, self.conf = name, faketime, conf or {}
        self.dir = _mkdir(name)
        self.data = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "postgres.log")
        self.port = _free_port()
        self.proc = None
        _servers.append(self)

    def conninfo(self, user="leased", dbname="leased", **extra):
        """A libpq key=value string for this server over TCP loopback."""
        kv = dict(host=self.host, port=self.port, user=user, dbname=dbname)
        kv.update(extra)
        return " ".join(_kv(k, v) for k, v in kv.items())

    def start(self, timeout=30):
        """initdb (first time only), start, and wait until it accepts
        connections. On its first start only, a port another process took
        since it was chosen free is given up for another one (three tries
        in all): later starts keep the port the clients know."""
        assert self.proc is None, f"{self.name} is running"
        fresh = not os.path.exists(os.path.join(self.data, "PG_VERSION"))
        if fresh:
            _initdb(self.data)
            with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
                f.write(HBA)
        tries = 3 if fresh else 1
        while not self._launch(timeout, last=tries == 1):
            tries -= 1
            self.port = _free_port()
        if fresh:
            self.psql("CREATE DATABASE leased OWNER leased", dbname="postgres")
        return self

    def _launch(self, timeout, last):
        """Starts postgres and waits until it accepts connections: True.
        False when its port was taken and last is not set; else raises."""
        # Dynamic shared memory in files under the data directory, not in
        # /dev/shm, where a killed server would leave it. A standby whose
        # primary is gone retries every 200 ms, not 5 s: a promotion
        # waits out the current pause.
        cmd = [BIN + "/postgres", "-D", self.data, "-p", str(self.port),
               "-k", self.dir, "-c", "listen_addresses=" + self.host,
               "-c", "cluster_name=" + self.name,
               "-c", "dynamic_shared_memory_type=mmap",
               "-c", "wal_retrieve_retry_interval=200ms"]
        for k, v in self.conf.items():
            cmd += ["-c", f"{k}={v}"]
        if self.faketime:
            # Set by env(1), after setpriv: the first process libfaketime
            # is loaded in creates a semaphore its descendants all open,
            # which postgres could not if root made it. Only the wall
            # clock: FAKETIME_DONT_FAKE_MONOTONIC (DONT_FAKE_MONOTONIC,
            # the older name); children keep the offset (DONT_RESET).
            # A path: a file holding the offset, read again every second.
            spec = (["FAKETIME_TIMESTAMP_FILE=" + self.faketime,
                     "FAKETIME_CACHE_DURATION=1"]
                    if self.faketime.startswith("/")
                    else ["FAKETIME=" + self.faketime])
            cmd = ["env", "LD_PRELOAD=" + FAKETIME] + spec + [
                   "FAKETIME_DONT_RESET=1",
                   "FAKETIME_DONT_FAKE_MONOTONIC=1",
                   "DONT_FAKE_MONOTONIC=1"] + cmd
        logged = (os.path.getsize(self.logfile)
                  if os.path.exists(self.logfile) else 0)
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL"] + CREDS + cmd,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=_env(),
                cwd=self.dir, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._kill()
                with open(self.logfile, "rb") as f:
                    f.seek(logged)
                    taken = b"Address already in use" in f.read()
                if taken and not last:
                    return False
                raise RuntimeError(f"postgres {self.name} did not start:\n"
                                   + self.log_text()[-4000:])
            time.sleep(0.05)
        return True

    def psql(self, sql, user="leased", dbname="leased", tcp=False,
             password=None, timeout=30, **extra):
        """Runs sql (statements one by one, stopping at the first error)
        and returns its rows, `|`-separated, without headers or the last
        newline. Over the unix socket, or with tcp=True over TCP, where a
        role other than leased needs its password; extra: more conninfo
        keys (connect_timeout=1...). Raises PsqlError."""
        if not tcp:
            extra.setdefault("host", self.dir)
        conn = self.conninfo(user, dbname, **extra)
        r = subprocess.run(
            [BIN + "/psql", "-X", "-w", "-q", "-A", "-t", "-v",
             "ON_ERROR_STOP=1", "-d", conn], input=sql, capture_output=True,
            text=True, timeout=timeout, env=_env(
                PGPASSWORD=password,
                PGPASSFILE=os.path.join(self.dir, "no-pgpass")))
        if r.returncode != 0:
            raise PsqlError(r.stderr)
        return r.stdout.rstrip("\n")

    def add_role(self, name, password=None, login=True):
        """CREATE ROLE, granting nothing: it cannot create in public."""
        sql = 'CREATE ROLE "%s" %s' % (name.replace('"', '""'),
                                       "LOGIN" if login else "NOLOGIN")
        if password is not None:
            sql += " PASSWORD '%s'" % password.replace("'", "''")
        self.psql("SET password_encryption = 'scram-sha-256';\n" + sql)

    def standby(self, name, faketime=None, sync=True, conf=None):
        """A new, started streaming standby of this server (its conf unless
        given); with sync, this server's only synchronous standby."""
        s = Postgres(name, faketime, self.conf if conf is None else conf)
        _run(AS_POSTGRES + [BIN + "/pg_basebackup", "-D", s.data, "-R",
                            "-X", "stream", "-c", "fast", "--no-sync",
                            "-d", self.conninfo()], timeout=120)
        # Not this server's synchronous_standby_names, in case it had one:
        # promoted, s would wait for standbys it does not have.
        auto = os.path.join(s.data, "postgresql.auto.conf")
        with open(auto) as f:
            lines = [ln for ln in f if not ln.startswith("synchronous_")]
        with open(auto, "w") as f:
            f.writelines(lines)
        s.start()
        if sync:
            self.psql("ALTER SYSTEM SET synchronous_standby_names = "
                      f"'\"{name}\"';\n"
                      "ALTER SYSTEM SET synchronous_commit = on;\n"
                      "SELECT pg_reload_conf();")
            q = ("SELECT sync_state FROM pg_stat_replication "
                 f"WHERE application_name = '{name}'")
            self._wait(lambda: self.psql(q) == "sync", f"{name} in sync")
        return s

    def promote(self, timeout=30):
        """Promotes this standby and waits until it takes writes."""
        _run(AS_POSTGRES + [BIN + "/pg_ctl", "promote", "-D", self.data,
                            "-w", "-t", str(timeout)], timeout=timeout + 5)
        self._wait(lambda: self.psql("SELECT pg_is_in_recovery()") == "f",
                   f"{self.name} promoted", timeout)

    def stop(self, timeout=30):
        """Fast shutdown, waited for (SIGKILL after timeout s)."""
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()
        self.proc = None

    def restart(self):
        """stop(), then start() on the same data and port."""
        self.stop()
        return self.start()

    def kill9(self):
        """SIGKILL to every process of the server, as if its host died."""
        self._kill()

    def pause(self):
        """SIGSTOP to every process: connections hang, nothing fails."""
        self._signal(signal.SIGSTOP)

    def resume(self):
        self._signal(signal.SIGCONT)

    def log_text(self):
        with open(self.logfile, errors="replace") as f:
            return f.read()

    def _children(self):
        """The server's other processes: the postmaster's children. Each
        calls setsid(), so a signal to the postmaster's group misses
        them."""
        pids = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                pids.append(int(name))
        return pids

    def _signal(self, sig):
        """sig to every process of the server. The postmaster is stopped
        first, so that it starts no child meanwhile (nor, for SIGKILL,
        resets the others when the first child dies)."""
        if self.proc is None:
            return
        if sig != signal.SIGCONT:
            _send(self.proc.pid, signal.SIGSTOP)
        for pid in self._children():
            _send(pid, sig)
        _send(self.proc.pid, sig)

    def _ready(self):
        """Whether this postmaster says in postmaster.pid (as pg_ctl -w
        reads it) that it takes connections: "ready", or "standby" for a
        hot standby. pg_isready would leave a FATAL in the log each try."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                lines = f.read().split("\n")
        except OSError:
            return False
        return (lines[0] == str(self.proc.pid) and len(lines) > 7
                and lines[7].strip() in ("ready", "standby"))

    def _kill(self):
        """SIGKILL to every process, then remove what a killed server leaves
        outside its directory: its SysV shared memory segment (id on
        postmaster.pid's 7th line) and libfaketime's semaphore."""
        if self.proc is None:
            return
        self._signal(signal.SIGKILL)
        self.proc.wait()
        pid, self.proc = self.proc.pid, None
        if self.faketime:
            for f in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
                _unlink("/dev/shm/" + f)
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                shmid = f.read().split("\n")[6].split()[1]
        except (OSError, IndexError):
            return
        subprocess.run(["ipcrm", "-m", shmid], capture_output=True)

    def _wait(self, ok, what, timeout=30):
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout} s")
            time.sleep(0.05)
