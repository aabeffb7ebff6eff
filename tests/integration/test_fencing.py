"""Fencing a resource, end to end (docs/client.md, "Fencing a resource").

A holder paused past its lease (SIGSTOP here; a GC pause or a slow disk
for real) wakes up after its successor has written: with the fence
(client/examples/fenced_writer.c, liblease's lease_fence_enter) its late
write is refused; without it (a few lines of Python), the late write
lands after the successor's, which is what the fence is for. The shell
recipe (client/examples/fenced-write.sh) under `leasectl hold`. And,
registered for the PostgreSQL store only, where a server is at hand
(harness.shared_postgres()), the PostgreSQL recipe, its SQL read from
docs/client.md itself: a late write with an old token changes nothing.
"""
import os
import platform
import queue
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import Leased

SCRIPT = os.path.join(harness.ROOT, "client", "examples", "fenced-write.sh")
CLIENT_MD = os.path.join(harness.ROOT, "docs", "client.md")
HELD = 3


def environ(**extra):
    """Our environment without a lease of its own, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LEASE_OWNER", "LEASE_TOKEN")}
    env.update(extra)
    return env


class Process:
    """A child whose stdout lines the test waits for, one by one."""

    def __init__(self, cmd, env):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.seen = []
        self._lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, pattern, timeout=30.0):
        """Waits for a line that matches pattern (whole); its match."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(
                    timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("no line %r after %ss; saw %r"
                                     % (pattern, timeout, self.seen))
            if line is None:
                raise AssertionError(
                    "exited %s before a line %r; saw %r; stderr %r"
                    % (self.proc.wait(), pattern, self.seen,
                       self.proc.stderr.read()))
            self.seen.append(line)
            m = re.fullmatch(pattern, line)
            if m:
                return m

    def finish(self, timeout=30.0):
        """Waits for the exit; (status, every stdout line, stderr)."""
        rc = self.proc.wait(timeout=timeout)
        while True:
            line = self._lines.get(timeout=timeout)
            if line is None:
                break
            self.seen.append(line)
        return rc, self.seen, self.proc.stderr.read()


def fenced_writer(d, session, fence, log):
    """client/examples/fenced_writer.c for a minute (or until SIGTERM)."""
    return Process([os.environ["FENCED_WRITER_BIN"], d.addr, session, fence,
                    log, "60"], environ())


