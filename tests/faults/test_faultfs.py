"""Tests of libfaultfs and faultfs-restore (tests/faults/faultfs.c).

Each case starts this file again as a child python3 (`--child`) under
LD_PRELOAD=$FAULTFS_LIB, with FAULTFS_DIR, FAULTFS_CTL and
FAULTFS_UNDO_DIR in a temporary directory. The child runs file commands
read from stdin, one reply line each, so that a case can change the
control file between two calls and see the effect on the running process,
and can kill the child where it wants (the "power loss"); then it runs
$FAULTFS_RESTORE and compares bytes.

`python3 test_faultfs.py --list` lists the cases; `python3 test_faultfs.py
CASE` runs one (meson registers one test per case, named faultfs/CASE).
"""
import errno
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import cases  # noqa: E402
PYTHON = "/usr/bin/python3"
HEADER = 48  # sizeof(struct faultfs_log_header), faultfs.h


def lib():
    return os.environ["FAULTFS_LIB"]


def preload_for(binary):
    """LD_PRELOAD for running `binary` under the shim: an ASan runtime
    insists on coming first, so a binary linked with one gets it before
    libfaultfs.so (whose calls then reach libc through ASan's
    interceptors)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan.so") and len(parts) > 2:
            return parts[2] + ":" + lib()
    return lib()


def data(spec):
    """The bytes a command's DATA token stands for: rnd:SEED:N (N random
    bytes), pat:C:N (N times C), or the token itself."""
    if spec.startswith("rnd:"):
        _, seed, n = spec.split(":")
        return random.Random(int(seed)).randbytes(int(n))
    if spec.startswith("pat:"):
        _, c, n = spec.split(":")
        return c.encode() * int(n)
    return spec.encode()


# ---- the child: file commands under the shim ----

def child():
    fds = {}
    threads = {}
    flags = {"rdwr": os.O_RDWR, "rdonly": os.O_RDONLY,
             "wronly": os.O_WRONLY, "append": os.O_WRONLY | os.O_APPEND}

    def run(cmd, args):
        if cmd == "open":  # open KEY PATH [rdwr|rdonly|wronly|append]
            mode = flags[args[2] if len(args) > 2 else "rdwr"]
            if mode != os.O_RDONLY:
                mode |= os.O_CREAT
            fds[args[0]] = os.open(args[1], mode, 0o644)
        elif cmd == "opendir":
            fds[args[0]] = os.open(args[1], os.O_RDONLY | os.O_DIRECTORY)
        elif cmd == "close":
            os.close(fds.pop(args[0]))
        elif cmd == "write":
            return os.write(fds[args[0]], data(args[1]))
        elif cmd == "pwrite":
            return os.pwrite(fds[args[0]], data(args[2]), int(args[1]))
        elif cmd == "truncate":
            os.ftruncate(fds[args[0]], int(args[1]))
        elif cmd == "fsync":
            os.fsync(fds[args[0]])
        elif cmd == "fdatasync":
            os.fdatasync(fds[args[0]])
        elif cmd == "sync_start":  # fdatasync on a thread of its own
            entered = threading.Event()
            result = []

            def sync(fd=fds[args[0]]):
                entered.set()
                try:
                    os.fdatasync(fd)
                    result.append("ok")
                except OSError as e:
                    result.append(errno.errorcode[e.errno])

            t = threading.Thread(target=sync)
            t.start()
            entered.wait()
            time.sleep(0.05)  # well inside the shim's fdatasync by now
            threads[args[0]] = (t, result)
        elif cmd == "sync_join":
            t, result = threads.pop(args[0])
            t.join()
            return result[0]
        elif cmd == "unlink":
            os.unlink(args[0])
        elif cmd == "unlinkat":  # unlinkat DIR NAME
            dfd = os.open(args[0], os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.unlink(args[1], dir_fd=dfd)
            finally:
                os.close(dfd)
        elif cmd == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            raise ValueError("unknown command %r" % cmd)
        return ""

    for line in sys.stdin:
        cmd, *args = line.split()
        start = time.monotonic()
        try:
            res = "ok %s" % run(cmd, args)
        except OSError as e:
            res = "err %s" % errno.errorcode.get(e.errno, e.errno)
        print("%s %.3f" % (res.strip(), time.monotonic() - start),
              flush=True)


def child_sqlite(db, checkpoint):
    """Like storage/sqlite.c: WAL, synchronous=NORMAL, its own descriptor
    of the WAL for fdatasync. Rows 1..10 are synced, 11..20 only
    committed; then kill -9. With checkpoint, rows 1..5 are checkpointed
    into the database (and the WAL truncated) first."""
    con = sqlite3.connect(db, isolation_level=None)
    assert con.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    con.execute("PRAGMA synchronous = NORMAL")
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    for i in range(1, 11):
        con.execute("INSERT INTO t VALUES(?, ?)", (i, "row %d" % i * 50))
        if i == 5 and checkpoint:
            busy, _, _ = con.execute(
                "PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            assert busy == 0
            assert os.path.getsize(db + "-wal") == 0
    wal = os.open(db + "-wal", os.O_RDONLY)
    os.fdatasync(wal)
    for i in range(11, 21):
        con.execute("INSERT INTO t VALUES(?, ?)", (i, "row %d" % i * 50))
    os.kill(os.getpid(), signal.SIGKILL)


# ---- the runner's side ----

class ChildDied(Exception):
    pass


class Box:
    """A temporary directory with data/ (FAULTFS_DIR), outside/ (not
    affected), undo/ (FAULTFS_UNDO_DIR) and the control file ctl."""

    def __init__(self, ctl=None):
        self.root = tempfile.mkdtemp(prefix="faultfs-test-")
        self.dir = os.path.join(self.root, "data")
        self.outside = os.path.join(self.root, "outside")
        self.undo = os.path.join(self.root, "undo")
        self.ctl = os.path.join(self.root, "ctl")
        os.mkdir(self.dir)
        os.mkdir(self.outside)
        if ctl is not None:
            self.set(ctl)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def set(self, text):
        """Replaces the control file whole, as a test runner should."""
        tmp = self.ctl + ".new"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, self.ctl)

    def env(self, faultfs_dir=True, undo=True):
        env = dict(os.environ, LD_PRELOAD=lib(), FAULTFS_CTL=self.ctl)
        for k in ("FAULTFS_DIR", "FAULTFS_UNDO_DIR"):
            env.pop(k, None)
        if faultfs_dir:
            env["FAULTFS_DIR"] = self.dir
        if undo:
            env["FAULTFS_UNDO_DIR"] = self.undo
        return env

    def child(self, **kw):
        return Child(self.env(**kw))

    def logs(self):
        """{file name: size} of the undo logs."""
        if not os.path.isdir(self.undo):
            return {}
        return {n: os.path.getsize(os.path.join(self.undo, n))
                for n in os.listdir(self.undo)}

    def log_size(self, name):
        st = os.stat(self.path(name))
        log = "%016x-%016x.undo" % (st.st_dev, st.st_ino)
        return self.logs().get(log)

    def restore(self):
        r = subprocess.run([os.environ["FAULTFS_RESTORE"], self.undo],
                           capture_output=True, text=True, timeout=30)
        print(r.stdout + r.stderr, end="")
        assert r.returncode == 0, r.returncode
        assert not any(n.endswith(".undo") for n in self.logs()), self.logs()
        return r.stdout

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()


class Child:
    """A child python3 under the shim, running commands (see child())."""

    def __init__(self, env):
        self.proc = subprocess.Popen(
            [PYTHON, os.path.abspath(__file__), "--child"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def do(self, line):
        """Runs one command: (reply, seconds it took)."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise ChildDied(self.proc.wait(timeout=10))
        *words, secs = reply.split()
        return " ".join(words), float(secs)

    def ok(self, line):
        reply, secs = self.do(line)
        assert reply.startswith("ok"), "%s: %s" % (line, reply)
        return secs

    def err(self, line, code):
        reply, secs = self.do(line)
        want = "err " + errno.errorcode[code]
        assert reply == want, "%s: %s, want %s" % (line, reply, want)
        return secs

    def killed(self, line="kill"):
        """Runs a command that must kill the child with SIGKILL."""
        try:
            reply = self.do(line)
        except ChildDied as e:
            assert e.args[0] == -signal.SIGKILL, e.args[0]
            return
        raise AssertionError("%s: %s, want death by SIGKILL" % (line, reply))

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            assert self.proc.wait(timeout=10) == 0
        self.proc.stdout.close()


