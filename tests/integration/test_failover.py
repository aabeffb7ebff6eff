#!/usr/bin/python3
"""A PostgreSQL failover under load, its history checked (leased --postgres).

Two leased replicas share one database: a primary and a synchronous
streaming standby (pg.py) whose wall clock runs `ahead` seconds ahead of
the primary's (libfaketime; the scenario's, MAIN or CONTROL), so that the
standby, once promoted, sees every lease the old primary granted expire
that much too early.
They reach it with a two-host conninfo and target_session_attrs=
read-write, as a deployment would. Lease owners record every call as the
fault campaign's workers do (tests/faults/workload.py, and the "sticky"
workers here, same JSON lines); then the primary gets kill -9 (its host
died) and the standby is promoted; the owners keep going for more than
2 TTL + --max-clock-skew; the fault campaign's checker
(tests/faults/checker.py) judges the whole history, and its watcher's
checker (tests/faults/watch_checker.py) what a watcher of every change
(tests/faults/watcher.py, at the first replica) was told: no gap or
duplicate through the failover, each event the new primary's, every
grant answered there.

What must hold: leased's failover quarantine (storage/pg_schema.c,
pg_schema_setup(): after a change of primary, leases held before count
as live for TTL + --max-clock-skew on the new primary's clock) keeps
every promise made before the failover, so the checker finds no
violation and no lost acknowledged call. The negative control runs
leased-faults with LEASED_FAULTS="broken=no_failover_quarantine" (no
quarantine): the standby's early clock must then let a takeover land
inside a hold interval granted by the old primary, which the checker
reports as a mutual_exclusion violation.

The workload that makes the control bite: STICKY_SESSIONS sessions, each
held by a sticky worker that renews every TTL/3, out of step with the
others (its last promise, inv + TTL, ends at least TTL - TTL/3 after the
kill), and more sticky workers on each replica trying to acquire them all
the time. After the failover the first call to reach a session is most
likely a competitor's (every few tens of ms) rather than the holder's
renewal (every TTL/3): without the quarantine it takes the lease over as
soon as the new clock passes the stored expiry, which with the standby
ahead is while the old holder may still use it, provided leased is back
on the new primary within TTL - TTL/3 of the kill, and `ahead` is more
than TTL - TTL/3 (else the holder's next renewal, on the new primary,
comes first and keeps the lease). Being back takes under half a second
on an idle machine, but 2-2.5 s was seen in CI with the suite running
beside it: so the control runs CONTROL, a TTL and skew of 9 s and the
standby 7.5 s ahead (back within 6 s of the kill, or later for some
sessions; the quarantine it lacks would cover all of that). workload.py
workers add the campaign's usual mix (releases, walk-aways, stale calls)
on sessions of their own, hot-0 and hot-1 (caught there too, now and
then).

The history has no kill/start events (no daemon dies: the checker's
restart model does not apply); the runner's events `db_kill` and
`db_promoted` only show in the excerpts. LEASED_FAILOVER_OUT=DIR keeps
each run's histories and leased logs under DIR; LEASED_FAILOVER_SEED=N
replays workload.py's choices (not the timing). leased-faults is
$LEASED_FAULTS_BIN, else tests/faults/leased-faults in $LEASED_BIN's
build directory; builds with sanitizers do not make it, and do not run
the control.
"""
import collections
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc

import harness
import pg

sys.path.insert(0, os.path.join(harness.ROOT, "tests", "faults"))
import checker  # noqa: E402
import watch_checker  # noqa: E402
import workload  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's, with python3-grpcio
WORKLOAD = os.path.join(harness.ROOT, "tests", "faults", "workload.py")
WATCHER = os.path.join(harness.ROOT, "tests", "faults", "watcher.py")
# ttl and skew: leased's --ttl and --max-clock-skew; ahead: the standby's
# clock, ahead of the primary's; after: seconds of load after the
# promotion.
Scenario = collections.namedtuple("Scenario", "ttl skew ahead after")
# Through the quarantine (TTL + skew) and a TTL more.
MAIN = Scenario(ttl=2.0, skew=2.0, ahead=1.5, after=2 * 2.0 + 2.0 + 1.5)
# Longer clocks, so that leased may take seconds to be back on the new
# primary and still take over inside a hold interval the old primary
# granted (see the docstring).
CONTROL = Scenario(ttl=9.0, skew=9.0, ahead=7.5, after=4.0)
CALL_DEADLINE = 0.5        # each call's gRPC deadline, as workload.py's
STICKY_SESSIONS = 4
STICKY_WORKERS = 10        # the first 4 hold, 6 compete (3 per replica)
WORKLOAD_WORKERS = 4
BEFORE = 4.0               # load before the kill, once settled