def wait_until(ok, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError("%s: not after %ss" % (what, timeout))
        time.sleep(0.02)


def stopped(pid):
    """Whether pid is stopped (SIGSTOP), as /proc says."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


# The sleeps of a thread: clock_nanosleep, nanosleep, and restart_syscall
# (a sleep resumed after a stop), by machine.
SLEEPS = {"x86_64": {230, 35, 219}, "aarch64": {115, 101, 128}}


def stop_in_work(proc, tries=400):
    """Stops proc (SIGSTOP) in its work: its main thread asleep in the
    100 ms piece that follows its lease check, as /proc/PID/syscall says.
    A stop that lands elsewhere (the check, the write, a printf) is let go
    and tried again a moment later, so that a slow machine only takes more
    tries. Returns the number of tries; fails after `tries`."""
    sleeps = SLEEPS[platform.machine()]
    for n in range(1, tries + 1):
        proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: stopped(proc.pid), "stopped")
        with open("/proc/%d/syscall" % proc.pid) as f:
            if int(f.read().split()[0]) in sleeps:
                return n
        proc.send_signal(signal.SIGCONT)
        time.sleep(random.uniform(0.005, 0.05))
    raise AssertionError("no stop of %d landed in the work" % tries)


def expired(d, session):
    """Whether session's lease has run out, as leased says (admin Get)."""
    c = d.client()
    return lambda: not c.get(session).live


def log_lines(path):
    """LOG's lines as (token, owner, n)."""
    with open(path) as f:
        return [(int(t), o, int(n))
                for t, o, n in (line.split() for line in f)]


def read(path):
    with open(path) as f:
        return f.read()


def paused_holder(d, tmp, session):
    """A holds session and writes twice; then the test stops it (SIGSTOP)
    in a piece of its work (100 ms, its lease checked before it). B takes
    over once A's lease ran out (so A is stopped longer than the TTL by
    construction) and writes; then A goes on, and its late write is
    refused: nothing of A's lands after B's writes."""
    fence = os.path.join(tmp, session + ".fence")
    log = os.path.join(tmp, session + ".log")
    a = fenced_writer(d, session, fence, log)
    token_a = int(a.expect(r"held %s token (\d+)" % session).group(1))
    a.expect("wrote token %d" % token_a)
    a.expect("wrote token %d" % token_a)
    stop_in_work(a.proc)
    wait_until(expired(d, session), "A's lease expired")
    b = fenced_writer(d, session, fence, log)
    token_b = int(b.expect(r"held %s token (\d+)" % session).group(1))
    assert token_b > token_a
    b.expect("wrote token %d" % token_b)
    a.proc.send_signal(signal.SIGCONT)
    rc, out, err = a.finish()
    assert rc == HELD, (rc, out, err)
    assert "refused token %d: a newer holder wrote" % token_a in out, out
    writes = out.count("wrote token %d" % token_a)
    b.proc.terminate()  # SIGTERM: B stops and releases
    rc, out, err = b.finish()
    assert rc == 0, (rc, out, err)
    # LOG: A's two lines, then only B's; the fence has B's token.
    lines = log_lines(log)
    tokens = [t for t, _, _ in lines]
    first_b = tokens.index(token_b)
    assert tokens[:first_b] == [token_a] * writes, lines
    assert token_a not in tokens[first_b:], lines
    assert [n for t, _, n in lines if t == token_b] == \
        list(range(1, len(lines) - 1)), lines
    assert read(fence) == "%020d\n" % token_b
    # B released on its way out: the next owner gets it at once, with a
    # greater token (token_b + 1, or more once a collection of another
    # try's session raised the floor).
    assert d.client().acquire(session, "next").token > token_b


def test_a_paused_holder_is_fenced():
    with Leased(ttl="2s") as d, tempfile.TemporaryDirectory() as tmp:
        time.sleep(2.1)  # past the restart quarantine
        paused_holder(d, tmp, "doc")


UNFENCED_WRITER = """
import os, signal, sys
def append(n):
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.write(fd, ("%s unfenced %d\\n" % (sys.argv[2], n)).encode())
    os.close(fd)
append(1)
os.kill(os.getpid(), signal.SIGSTOP)  # paused, its lease checked
append(2)
"""


def test_without_the_fence_the_paused_holder_writes_late():
    """The scenario above with a writer that does not enter the fence:
    the late write really happens, and lands after B's writes."""
    with Leased(ttl="2s") as d, tempfile.TemporaryDirectory() as tmp:
        time.sleep(2.1)  # past the restart quarantine
        fence, log = os.path.join(tmp, "fence"), os.path.join(tmp, "log")
        token_a = d.client().acquire("doc", "unfenced").token
        a = subprocess.Popen([sys.executable, "-c", UNFENCED_WRITER, log,
                              str(token_a)])
        wait_until(lambda: stopped(a.pid), "A stopped")
        assert log_lines(log) == [(token_a, "unfenced", 1)]
        wait_until(expired(d, "doc"), "A's lease expired")
        b = fenced_writer(d, "doc", fence, log)
        token_b = int(b.expect(r"held doc token (\d+)").group(1))
        assert token_b > token_a
        b.expect("wrote token %d" % token_b)
        a.send_signal(signal.SIGCONT)
        assert a.wait(timeout=30) == 0
        b.proc.terminate()
        rc, out, err = b.finish()
        assert rc == 0, (rc, out, err)
        tokens = [t for t, _, _ in log_lines(log)]
        first_b = tokens.index(token_b)
        assert token_a in tokens[first_b:], tokens  # the late write
        assert read(fence) == "%020d\n" % token_b  # A never looked


def test_the_shell_recipe_under_leasectl_hold():
    with Leased(ttl="5s") as d, tempfile.TemporaryDirectory() as tmp:
        fence, log = os.path.join(tmp, "fence"), os.path.join(tmp, "log")
        write = ["/bin/sh", SCRIPT, fence, "sh", "-c",
                 'echo "$LEASE_TOKEN" >> %s' % shlex.quote(log)]
        hold = [os.environ["LEASECTL_BIN"], "--url", d.addr, "hold", "doc",
                "--"] + write
        for token in (1, 2):  # each hold a new owner: the token rises
            p = subprocess.run(hold, capture_output=True, text=True,
                               timeout=30, env=environ())
            assert p.returncode == 0, (p.returncode, p.stderr)
            assert read(fence) == "%020d\n" % token
        assert read(log) == "1\n2\n"
        # A stale token, given by hand: refused, nothing written.
        p = subprocess.run(write, capture_output=True, text=True, timeout=30,
                           env=environ(LEASE_TOKEN="1"))
        assert p.returncode == HELD, (p.returncode, p.stderr)
        assert p.stderr == ("fenced-write.sh: token 1 is older than token 2,"
                            " which has written through %s\n" % fence)
        assert read(log) == "1\n2\n"
        assert read(fence) == "%020d\n" % 2


# ---- The PostgreSQL recipe ---------------------------------------------


def recipe_sql():
    """The statements of docs/client.md's PostgreSQL recipe, by their
    first words ("CREATE TABLE documents", "INSERT INTO fences", ...):
    the test runs what the documentation says."""
    with open(CLIENT_MD) as f:
        text = f.read()
    section = text.split("\n## Fencing a resource\n", 1)[1].split("\n## ")[0]
    sql = "\n".join(re.findall(r"```sql\n(.*?)```", section, re.S))
    sql = re.sub(r"--[^\n]*", "", sql)
    statements = {}
    for s in (" ".join(s.split()) for s in sql.split(";")):
        if s:
            statements[" ".join(s.split()[:3])] = s
    return statements


def psql_tags(server, db, sql):
    """Runs sql with psql on db, command tags and all (pg.Postgres.psql
    leaves them out): its output lines."""
    import pg
    r = subprocess.run(
        [pg.BIN + "/psql", "-X", "-w", "-A", "-t", "-v", "ON_ERROR_STOP=1",
         "-d", server.conninfo(dbname=db, host=server.dir)],
        input=sql, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("PG")})
    assert r.returncode == 0, (sql, r.stderr)
    return r.stdout.splitlines()