# ---- faults ----

def test_fsync_eio():
    with Box("fsync_eio") as b:
        os.mkdir(b.path("sub"))
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a hello")
        c.err("fsync a", errno.EIO)
        c.err("fdatasync a", errno.EIO)
        c.ok("open s %s" % b.path("sub/s"))
        c.err("fdatasync s", errno.EIO)  # anywhere under the directory
        # Not affected: another directory, -shm files, directories.
        c.ok("open o %s/o" % b.outside)
        c.ok("write o x")
        c.ok("fsync o")
        c.ok("open shm %s" % b.path("a-shm"))
        c.ok("write shm x")
        c.ok("fsync shm")
        c.ok("opendir d %s" % b.dir)
        c.ok("fsync d")
        c.close()


def test_nothing_without_faultfs_dir():
    with Box("fsync_eio\nwrite_eio\nwrite_enospc\nkill_in_fsync 1\n"
             "fsync_delay_ms 2000") as b:
        c = b.child(faultfs_dir=False)
        c.ok("open a %s" % b.path("a"))
        c.ok("write a pat:a:100")
        c.ok("pwrite a 0 b")
        c.ok("truncate a 1000")
        assert c.ok("fsync a") < 1.5
        assert c.ok("fdatasync a") < 1.5
        c.ok("unlink %s" % b.path("a"))
        c.close()
        assert not os.path.exists(b.undo)  # not even its undo directory