class History:
    """The runner's own JSON lines: the meta record and its events."""

    def __init__(self, path, ttl):
        self.path = path
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.write({"type": "meta", "ttl": ttl})

    def write(self, rec):
        with self.lock:
            self.f.write(json.dumps(rec) + "\n")

    def event(self, name, detail=""):
        t = time.monotonic()
        self.write({"type": "event", "event": name, "t": t,
                    "detail": detail})
        return t

    def close(self):
        self.f.close()


class Sticky(threading.Thread):
    """A lease owner that holds on: it acquires one of `sessions` (trying
    them in turn from sessions[first], every STICKY_PAUSE s while all are
    held), then renews it every TTL/3 (whatever the last renewal's
    outcome; the first renewal after a random part of that, so that the
    holders' renewals are not in step) until a renewal is refused. One
    call at a time on one channel, every call recorded as workload.py
    records it (checker.py's format). Bounded by `seconds` and
    MAX_CALLS."""

    STICKY_PAUSE = 0.02
    MAX_CALLS = 200000

    def __init__(self, addr, owner, sessions, first, out, stop, seed,
                 seconds, ttl):
        super().__init__(daemon=True)
        self.addr, self.owner, self.sessions = addr, owner, sessions
        self.ttl = ttl
        self.first = first
        self.out_path, self.stop, self.seconds = out, stop, seconds
        self.rng = random.Random(seed)
        self.calls = 0
        self.error = None

    def run(self):
        try:
            self._run()
        except Exception as e:  # shown by the test
            self.error = repr(e)

    def _run(self):
        ch = grpc.insecure_channel(self.addr)
        calls = workload.stubs(ch)
        out = open(self.out_path, "a", buffering=1)

        def call(op, session, token=None):
            self.calls += 1
            rec, _ = workload.timed_call(calls, op, session, self.owner,
                                         token, CALL_DEADLINE)
            rec["addr"] = self.addr
            out.write(json.dumps(rec) + "\n")
            return rec["result"], rec["rtoken"], rec["inv"]

        end = time.monotonic() + self.seconds
        held = None  # (session, token)
        next_renew = 0.0
        i = self.first
        try:
            while (not self.stop.is_set() and time.monotonic() < end
                   and self.calls < self.MAX_CALLS):
                if held is None:
                    session = self.sessions[i % len(self.sessions)]
                    i += 1
                    result, token, inv = call("acquire", session)
                    if result == "ok":
                        held = (session, token)
                        next_renew = inv + self.ttl / 3 * \
                            self.rng.uniform(0.1, 1)
                    else:
                        self.stop.wait(self.STICKY_PAUSE)
                    continue
                wait = next_renew - time.monotonic()
                if wait > 0 and self.stop.wait(min(wait, self.ttl)):
                    break
                result, _, inv = call("renew", *held)
                next_renew = inv + self.ttl / 3
                if result == "fail":
                    held = None
            if held is not None:
                call("release", *held)
        finally:
            out.close()
            ch.close()


def clock_offset(server):
    """server's wall clock minus ours (seconds), and the uncertainty."""
    t0 = time.time()
    v = float(server.psql("SELECT extract(epoch FROM clock_timestamp())"))
    t1 = time.time()
    return v - (t0 + t1) / 2, (t1 - t0) / 2


def check_ahead(primary, standby, want):
    p, pe = clock_offset(primary)
    s, se = clock_offset(standby)
    ahead = s - p
    print("clocks: primary %+.3fs, standby %+.3fs (±%.3fs): standby ahead "
          "by %.3fs" % (p, s, pe + se, ahead))
    assert abs(p) < 0.2 + pe, "the primary's clock is off by %.3fs" % p
    assert abs(ahead - want) < 0.2 + pe + se, (
        "the standby's clock is ahead by %.3fs, not %.1fs" % (ahead, want))
    return ahead