def fenced_transaction(sql, session, token, writes, wait_for=None):
    """A psql script of the recipe's transaction: enter the session's
    fence row with token; no row back: ROLLBACK; else writes, COMMIT. It
    prints "committed" or "rolled back". wait_for: a file it waits for
    before COMMIT (after touching wait_for + ".inside"). psql's \\if
    needs a value, so the documented statement runs inside a count."""
    enter = sql["INSERT INTO fences"].replace("$1", "'%s'" % session) \
        .replace("$2", str(token))
    wait = ""
    if wait_for is not None:
        wait = ("\\! touch %s.inside\n"
                "\\! while [ ! -e %s ]; do sleep 0.02; done\n"
                % (wait_for, wait_for))
    return ("BEGIN;\n"
            "WITH fence AS (%s) SELECT count(*) AS fenced FROM fence \\gset\n"
            "\\if :fenced\n%s\n%sCOMMIT;\nSELECT 'committed';\n"
            "\\else\nROLLBACK;\nSELECT 'rolled back';\n\\endif\n"
            % (enter, writes, wait))


def test_the_postgresql_recipe():
    sql = recipe_sql()
    for key in ("CREATE TABLE documents", "INSERT INTO documents",
                "CREATE TABLE fences", "INSERT INTO fences"):
        assert key in sql, (key, sorted(sql))
    server = harness.shared_postgres()
    db = "fencing_%d" % os.getpid()
    server.psql("CREATE DATABASE %s" % db)
    psql_tags(server, db, "%s;\n%s;\n" % (sql["CREATE TABLE documents"],
                                          sql["CREATE TABLE fences"]))
    server.psql("CREATE TABLE pages (id text PRIMARY KEY, body text)",
                dbname=db)

    # One conditional statement per write.
    def put(body, token):
        out = psql_tags(server, db,
                        "PREPARE put(text, text, bigint) AS %s;\n"
                        "EXECUTE put('doc', '%s', %d);\n"
                        % (sql["INSERT INTO documents"], body, token))
        assert out[0] == "PREPARE", out
        return out[1]

    def document():
        return server.psql("SELECT body, token FROM documents "
                           "WHERE id = 'doc'", dbname=db)

    assert put("one", 1) == "INSERT 0 1" and document() == "one|1"
    assert put("two", 2) == "INSERT 0 1" and document() == "two|2"
    assert put("late", 1) == "INSERT 0 0"  # stale: 0 rows
    assert document() == "two|2"
    assert put("two again", 2) == "INSERT 0 1"  # the same holder
    assert document() == "two again|2"

    # Several writes of one session in one transaction, behind its
    # fence row.
    def writes(tag):
        return ("INSERT INTO pages VALUES ('p1', '%s'), ('p2', '%s') "
                "ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body;"
                % (tag, tag))

    def pages():
        return server.psql("SELECT string_agg(id || '=' || body, ' ' "
                           "ORDER BY id) FROM pages", dbname=db)

    def run(session, token, tag):
        return psql_tags(server, db,
                         fenced_transaction(sql, session, token, writes(tag)))

    assert run("s", 1, "t1")[-1] == "committed" and pages() == "p1=t1 p2=t1"
    assert run("s", 2, "t2")[-1] == "committed" and pages() == "p1=t2 p2=t2"
    assert run("s", 1, "late")[-1] == "rolled back"
    assert pages() == "p1=t2 p2=t2"
    assert server.psql("SELECT token FROM fences WHERE session = 's'",
                       dbname=db) == "2"

    # Concurrently: token 1 comes while token 2's transaction is open. It
    # waits for the fence row, which token 2 then commits: refused.
    # (Alone, on this new session, token 1 would have gone through.)
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")
        results = {}

        def transaction(token, **kw):
            script = fenced_transaction(sql, "c", token,
                                        writes("c%d" % token), **kw)
            results[token] = psql_tags(server, db, script)[-1]

        t2 = threading.Thread(target=transaction, args=(2,),
                              kwargs={"wait_for": go})
        t2.start()
        wait_until(lambda: os.path.exists(go + ".inside"),
                   "token 2 inside its transaction")
        t1 = threading.Thread(target=transaction, args=(1,))
        t1.start()
        wait_until(lambda: server.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' "
            "AND wait_event_type = 'Lock'" % db) == "1",
            "token 1 waiting for the fence row")
        open(go, "w").close()
        t2.join(60)
        t1.join(60)
        assert results == {2: "committed", 1: "rolled back"}, results
        assert pages() == "p1=c2 p2=c2"


# Registered for the PostgreSQL store only (tests/integration/meson.build
# lists the cases with LEASED_TEST_STORE set): it needs no leased, and
# there a PostgreSQL server is at hand.
if os.environ.get("LEASED_TEST_STORE") != "postgres":
    del test_the_postgresql_recipe

harness.main(globals())