def test_fsync_delay():
    with Box("fsync_delay_ms 500") as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a x")
        assert c.ok("fsync a") >= 0.5
        assert c.ok("fdatasync a") >= 0.5
        c.ok("open o %s/o" % b.outside)
        assert c.ok("fdatasync o") < 0.4  # clean: returns at once
        c.close()


def test_fsync_delay_then_eio():
    with Box("fsync_delay_ms 300\nfsync_eio") as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a x")
        assert c.err("fdatasync a", errno.EIO) >= 0.3
        c.close()


def test_write_enospc():
    with Box() as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("open ap %s append" % b.path("a"))
        c.ok("write a pat:a:100")
        b.set("write_enospc")
        c.err("write a x", errno.ENOSPC)  # at 100: would grow the file
        c.err("write ap x", errno.ENOSPC)
        c.err("pwrite a 95 pat:c:10", errno.ENOSPC)
        c.err("truncate a 200", errno.ENOSPC)
        c.ok("pwrite a 10 pat:b:10")  # in place: no new space needed
        c.ok("truncate a 50")
        c.ok("open o %s/o" % b.outside)
        c.ok("write o pat:o:100")
        c.close()
        assert b.read("a") == b"a" * 10 + b"b" * 10 + b"a" * 30


def test_write_eio():
    with Box() as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a pat:a:100")
        b.set("write_eio")
        c.err("pwrite a 10 pat:b:10", errno.EIO)  # in place too
        c.err("write a x", errno.EIO)
        c.err("truncate a 200", errno.EIO)
        c.ok("truncate a 50")  # shrinking writes nothing
        c.close()
        assert b.read("a") == b"a" * 50


def test_kill_in_fsync():
    with Box("kill_in_fsync 1") as b:
        c = b.child()
        c.ok("open o %s/o" % b.outside)
        c.ok("fsync o")
        c.ok("opendir d %s" % b.dir)
        c.ok("fsync d")
        c.ok("open a %s" % b.path("a"))
        c.ok("write a x")
        c.killed("fdatasync a")


def test_kill_in_fsync_is_random():
    with Box("kill_in_fsync 0.5") as b:
        survived = []
        for i in range(20):
            c = b.child()
            c.ok("open a %s" % b.path("a%d" % i))
            n = 0
            try:
                while n < 64:
                    c.ok("fsync a")
                    n += 1
            except ChildDied as e:
                assert e.args[0] == -signal.SIGKILL, e.args[0]
            else:
                raise AssertionError("64 syncs at P=0.5 without a kill")
            survived.append(n)
        print("syncs survived: %s" % survived)
        assert max(survived) >= 1
        assert len(set(survived)) > 1  # seeded per process


def test_control_changes_while_running():
    with Box() as b:  # no control file yet: no faults
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a x")
        c.ok("fsync a")
        b.set("fsync_eio")
        c.err("fsync a", errno.EIO)
        b.set("# all off")
        c.ok("fsync a")
        b.set("fsync_delay_ms 200")
        assert c.ok("fsync a") >= 0.2
        with open(b.ctl, "w") as f:  # in place: same inode, new size
            f.write("fsync_eio\n")
        c.err("fsync a", errno.EIO)
        os.unlink(b.ctl)
        c.ok("fsync a")
        b.set("bogus\nfsync_delay_ms soon\nkill_in_fsync 2\n"
              "fsync_eio   # with a comment")
        assert c.err("fsync a", errno.EIO) < 0.2  # only the valid line
        c.close()


# ---- the power-loss simulation ----