def faults_bin():
    """leased-faults (tests/faults/meson.build): $LEASED_FAULTS_BIN, else
    beside $LEASED_BIN's build directory; None if not built (it is only
    in builds without sanitizers)."""
    path = os.environ.get("LEASED_FAULTS_BIN")
    if not path:
        build = os.path.dirname(os.path.dirname(
            os.path.abspath(harness.leased_bin())))
        path = os.path.join(build, "tests", "faults", "leased-faults")
    return path if os.access(path, os.X_OK) else None


def start_leased(binary, conninfo, env, sc):
    """A started leased replica: `binary` (harness.Leased runs
    $LEASED_BIN, so it is set for the start) with scenario `sc`'s TTL and
    skew."""
    args = ["--max-clock-skew", "%gs" % sc.skew, "--postgres-timeout", "1s"]
    d = harness.Leased(ttl="%gs" % sc.ttl, postgres=conninfo, args=args,
                       env=env)
    saved = os.environ.get("LEASED_BIN")
    os.environ["LEASED_BIN"] = binary
    try:
        d.start()
    finally:
        if saved is None:
            del os.environ["LEASED_BIN"]
        else:
            os.environ["LEASED_BIN"] = saved
    return d


def wait_for(ok, what, timeout):
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError("%s: not after %ss" % (what, timeout))
        time.sleep(0.05)


def read_ops(paths):
    ops = []
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    if rec.get("type") == "op":
                        ops.append(rec)
    return ops


def stored_events(server):
    """revision -> (kind, session, owner, token) of the events the
    database holds (watch_checker.py's form)."""
    rows = server.psql(
        "SELECT revision, kind, convert_from(session, 'UTF8'), "
        "convert_from(owner, 'UTF8'), token FROM leased_events")
    return {int(r): (watch_checker.KINDS[int(k)], s, o, int(t))
            for r, k, s, o, t in
            (line.split("|") for line in rows.splitlines())}


def failure_window(ops, kill_t, replica_of):
    """From the first call that failed without a definite answer
    (result unknown: UNAVAILABLE, DEADLINE_EXCEEDED…) answered after the
    kill, to the first OK answer to a call sent after that; overall and
    per replica. Returns a dict of texts and numbers."""
    def window(sel):
        bad = [o for o in sel if o["result"] == "unknown"
               and o["ret"] >= kill_t]
        if not bad:
            return None
        first_bad = min(o["ret"] for o in bad)
        oks = [o["ret"] for o in sel if o["result"] == "ok"
               and o["inv"] >= first_bad]
        first_ok = min(oks) if oks else None
        inside = [o for o in sel if o["ret"] >= first_bad and
                  (first_ok is None or o["inv"] <= first_ok)]
        return {"first_failure": first_bad - kill_t,
                "first_ok": None if first_ok is None else first_ok - kill_t,
                "seconds": None if first_ok is None else first_ok - first_bad,
                "calls": len(inside),
                "unknown": sum(o["result"] == "unknown" for o in inside),
                "codes": sorted({o["code"] for o in inside
                                 if o["result"] == "unknown"})}
    out = {"all": window(ops)}
    for addr in sorted(set(replica_of.values())):
        out[addr] = window([o for o in ops
                            if replica_of.get(o["owner"]) == addr])
    return out


def fmt_window(w):
    if w is None:
        return "no call failed"
    if w["first_ok"] is None:
        return ("first failure at kill%+.3fs, no OK after it (%d calls, %d "
                "unknown)" % (w["first_failure"], w["calls"], w["unknown"]))
    return ("kill%+.3fs .. kill%+.3fs: %.3fs without an OK answer (%d calls "
            "in it, %d unknown: %s)"
            % (w["first_failure"], w["first_ok"], w["seconds"], w["calls"],
               w["unknown"], ",".join(w["codes"])))


