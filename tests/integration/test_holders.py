"""One actor at a time, end to end: `leasectl hold` stops its command
before leased could grant the session to anyone else, whatever fails (the
daemon stopped, the network between them silent, leasectl itself killed),
and learns the TTL from leased without comparing clocks. Run over SQLite
and over PostgreSQL (LEASED_TEST_STORE), where a competitor asks another
replica, as it would in production.

When a command ends is seen from outside, at once: a pidfd of its process
polls readable when it exits. When leased granted a competitor its lease
is the competitor's expiry less the TTL (a takeover's expiry is its
decision time plus the TTL, on leased's clock: this host's wall clock).
"""
import os
import re
import select
import signal
import subprocess
import tempfile
import threading
import time

import grpc
import harness
from harness import Leased
from relay import Relay

TTL = 3.0  # s: short enough for the test, long enough for a loaded CI
RUNS = 3  # of each race, in different phases of the renewals


def leasectl(url, *args, **kw):
    return subprocess.Popen([os.environ["LEASECTL_BIN"], "--url", url]
                            + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


class Death:
    """Watches process pid (which must be running) from a thread: .at is
    the wall-clock time it ended, seen at once through a pidfd, or None
    while it runs."""

    def __init__(self, pid):
        self.fd = os.pidfd_open(pid)
        self.at = None
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        p.poll()
        self.at = time.time()
        os.close(self.fd)

    def wait(self, timeout):
        """The time it ended, or None if it still runs after timeout s."""
        self.thread.join(timeout)
        return self.at


def wait_gone(pid, timeout):
    """Waits until process pid has ended (now or within timeout seconds);
    whether it did."""
    try:
        return Death(pid).wait(timeout) is not None
    except ProcessLookupError:
        return True


def read_pid(path, timeout=20.0):
    """The pid a command wrote to path once it runs (a test's event)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return int(text)
        except FileNotFoundError:
            pass
        assert time.monotonic() < deadline, "no pid in %s" % path
        time.sleep(0.01)


def wall(ts):
    return ts.seconds + ts.nanos / 1e9


def hold_running(url, session, tmp):
    """Starts `leasectl hold` of session (through url) running a command
    that ignores SIGTERM, so that only hold's SIGKILL at the deadline ends
    it (the latest a command may run); returns (hold process, the
    command's Death) once the command runs, that is once the lease is
    held."""
    pidfile = os.path.join(tmp, session + ".pid")
    p = leasectl(url, "hold", session, "--owner", "holder", "--", "sh", "-c",
                 'trap "" TERM; echo $$ > "$1"; exec sleep 300', "sh",
                 pidfile)
    return p, Death(read_pid(pidfile))


def replica(d):
    """A second leased beside d: over PostgreSQL, another replica of the
    same database; over SQLite there is only d."""
    if d.postgres is None:
        return None
    return Leased(ttl="%ds" % TTL, postgres=d.postgres).start()


def test_grants_say_the_ttl():
    """OK Acquire and Renew carry leased-ttl-ms; Release and a refusal do
    not; a client that ignores it gets the same reply as ever."""
    with Leased(ttl="3s") as d:
        c = d.client()
        acquire = c.channel.unary_unary(
            harness.SERVICE + "Acquire",
            harness.pb.AcquireRequest.SerializeToString,
            harness.pb.LeaseResponse.FromString)
        renew = c.channel.unary_unary(
            harness.SERVICE + "Renew",
            harness.pb.RenewRequest.SerializeToString,
            harness.pb.LeaseResponse.FromString)
        resp, call = acquire.with_call(
            harness.pb.AcquireRequest(session_id="t", owner="a"), timeout=5)
        assert ("leased-ttl-ms", "3000") in call.initial_metadata(), \
            call.initial_metadata()
        granted = resp.lease
        resp, call = renew.with_call(
            harness.pb.RenewRequest(lease=resp.lease), timeout=5)
        assert ("leased-ttl-ms", "3000") in call.initial_metadata()
        try:
            acquire.with_call(harness.pb.AcquireRequest(session_id="t",
                                                        owner="b"),
                              timeout=5)
            raise AssertionError("b got a's lease")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "leased-ttl-ms" not in dict(e.initial_metadata())
        release = c.channel.unary_unary(
            harness.SERVICE + "Release",
            harness.pb.ReleaseRequest.SerializeToString,
            harness.pb.ReleaseResponse.FromString)
        _, call = release.with_call(
            harness.pb.ReleaseRequest(lease=resp.lease), timeout=5)
        assert "leased-ttl-ms" not in dict(call.initial_metadata())
        # The takeover's audit line says the expiry granted, as the log
        # writes times: the reply's, to the millisecond.
        e = granted.expiry
        expires = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(e.seconds)) \
            + ".%03dZ" % (e.nanos // 1000000)
        d.wait_log(r'msg=takeover identity="" session="t" owner="a" '
                   r'token=1 expires=%s\n' % re.escape(expires))


def test_a_stalled_daemon_cannot_outlast_the_command():
    """leased stopped (SIGSTOP) while hold holds: the command is killed
    before leased's expiry of the lease (its last renewal plus the TTL,
    as leased says once it runs again), in every run, whatever the
    phase of the renewals when leased stops."""
    with Leased(ttl="%ds" % TTL) as d, tempfile.TemporaryDirectory() as tmp:
        margins = []
        for run in range(RUNS):
            session = "stall-%d" % run
            p, death = hold_running(d.addr, session, tmp)
            time.sleep(run * TTL / 3 / RUNS)  # a different phase each run
            before = wall(d.client().get(session).expiry)
            d.proc.send_signal(signal.SIGSTOP)
            try:
                gone = death.wait(3 * TTL)
            finally:
                d.proc.send_signal(signal.SIGCONT)
            assert gone is not None, "the command outlived 3 TTLs"
            # Asked at once: a TTL after the expiry, leased may collect it.
            try:
                expiry = wall(d.client().get(session).expiry)
            except grpc.RpcError as e:
                # hold released the lease once its command was gone (its
                # keeper had not yet called it lost), and leased, running
                # again, took the release first: its expiry was at least
                # the one it had just before it stopped (a renewal may
                # have come between), so the margin is, if anything,
                # understated.
                assert e.code() == grpc.StatusCode.NOT_FOUND, e
                expiry = before
            margins.append(expiry - gone)
            rc = p.wait(timeout=30)
            err = p.stderr.read()
            assert rc == 128 + signal.SIGKILL, (rc, err)
            assert "no renewal of %s in time" % session in err, err
        print("the command gone before leased's expiry by (s):", margins)
        assert min(margins) > 0, margins


def test_a_partition_stops_the_command_before_a_competitor_gets_in():
    """hold's connection goes silent (a relay cut), leased stays up, and
    a competitor asks it (over PostgreSQL: another replica) every 5 ms:
    the command is gone before the competitor is granted the session, in
    every run, with hold's default --grace."""
    with Leased(ttl="%ds" % TTL) as d, tempfile.TemporaryDirectory() as tmp:
        other = replica(d) or d
        competitor = other.client()
        competitor.timeout = 1.0
        margins = []
        for run in range(RUNS):
            session = "cut-%d" % run
            with Relay(d.addr) as r:
                p, death = hold_running(r.addr, session, tmp)
                time.sleep(run * TTL / 3 / RUNS)
                r.cut()
                deadline = time.monotonic() + 3 * TTL
                while True:
                    assert time.monotonic() < deadline, "never granted"
                    try:
                        granted = competitor.acquire(session, "competitor")
                        break
                    except grpc.RpcError as e:
                        assert e.code() == \
                            grpc.StatusCode.FAILED_PRECONDITION, e
                    time.sleep(0.005)
                decided = wall(granted.expiry) - TTL
                gone = death.wait(0)
                assert gone is not None and gone < decided, \
                    "the command still ran when the competitor got in"
                margins.append(decided - gone)
                rc = p.wait(timeout=30)
                err = p.stderr.read()
                assert rc == 128 + signal.SIGKILL, (rc, err)
            # The competitor holds what it got: hold released nothing.
            assert competitor.get(session).owner == "competitor"
        print("the command gone before the competitor's grant by (s):",
              margins)
        if other is not d:
            other.stop()


def test_sigkill_of_hold_kills_the_command_and_its_group():
    """leasectl hold SIGKILLed (as the OOM killer would): its command and
    what the command started in its group die too, at once (PR_SET_
    PDEATHSIG and hold's guardian), well within the TTL; nothing of hold
    is left running; the lease, not released, expires. The guardian
    stands before the command runs: a kill at the command's first step
    takes what it starts too."""
    with Leased(ttl="%ds" % TTL) as d, tempfile.TemporaryDirectory() as tmp:
        pids = os.path.join(tmp, "pids")
        session = "killed-hold"
        p = leasectl(d.addr, "hold", session, "--", "sh", "-c",
                     'kids=$(cat /proc/$PPID/task/$PPID/children); '
                     'sleep 300 & echo "$! $$ $kids" > "$1.new"; '
                     'mv "$1.new" "$1"; wait', "sh", pids)
        d.wait_file(pids)
        with open(pids) as f:
            background, command, *kids = (int(x) for x in f.read().split())
        # leasectl's children when the command began: the command and the
        # guardian, a fork of leasectl (its command line names the session).
        assert command in kids and len(kids) == 2, (command, kids)
        guardian = [k for k in kids if k != command][0]
        with open("/proc/%d/cmdline" % guardian, "rb") as f:
            assert session.encode() in f.read()
        p.kill()
        p.wait(timeout=10)
        for pid in (command, background):
            assert wait_gone(pid, TTL), pid
        # The guardian (a fork of leasectl, with its command line) is gone
        # too: nothing of the hold is left.
        deadline = time.monotonic() + TTL
        while any(session in cmdline for cmdline in cmdlines()):
            assert time.monotonic() < deadline, list(cmdlines())
            time.sleep(0.01)
        assert d.client().get(session).owner != ""  # not released


def cmdlines():
    """The command lines of every process, as text."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    yield f.read().replace(b"\0", b" ").decode(
                        errors="replace")
            except OSError:
                pass


def test_hold_releases_only_once_the_group_is_gone():
    """CMD exits leaving processes in its group: hold stops them (SIGTERM,
    then SIGKILL after --grace for one that ignores it) before it
    releases the lease, and exits with CMD's status."""
    with Leased(ttl="%ds" % TTL) as d, tempfile.TemporaryDirectory() as tmp:
        pids = os.path.join(tmp, "pids")
        # The background sleep ignores SIGTERM, as the shell does.
        start = time.monotonic()
        p = leasectl(d.addr, "hold", "left", "--grace", "500ms", "--", "sh",
                     "-c", 'trap "" TERM; sleep 300 & echo $! > "$1"; '
                     'exit 5', "sh", pids)
        rc = p.wait(timeout=30)
        took = time.monotonic() - start
        assert rc == 5, (rc, p.stderr.read())
        assert took >= 0.5, took  # the grace, for the one ignoring SIGTERM
        with open(pids) as f:
            assert wait_gone(int(f.read()), 0)
        expect_not_found(d, "left")  # released, after that


def expect_not_found(d, session):
    try:
        d.client().get(session)
        raise AssertionError("%s is still held" % session)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e


def test_hold_refuses_a_ttl_or_grace_the_lease_cannot_honour():
    """--ttl longer than the service's and --grace over half the TTL are
    refused, saying why and what is allowed, and leave nothing held; a
    shorter --ttl is trusted, and LEASE_DEADLINE tells the command when
    its lease ends (Unix seconds)."""
    with Leased(ttl="%ds" % TTL) as d, tempfile.TemporaryDirectory() as tmp:
        p = leasectl(d.addr, "hold", "o1", "--ttl", "1m", "--", "true")
        assert p.wait(timeout=20) == 2
        assert "--ttl 60s is longer than the service's TTL (3s)" in \
            p.stderr.read()
        expect_not_found(d, "o1")
        p = leasectl(d.addr, "hold", "o2", "--grace", "2s", "--", "true")
        assert p.wait(timeout=20) == 2
        assert "--grace 2s is more than the lease allows: at most 1.5s" in \
            p.stderr.read()
        expect_not_found(d, "o2")
        # The most it says is taken as it says it.
        p = leasectl(d.addr, "hold", "o2-most", "--grace", "1.5s", "--",
                     "true")
        assert p.wait(timeout=20) == 0, p.stderr.read()
        env = os.path.join(tmp, "env")
        before = time.time()
        p = leasectl(d.addr, "hold", "o3", "--ttl", "2s", "--", "sh", "-c",
                     'echo "$LEASE_DEADLINE $LEASE_TOKEN $(date +%s.%N)"'
                     ' > "$1"', "sh", env)
        assert p.wait(timeout=20) == 0, p.stderr.read()
        with open(env) as f:
            deadline, token, started = f.read().split()
        # The token of the lease the command ran under: the one hold
        # released (a slow build may see the keeper's acquire come after
        # hold's own had run out, and take over with the next token).
        released = d.wait_log(r'msg=release identity="" session="o3" '
                              r'owner="[^"]*" token=(\d+)\n')
        assert token == released.group(1), (token, released.group(0))
        # Whole seconds, rounded down, of the acquire's sending (after
        # `before`, before the command started) + 2 s - hold's margin
        # (1 % of the TTL, 20 ms, and 200 ms for the kill).
        assert int(before + 2 - 0.24) <= int(deadline) <= float(started) + 2, \
            (before, deadline, started)


if __name__ == "__main__":  # tests/bench/hold_margin.py imports it
    harness.main(globals())