def test_power_loss_plain_files():
    with Box() as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a rnd:1:10000")
        c.ok("fsync a")
        c.ok("open w %s append" % b.path("w"))  # write-only, O_APPEND
        c.ok("write w rnd:2:3000")
        c.ok("fdatasync w")
        # Nothing below is synced.
        c.ok("pwrite a 1000 rnd:3:3000")
        c.ok("write a rnd:4:5000")  # appends at 10000
        c.ok("truncate a 12000")
        c.ok("truncate a 20000")
        c.ok("pwrite a 30000 tail")  # a hole, then 4 bytes
        c.ok("write w rnd:5:700")
        c.ok("open n %s" % b.path("n"))  # never synced
        c.ok("write n rnd:6:100")
        c.killed()
        assert len(b.read("a")) == 30004
        assert len(b.read("w")) == 3700
        b.restore()
        assert b.read("a") == data("rnd:1:10000")
        assert b.read("w") == data("rnd:2:3000")
        assert b.read("n") == b""  # its name stays: metadata is not undone


def test_writes_during_a_sync_stay_undoable():
    with Box("fsync_delay_ms 1000") as b:  # room for a write inside it
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a rnd:1:4096")
        c.ok("fsync a")
        assert b.log_size("a") == HEADER + len(b.path("a"))
        c.ok("pwrite a 0 pat:B:100")  # before the sync: it covers this
        c.ok("sync_start a")
        c.ok("pwrite a 200 pat:C:100")  # while it sleeps: it may not cover
        reply, secs = c.do("sync_join a")
        assert reply == "ok ok", reply
        # The sync dropped B's record, kept C's.
        assert b.log_size("a") > HEADER + len(b.path("a")) + 100
        c.killed()
        b.restore()
        want = bytearray(data("rnd:1:4096"))
        want[0:100] = b"B" * 100
        assert b.read("a") == bytes(want)


def test_undo_log_compacted_when_syncs_always_overlap_writes():
    """As in leased under load: every sync overlaps the next write, so
    the log never empties; its dead records are compacted away."""
    k = 65536
    with Box("fsync_delay_ms 200") as b:  # the write lands inside it
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a rnd:1:%d" % (16 * k))
        c.ok("fsync a")
        want = bytearray(data("rnd:1:%d" % (16 * k)))
        sizes = []
        for i in range(24):
            before, during = "rnd:%d:%d" % (100 + i, k), "rnd:%d:%d" % (
                200 + i, k)
            c.ok("pwrite a %d %s" % (i % 16 * k, before))
            want[i % 16 * k:(i % 16 + 1) * k] = data(before)
            c.ok("sync_start a")
            c.ok("pwrite a %d %s" % ((i + 5) % 16 * k, during))
            reply, _ = c.do("sync_join a")
            assert reply == "ok ok", reply
            sizes.append(b.log_size("a"))
            if i < 23:  # the next sync covers it; the last one, none
                want[(i + 5) % 16 * k:((i + 5) % 16 + 1) * k] = data(during)
        print("log sizes: %s" % sizes)
        assert max(sizes) < (1 << 20) + 3 * (k + 40) + 4096, max(sizes)
        assert min(sizes[12:]) < 3 * (k + 40) + 4096  # compacted
        c.killed()
        b.restore()
        assert b.read("a") == bytes(want)


def test_failed_sync_drops_nothing():
    with Box() as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a rnd:1:5000")
        c.ok("fsync a")
        c.ok("pwrite a 0 pat:B:100")
        b.set("fsync_eio")
        c.err("fdatasync a", errno.EIO)
        b.set("")
        c.killed()
        b.restore()
        assert b.read("a") == data("rnd:1:5000")


def test_sync_through_another_descriptor():
    """store_sync() fdatasyncs the WAL through a read-only descriptor of
    its own, while SQLite writes through another."""
    with Box() as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("open r %s rdonly" % b.path("a"))
        c.ok("write a rnd:1:5000")
        c.ok("fdatasync r")
        c.ok("pwrite a 0 pat:B:100")
        c.killed()
        b.restore()
        assert b.read("a") == data("rnd:1:5000")


def test_undo_log_kept_small_and_deleted_with_its_file():
    with Box() as b:
        c = b.child()
        empty = HEADER + len(b.path("a"))
        c.ok("open a %s" % b.path("a"))
        c.ok("write a pat:x:5000")
        assert b.log_size("a") > empty
        c.ok("fsync a")
        assert b.log_size("a") == empty
        c.ok("pwrite a 0 pat:y:5000")
        assert b.log_size("a") > empty + 5000
        c.ok("fdatasync a")
        assert b.log_size("a") == empty
        c.ok("write a more")
        c.ok("unlink %s" % b.path("a"))
        c.ok("open z %s" % b.path("z"))
        c.ok("write z zzz")
        c.ok("unlinkat %s z" % b.dir)
        assert b.logs() == {}, b.logs()
        c.close()