def run_failover(binary, env, label, sc):
    """The scenario; returns what the test checks: the checker's report,
    the replicas' logs, the new primary's meta rows, the failure windows,
    and the timings."""
    keep = os.environ.get("LEASED_FAILOVER_OUT")
    if keep:
        os.makedirs(keep, exist_ok=True)
        work = tempfile.mkdtemp(prefix=label + "-", dir=keep)
    else:
        work = tempfile.mkdtemp(prefix="leased-failover-")
    t_begin = time.monotonic()
    # fsync=off (the standby inherits it): a checkpoint for
    # pg_basebackup takes seconds less on a busy machine. No process of
    # ours outlives the page cache (kill -9 is of processes, not of the
    # host, and the old primary's files are never used again), so what a
    # commit or a synchronous standby's flush promises is unchanged.
    primary = pg.Postgres("primary", conf={"fsync": "off"}).start()
    standby = None
    replicas = []
    workers = []
    sticky = []
    watcher = None
    stop = threading.Event()
    history = History(os.path.join(work, "runner.jsonl"), sc.ttl)
    try:
        standby = primary.standby("standby", faketime="%+g" % sc.ahead,
                                  sync=True)
        ahead = check_ahead(primary, standby, sc.ahead)
        conninfo = ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=leased "
                    "user=leased target_session_attrs=read-write"
                    % (primary.port, standby.port))
        t_pg = time.monotonic()
        for _ in range(2):
            replicas.append(start_leased(binary, conninfo, env, sc))
        addrs = [d.addr for d in replicas]
        t_leased = time.monotonic()
        # A watcher of every change, at the first replica, through the
        # failover (it resumes from its last revision if its stream ends).
        watched = os.path.join(work, "watcher.jsonl")
        watcher = subprocess.Popen(
            [PYTHON, WATCHER, "--addr", addrs[0], "--out", watched],
            stdout=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(watched), "the watcher started", 30)

        replica_of = {}
        outs = []
        seed = int(os.environ.get("LEASED_FAILOVER_SEED", time.time()))
        print("%s: seed %d, work in %s" % (label, seed, work))
        for i in range(WORKLOAD_WORKERS):
            owner, addr = "w%d" % i, addrs[i % 2]
            out = os.path.join(work, "worker-%d.jsonl" % i)
            outs.append(out)
            replica_of[owner] = addr
            with open(os.path.join(work, "worker-%d.err" % i), "w") as err:
                workers.append(subprocess.Popen(
                    [PYTHON, WORKLOAD, "--addr", addr, "--owner", owner,
                     "--ttl", str(sc.ttl), "--seconds", "60",
                     "--seed", str(seed * 100 + i), "--out", out],
                    stdout=subprocess.DEVNULL, stderr=err))
        # The holders first, one per session, alternating between the
        # replicas; then the competitors, alternating too: whichever
        # replica is back first, competitors race its holders' renewals.
        sessions = ["sticky-%d" % i for i in range(STICKY_SESSIONS)]

        def start_sticky(i):
            owner, addr = "s%d" % i, addrs[i % 2]
            out = os.path.join(work, "sticky-%d.jsonl" % i)
            outs.append(out)
            replica_of[owner] = addr
            t = Sticky(addr, owner, sessions, i % len(sessions), out, stop,
                       seed * 100 + 50 + i, 60, sc.ttl)
            sticky.append(t)
            t.start()

        def all_held():
            ready = [p for p in outs[WORKLOAD_WORKERS:]
                     if os.path.exists(p)]
            held = {o["session"] for o in read_ops(ready)
                    if o["result"] == "ok" and o["op"] == "acquire"}
            return held >= set(sessions)
        for i in range(STICKY_SESSIONS):
            start_sticky(i)
        wait_for(all_held, "every sticky session held", 15)
        for i in range(STICKY_SESSIONS, STICKY_WORKERS):
            start_sticky(i)
        wait_for(lambda: all(map(os.path.exists, outs)), "workers ready", 30)
        t_ready = time.monotonic()
        time.sleep(BEFORE)

        kill_t = history.event("db_kill", "kill -9 of the primary")
        primary.kill9()
        killed_t = history.event("db_killed", "the primary is gone")
        standby.promote()
        promoted_t = history.event("db_promoted", "the standby takes writes")
        print("%s: kill -9 took %.3fs, the promotion %.3fs"
              % (label, killed_t - kill_t, promoted_t - killed_t))
        time.sleep(sc.after)

        stop.set()
        for w in workers:
            w.terminate()  # ends after the call in progress
        for w in workers:
            try:
                w.wait(timeout=15)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        for t in sticky:
            t.join(timeout=15)
        assert not any(t.is_alive() for t in sticky), "a sticky worker hung"
        errors = [t.error for t in sticky if t.error]
        assert not errors, "sticky workers failed: %s" % errors
        # Everything stored by now reaches the watcher (expiries told
        # meanwhile come after: it is caught up once it has the newest).
        newest = max(stored_events(standby), default=0)
        wait_for(lambda: any(w["type"] == "event" and w["revision"] >= newest
                             for w in watch_checker.read_watched(watched)),
                 "the watcher told revision %d" % newest, 20)
        watcher.terminate()
        try:
            watcher.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watcher.kill()  # blocked in a stream: its lines are out
            watcher.wait()
        for i, w in enumerate(workers):
            with open(os.path.join(work, "worker-%d.err" % i)) as f:
                err = f.read()
            assert w.returncode in (0, -signal.SIGTERM), (
                "workload.py w%d exited %s:\n%s" % (i, w.returncode,
                                                    err[-2000:]))

        rows = dict(line.split("|") for line in standby.psql(
            "SELECT key, value FROM leased_meta ORDER BY key").split("\n"))
        rows = {k: int(v) for k, v in rows.items()}
        # The new primary's clock against ours, read between two of ours.
        before = time.monotonic()
        new_now_ns = int(standby.psql("SELECT leased_now()"))
        read_t = (before + time.monotonic()) / 2
        quarantine_end_t = read_t + (rows["quarantine_end_ns"]
                                     - new_now_ns) / 1e9
        logs = []
        for i, d in enumerate(replicas):
            rc = d.stop()
            logs.append(d.log_text())
            with open(os.path.join(work, "leased-%d.log" % i), "w") as f:
                f.write(logs[-1])
            assert rc == 0, "leased exited %s:\n%s" % (rc, logs[-1])
        history.close()
        records, sources = checker.read_files([history.path] + outs)
        report = checker.check(records, sources)
        told = watch_checker.read_watched(watched)
        report["watch"] = watch_checker.check(
            told, stored_events(standby), records)
        ops = read_ops(outs)
        windows = failure_window(ops, kill_t, replica_of)
        t_end = time.monotonic()
        return {
            "report": report, "logs": logs, "meta": rows, "ops": ops,
            "watched": told,
            "windows": windows, "kill_t": kill_t, "promoted_t": promoted_t,
            "ahead": ahead, "addrs": addrs, "replica_of": replica_of,
            "quarantine_after_kill": quarantine_end_t - killed_t,
            "quarantine_after_promote": quarantine_end_t - promoted_t,
            "timing": {"postgres": t_pg - t_begin,
                       "leased": t_leased - t_pg,
                       "workers": t_ready - t_leased,
                       "setup": t_ready - t_begin,
                       "total": t_end - t_begin},
            "work": work,
        }
    finally:
        stop.set()
        history.close()
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
            watcher.wait()
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        for t in sticky:
            t.join(timeout=5)
        for d in replicas:
            d.__exit__(None, None, None)
        if standby is not None:
            standby.stop()
        primary.stop()
        if not keep:
            shutil.rmtree(work, True)