def test_recreated_file_is_not_restored():
    with Box() as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a old")
        c.killed()
        # Another inode under the same name, made without the shim.
        with open(b.path("a.new"), "wb") as f:
            f.write(b"fresh")
        os.replace(b.path("a.new"), b.path("a"))
        out = b.restore()
        assert "skipped" in out, out
        assert b.read("a") == b"fresh"


def test_restarted_writer_continues_the_log():
    with Box() as b:
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("write a rnd:1:5000")
        c.ok("fsync a")
        c.ok("pwrite a 0 pat:B:100")
        c.killed()  # and no power loss yet: B is in the page cache
        c = b.child()
        c.ok("open a %s" % b.path("a"))
        c.ok("pwrite a 100 pat:C:100")
        c.ok("fsync a")  # covers B and C
        c.ok("pwrite a 200 pat:D:100")
        c.killed()
        b.restore()
        want = bytearray(data("rnd:1:5000"))
        want[0:200] = b"B" * 100 + b"C" * 100
        assert b.read("a") == bytes(want)


# ---- SQLite ----

def sqlite_crash(b, checkpoint=False):
    """Runs child_sqlite under the shim; returns the database's path."""
    db = b.path("test.db")
    r = subprocess.run(
        [PYTHON, os.path.abspath(__file__), "--child-sqlite", db,
         "1" if checkpoint else "0"],
        env=b.env(), capture_output=True, text=True, timeout=30)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert os.path.getsize(db + "-wal") > 0
    return db


def rows(db):
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        got = [r[0] for r in con.execute("SELECT id FROM t ORDER BY id")]
        for i, v in con.execute("SELECT id, v FROM t"):
            assert v == "row %d" % i * 50
        return got
    finally:
        con.close()


def test_sqlite_power_loss_keeps_the_synced_rows():
    with Box() as b:
        db = sqlite_crash(b)
        b.restore()
        assert not os.path.exists(db + "-shm")
        assert rows(db) == list(range(1, 11))


def test_sqlite_without_restore_keeps_every_row():
    """The other half of the case above: the kill alone loses nothing,
    so the rows that went there were taken by the restore."""
    with Box() as b:
        db = sqlite_crash(b)
        assert rows(db) == list(range(1, 21))


def test_sqlite_power_loss_after_a_checkpoint():
    """Rows 1..5 checkpointed into the database (written and synced) and
    the WAL truncated (ftruncate): the restore undoes neither."""
    with Box() as b:
        db = sqlite_crash(b, checkpoint=True)
        shutil.copytree(b.dir, os.path.join(b.root, "copy"))
        b.restore()
        assert rows(db) == list(range(1, 11))
        assert rows(os.path.join(b.root, "copy", "test.db")) == \
            list(range(1, 21))


# ---- leased ----

def test_leased_sync_failure_then_power_loss():
    """The real daemon under the shim (with ASan's runtime first in a
    sanitized build): a takeover is synced; then fsync fails, leased
    exits (mode_embedded.c: a failed sync is fatal), and the restore takes back
    the takeover it committed but never synced."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
    import harness
    with Box("") as b:
        env = b.env()
        env["LD_PRELOAD"] = preload_for(harness.leased_bin())
        # LeakSanitizer's report at a fatal exit is not what this tests.
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + \
            ":detect_leaks=0"
        d = harness.Leased(data_dir=b.dir, ttl="30s", env=env)
        with d:
            c = d.client()
            c.acquire("synced", "A")
            b.set("fsync_eio")
            code = harness.status_of(c.acquire, "lost", "B")
            assert code != harness.grpc.StatusCode.OK, code
            assert d.proc.wait(timeout=10) != 0
            log = d.log_text()
        assert "sync" in log, log

        def owners(db):
            con = sqlite3.connect(db)
            try:
                assert con.execute(
                    "PRAGMA integrity_check").fetchone()[0] == "ok"
                return dict(con.execute(
                    "SELECT session_id, owner FROM leases"))
            finally:
                con.close()

        shutil.copytree(b.dir, os.path.join(b.root, "copy"))
        b.restore()
        assert owners(b.path("leased.db")) == {"synced": "A"}
        assert owners(os.path.join(b.root, "copy", "leased.db")) == \
            {"synced": "A", "lost": "B"}


def main():
    if sys.argv[1:] == ["--child"]:
        return child()
    if sys.argv[1:2] == ["--child-sqlite"]:
        return child_sqlite(sys.argv[2], sys.argv[3] == "1")
    cases.main(globals(), strip=True)


if __name__ == "__main__":
    main()