def summary(label, r):
    rep = r["report"]
    res = {"ok": 0, "fail": 0, "unknown": 0}
    for o in r["ops"]:
        res[o["result"]] += 1
    tm = r["timing"]
    print("%s: %.1fs in all, %.1fs to set up (postgres %.1fs, leased "
          "%.1fs, workers settled %.1fs); %d ops (ok %d, fail %d, unknown "
          "%d), %d grants, %d takeovers"
          % (label, tm["total"], tm["setup"], tm["postgres"], tm["leased"],
             tm["workers"], rep["ops"]["total"], res["ok"], res["fail"],
             res["unknown"], rep["grants"], rep["takeovers"]))
    for name, w in r["windows"].items():
        print("%s: calls failing, %s: %s" % (label, name, fmt_window(w)))
    print("%s: generation %d, quarantine ends %.3fs after the kill, "
          "%.3fs after the promotion was seen (new primary's clock)"
          % (label, r["meta"]["generation"], r["quarantine_after_kill"],
             r["quarantine_after_promote"]))
    viol = {k: v["count"] for k, v in rep["violations"].items()}
    print("%s: violations %s, acknowledged lost %d"
          % (label, viol, rep["acknowledged_lost"]))


def sticky_takeovers_after(r):
    """Takeovers of sticky sessions answered after the kill: (seconds
    after the promotion, session, owner, token)."""
    seen = {}
    out = []
    for o in sorted(r["ops"], key=lambda o: o["ret"]):
        if not o["session"].startswith("sticky-") or o["result"] != "ok" \
                or o["op"] != "acquire":
            continue
        key = (o["session"], o["owner"])
        new = o["rtoken"] not in seen.setdefault(key, set())
        seen[key].add(o["rtoken"])
        if new and o["ret"] > r["kill_t"]:
            out.append((o["ret"] - r["promoted_t"], o["session"], o["owner"],
                        o["rtoken"]))
    return out


def test_failover_under_load_keeps_every_promise():
    r = run_failover(harness.leased_bin(), None, "failover", MAIN)
    rep = r["report"]
    print(checker.format_report(rep))
    summary("failover", r)
    bad = checker.failed(rep)
    assert not bad, "the history breaks %s:\n%s" % (
        bad, checker.format_report(rep))
    assert rep["input_warnings"]["count"] == 0, checker.format_report(rep)
    # What the watcher was told: no gap or duplicate through the
    # failover, all of it in the new primary's events, and every grant
    # answered there.
    print(watch_checker.format_report(rep["watch"], r["watched"]))
    wbad = {k: v["count"] for k, v in rep["watch"].items() if v["count"]}
    assert not wbad, watch_checker.format_report(rep["watch"], r["watched"])
    assert sum(1 for w in r["watched"] if w["type"] == "event") > 0
    # The failover happened, was seen, and was quarantined.
    assert r["meta"]["generation"] == 1, r["meta"]
    # Each replica saw the change: the first to reconnect stored it (and
    # the quarantine), the other found the primary unlike its own last;
    # each logs what was left of the quarantine.
    left = []
    for log in r["logs"]:
        found = re.findall(
            r"msg=database_primary_changed quarantine_ms=(\d+)", log)
        assert found, log
        left += [int(m) for m in found]
    for log in r["logs"]:
        assert log.count("msg=database_connected") >= 1, log
    # It lasts TTL + --max-clock-skew from when the first replica back
    # stored it (that one logs nearly all of it left), which is after the
    # kill, and soon after the promotion was seen (the database may take
    # writes a moment before the test sees it promoted).
    lasts = MAIN.ttl + MAIN.skew
    assert lasts * 1000 - 500 < max(left) <= lasts * 1000, left
    after_kill = r["quarantine_after_kill"]
    assert after_kill > lasts - 0.1, after_kill
    q = r["quarantine_after_promote"]
    assert q < lasts + 3, q
    # Served again on both replicas, within the run (under a second on
    # an idle machine, 2.5 s seen in CI with the suite beside it, and this
    # runs under the sanitizers too).
    for name, w in r["windows"].items():
        assert w is not None and w["first_ok"] is not None, (name, w)
        assert w["seconds"] < MAIN.after, (name, w)
    tk = sticky_takeovers_after(r)
    early = [t for t in tk if t[0] < q - 0.5]
    print("failover: sticky takeovers after the kill: %s" % (
        ", ".join("%s by %s at promotion%+.3fs" % (s, o, t)
                  for t, s, o, _ in tk) or "none"))
    assert not early, early


def test_failover_without_quarantine_is_caught():
    # Only builds without sanitizers make leased-faults, and only they
    # register this case (tests/integration/meson.build).
    binary = faults_bin()
    assert binary is not None, "no leased-faults beside leased"
    r = run_failover(binary,
                     {"LEASED_FAULTS": "broken=no_failover_quarantine"},
                     "control", CONTROL)
    rep = r["report"]
    print(checker.format_report(rep))
    summary("control", r)
    tk = sticky_takeovers_after(r)
    print("control: sticky takeovers after the kill: %s" % (
        ", ".join("%s by %s at promotion%+.3fs" % (s, o, t)
                  for t, s, o, _ in tk) or "none"))
    n = rep["violations"]["mutual_exclusion"]["count"]
    for ex in rep["violations"]["mutual_exclusion"]["excerpts"][:3]:
        print("control: caught: " + ex["summary"])
    assert r["meta"]["generation"] == 1, r["meta"]
    assert n >= 1, ("no takeover inside a hold interval without the "
                    "failover quarantine:\n%s" % checker.format_report(rep))


harness.main(globals())
