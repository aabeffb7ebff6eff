#!/usr/bin/python3
"""Tests of the fault campaign's history checker (tests/faults/checker.py).

`python3 test_checker.py` runs every case, `python3 test_checker.py CASE`
runs one, `python3 test_checker.py --list` lists them (the conventions of
tests/integration/harness.py; this file needs no gRPC and no daemon).

Two kinds of histories:
  - small hand-written ones (class History): a clean one, and for each
    invariant a minimal history that violates exactly it and near misses
    that must not be flagged. Times that sit on a boundary are exact
    binary fractions, so that the float comparisons are exact.
  - simulated ones (class Sim): a model of a correct leased (the engine's
    rules from core/engine.c, the reply-after-sync rule of
    daemon/mode_embedded.c, the restart quarantine, garbage collection, the
    startup sync), its workers (as tests/faults/workload.py behaves) and
    the campaign's runner (kill -9, power loss, SIGSTOP, clock steps,
    storage failures, paused workers). The checker must accept every such
    history, and must flag the negative controls of tests/faults/run
    when the model is broken the same way.
"""
import copy
import heapq
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import cases  # noqa: E402
import checker  # noqa: E402

PYTHON = "/usr/bin/python3"
CHECKER = os.path.join(HERE, "checker.py")
CODES = {"ok": "OK", "fail": "FAILED_PRECONDITION",
         "unknown": "DEADLINE_EXCEEDED"}


# ---- hand-written histories -------------------------------------------------

class History:
    """A synthetic history, built call by call. Each method returns the
    record it added, so that a case can compare excerpts with it."""

    def __init__(self, ttl=1.0):
        self.records = [{"type": "meta", "ttl": ttl}]

    def op(self, owner, op, inv, ret, result="ok", token=None, rtoken=None,
           session="hot-1", code=None):
        rec = {"type": "op", "proc": owner, "op": op, "session": session,
               "owner": owner, "token": token, "inv": inv, "ret": ret,
               "result": result, "code": code or CODES[result],
               "rtoken": rtoken if result == "ok" else None}
        self.records.append(rec)
        return rec

    def acquire(self, owner, inv, ret, rtoken=None, result="ok", **kw):
        return self.op(owner, "acquire", inv, ret, result, None, rtoken, **kw)

    def wait(self, owner, inv, ret, rtoken=None, result="ok", **kw):
        return self.op(owner, "wait", inv, ret, result, None, rtoken, **kw)

    def renew(self, owner, token, inv, ret, result="ok", **kw):
        return self.op(owner, "renew", inv, ret, result, token, token, **kw)

    def release(self, owner, token, inv, ret, result="ok", **kw):
        return self.op(owner, "release", inv, ret, result, token, None, **kw)

    def event(self, name, t, detail=""):
        rec = {"type": "event", "event": name, "t": t, "detail": detail}
        self.records.append(rec)
        return rec

    def check(self):
        return checker.check(self.records)


def expect(report, lost=0, **counts):
    """Asserts the count of every invariant (0 unless given) and of
    acknowledged_lost."""
    for name in counts:
        assert name in checker.INVARIANTS, name
    got = {n: report["violations"][n]["count"] for n in checker.INVARIANTS}
    want = {n: counts.get(n, 0) for n in checker.INVARIANTS}
    assert got == want, "violations %s, want %s\n%s" % (
        got, want, checker.format_report(report))
    assert report["acknowledged_lost"] == lost, "acknowledged_lost %d, " \
        "want %d\n%s" % (report["acknowledged_lost"], lost,
                         checker.format_report(report))
    assert report["ok"] == (not any(want.values()) and not lost)


def expect_excerpt(report, name, ops, events=(), index=0):
    """Asserts that excerpt `index` of invariant `name` shows exactly these
    op records and these event records."""
    ex = report["violations"][name]["excerpts"][index]
    assert ex["ops"] == list(ops), "excerpt ops:\n%s\nwant:\n%s" % (
        json.dumps(ex["ops"], indent=1), json.dumps(list(ops), indent=1))
    assert ex["events"] == list(events), "excerpt events %s, want %s" % (
        ex["events"], list(events))
    assert ex["summary"]


def clean_history():
    """Several owners, takeovers after expiry and after a release,
    re-acquires, renewals, stale and unknown calls, a restart whose
    quarantine is respected, and a restart long after a holder walked away
    (its row collectable). TTL 1."""
    h = History()
    # w1 takes hot-1, renews it, re-acquires it (same token), then stops.
    h.acquire("w1", 0.0, 0.01, 1)
    h.acquire("w2", 0.02, 0.03, result="fail")           # held by w1
    h.renew("w1", 1, 0.3, 0.31)
    h.acquire("w1", 0.5, 0.51, 1)                        # keeps token 1
    # w3 on hot-2: an unknown renewal, then a good one, then a release.
    h.acquire("w3", 0.05, 0.06, 1, session="hot-2")
    h.renew("w3", 1, 0.4, 0.9, result="unknown", session="hot-2")
    h.renew("w3", 1, 0.95, 0.96, session="hot-2")
    h.release("w3", 1, 1.2, 1.21, session="hot-2")
    # w1's lease (until 1.5) expires; w2 takes over, then releases.
    h.acquire("w2", 1.6, 1.61, 2)
    h.renew("w1", 1, 1.7, 1.71, result="fail")           # lost: taken over
    h.release("w2", 2, 1.8, 1.81)
    h.acquire("w1", 1.9, 1.91, 3)                        # after the release
    h.renew("w2", 2, 2.0, 2.01, result="fail")
    h.renew("w1", 3, 2.2, 2.21)
    h.release("w1", 1, 2.3, 2.31)                        # stale: a no-op
    # The daemon dies while w1 holds hot-1 (token 3, until 3.2).
    h.event("fault_on", 2.49, "kill9")
    h.event("kill", 2.5, "rc=-9")
    h.event("power_loss", 2.51)
    h.acquire("w2", 2.55, 2.56, result="unknown", code="UNAVAILABLE")
    h.event("start", 2.6)
    h.event("fault_off", 2.61, "kill9")
    # hot-2 was released before the crash: no quarantine for it.
    h.acquire("w2", 2.65, 2.66, 2, session="hot-2")
    h.release("w2", 2, 2.7, 2.71, session="hot-2")
    h.acquire("w2", 2.8, 2.81, result="fail")            # quarantined
    h.renew("w1", 3, 2.9, 2.91)                          # its holder renews
    h.acquire("w2", 3.95, 3.96, 4)                       # after 3.91
    h.renew("w1", 3, 4.0, 4.01, result="fail")
    # w2 walks away (its lease ends by 4.95); much later the daemon dies
    # and the row may be gone: w3 may take it at once.
    h.event("kill", 7.5, "rc=-9")
    h.event("start", 7.6)
    h.acquire("w3", 7.7, 7.71, 5)
    h.acquire("w1", 7.8, 7.81, result="fail")
    h.release("w3", 5, 8.0, 8.01)
    return h


# ---- a model of a correct leased, its workers and the runner --------------

class _Call:
    __slots__ = ("w", "op", "session", "token", "inv", "done", "then", "gen")


class _Worker:
    def __init__(self, name):
        self.name = name
        self.held = None      # (session, token, safe deadline)
        self.stale = []       # (session, token) it held once
        self.paused_until = 0.0
        self.finished = False
        self.last_arrival = 0.0


class Sim:
    """Simulated time; every random choice comes from one seeded Random.

    The daemon: rows s -> [owner or None, token, expiry, held_at_start]
    on its own clock (monotonic time plus the wall offset at its start).
    Every decision is committed at once; an answer decided from an
    ownership change not yet synced (stamp > synced_seq) waits for a sync
    (a snapshot taken when the sync begins); a kill keeps what was
    committed, a power loss only what was synced; a start syncs what it
    loaded, caps expiries at its quarantine's end, and holds every owned
    row until then. Garbage collection every 0.1 s after the quarantine;
    a collection counts as a change of owner here (answers decided from it
    wait for its sync). leased (daemon/mode_embedded.c) does not stamp it, so a
    release or renewal of a collected row is answered before the deletion
    is durable; after a power loss the row is back and a renewal with the
    token succeeds: bug="answer_from_unsynced_gc" models that, which the
    checker reports as release_lost.
    Calls that reach a paused daemon are decided when it continues, in
    arrival order, at one time (their answers may come after the clients
    gave up). A wait refused joins its session's line; a release, or a
    look at the lease's end, grants the first in line; a wait whose
    client gave up leaves the line only once the cancel reaches the
    daemon, so it may be granted after the client's next call was
    decided (D2'). A worker's calls arrive in the order sent (one connection)
    and die with the daemon they were sent to. Some answers are lost, some
    calls are slow, and a storage fault answers UNAVAILABLE without a
    change. bug: one of the negative controls of tests/faults/run."""

    FAMILIES = ("kill9", "sigstop", "clock_step", "restart_stepped",
                "client_pause", "storage")

    def __init__(self, seed, seconds=60.0, workers=6, hot=2, cold=4,
                 ttl=1.0, families=FAMILIES, bug=None, fault_gap=(0.2, 0.8),
                 waits=0.3):
        self.rng = random.Random(seed)
        self.end = seconds
        self.ttl = ttl
        self.dl = min(0.5, ttl / 2)  # the workers' deadline
        self.families = list(families)
        self.bug = bug
        self.fault_gap = fault_gap
        self.waits = waits    # how often a free worker waits (hot only)
        self.records = [{"type": "meta", "ttl": ttl}]
        self.heap = []
        self.nseq = 0
        self.hot = ["hot-%d" % i for i in range(hot)]
        self.cold = ["cold-%d" % i for i in range(cold)]
        self.workers = [_Worker("w%d" % i) for i in range(workers)]
        # The daemon.
        self.gen = 0
        self.alive = self.serving = self.paused = False
        self.deferred = []
        self.queued = []      # calls read while paused
        self.open = set()     # calls read by the daemon and not answered
        self.rows = {}
        self.floor = 0
        self.synced = ({}, 0)
        self.commit_seq = self.synced_seq = 0
        self.stamp = {}
        self.syncing = False
        self.waiting = []
        self.lines = {}       # session -> waits in line, first first
        self.offset = 0.0
        self.wall = 1.7e9     # the machine's wall clock minus monotonic
        self.q_end = 0.0
        self.storage_bad_until = -1.0

    # -- plumbing --
    def at(self, t, fn, *args):
        heapq.heappush(self.heap, (t, self.nseq, fn, args))
        self.nseq += 1

    def event(self, t, name, detail=""):
        self.records.append({"type": "event", "event": name, "t": t,
                             "detail": detail})

    def lat(self):
        r = self.rng.random()
        if r < 0.01:
            return self.rng.uniform(0.2, 0.8)  # a slow one
        return self.rng.uniform(0.0003, 0.003)

    def run(self):
        self.at(0.0, self.start)
        for i, w in enumerate(self.workers):
            self.at(0.2 + 0.01 * i, self.step, w)
        if self.families:
            self.at(1.0, self.fault)
        while self.heap:
            t, _, fn, args = heapq.heappop(self.heap)
            fn(t, *args)
        return self.records

    # -- the runner --
    def fault(self, t):
        if t > self.end - self.ttl:
            return
        fam = self.rng.choice(self.families)
        self.event(t, "fault_on", fam)
        ttl = self.ttl
        done = t + 0.01
        if fam == "kill9":
            done = self.restart(t, self.rng.random() < 0.5, 0)
        elif fam == "restart_stepped":
            done = self.restart(t, self.rng.random() < 0.5,
                                self.rng.choice([-3600, -60, -5, 5, 60, 3600]))
        elif fam == "sigstop" and self.alive:
            self.paused = True
            done = t + 1.5 * ttl
            self.at(done, self.cont, self.gen)
        elif fam == "clock_step":
            step = self.rng.choice([-3600, -60, -5, 5, 60, 3600])
            self.wall += step
            self.event(t + 0.001, "clock_step", "%+d" % step)
        elif fam == "client_pause":
            w = self.rng.choice(self.workers)
            done = t + 1.5 * ttl
            w.paused_until = done
        elif fam == "storage":  # disk full, EIO: UNAVAILABLE, no change
            done = t + self.rng.uniform(0.5, 1.5) * ttl
            self.storage_bad_until = done
        self.at(done, self.fault_off, fam)

    def fault_off(self, t, fam):
        self.event(t, "fault_off", fam)
        self.at(t + self.rng.uniform(*self.fault_gap) * self.ttl, self.fault)

    def restart(self, t, power_loss, step):
        self.kill(t, power_loss)
        t += self.rng.uniform(0.001, 0.02)
        self.event(t, "kill", "rc=-9")
        if power_loss:
            t += 0.002
            self.event(t, "power_loss")
        if step:
            self.wall += step
            t += 0.001
            self.event(t, "clock_step", "%+d" % step)
        t += self.rng.uniform(0.005, 0.05)
        self.at(t, self.start)
        return t + 0.1

    # -- the daemon's life --
    def start(self, t):
        self.event(t, "start")
        self.gen += 1
        self.alive, self.serving, self.paused = True, False, False
        self.offset = self.wall
        if self.bug == "forget_tokens":
            self.floor = 0
            self.rows = {s: r for s, r in self.rows.items()
                         if r[0] is not None}
        now = t + self.rng.uniform(0.001, 0.01) + self.offset
        self.q_end = now + self.ttl if self.bug != "no_quarantine" else now
        for r in self.rows.values():
            r[3] = r[0] is not None
            if self.bug != "no_quarantine":
                r[2] = min(r[2], self.q_end)  # store_cap_expiries
        self.synced = (copy.deepcopy(self.rows), self.floor)  # startup sync
        self.synced_seq = self.commit_seq
        self.stamp = {}
        ready = t + self.rng.uniform(0.02, 0.08)
        self.at(ready, self.ready, self.gen)
        self.at(ready + 0.1, self.gc, self.gen)

    def ready(self, t, gen):
        if gen == self.gen and self.alive:
            self.serving = True

    def kill(self, t, power_loss):
        """Death at t: calls read and not answered fail at once."""
        self.alive = self.serving = self.paused = False
        self.deferred, self.queued, self.waiting = [], [], []
        self.lines = {}
        self.syncing = False
        for call in sorted(self.open, key=lambda c: (c.inv, c.w.name)):
            self.at(t + 0.001, self.complete, call, "unknown", "UNAVAILABLE",
                    None)
        self.open = set()
        if power_loss:
            self.rows = copy.deepcopy(self.synced[0])
            self.floor = self.synced[1]

    def cont(self, t, gen):
        if gen != self.gen or not self.alive:
            return
        self.paused = False
        deferred, self.deferred = self.deferred, []
        for fn, args in deferred:
            self.at(t, fn, *args)
        queued, self.queued = self.queued, []
        for call in queued:  # in arrival order, at one `now`
            self.decide(t, call)

    def gc(self, t, gen):
        if gen != self.gen or not self.alive:
            return
        n = t + self.offset
        if self.serving and not self.paused and n >= self.q_end:
            for s in sorted(self.rows):
                r = self.rows[s]
                if r[0] is None or r[2] < n - self.ttl:
                    self.floor = max(self.floor, r[1])
                    del self.rows[s]
                    self.commit_seq += 1
                    if self.bug != "answer_from_unsynced_gc":
                        self.stamp[s] = self.commit_seq
        if t < self.end + 3 * self.ttl:
            self.at(t + 0.1, self.gc, gen)

    # -- one call --
    def arrive(self, t, call):
        if not self.serving or call.gen != self.gen:
            # Refused, or sent to a daemon that died since: its connection
            # is gone, and the call with it.
            self.at(t + 0.0005, self.complete, call, "unknown", "UNAVAILABLE",
                    None)
            return
        self.open.add(call)
        if self.paused:
            self.queued.append(call)
        elif t < self.storage_bad_until and self.rng.random() < 0.7:
            self.at(t + self.lat(), self.deliver, self.gen, call, "unknown",
                    None)
        else:
            self.decide(t, call)

    def engine(self, n, call):
        """(result, rtoken, ownership changed) by the engine's rules."""
        s, o, ttl = call.session, call.w.name, self.ttl
        r = self.rows.get(s)
        live = r is not None and r[0] is not None and (
            n < r[2] or (r[3] and n < self.q_end))
        if call.op in ("acquire", "wait"):
            if live:
                if r[0] != o:
                    return ("queued" if call.op == "wait" else "fail"), \
                        None, False
                r[2] = max(n + ttl, r[2] + 1e-9)
                return "ok", r[1], False
            if r is None:
                r = self.rows[s] = [None, self.floor, 0.0, False]
            r[0], r[1], r[2], r[3] = o, r[1] + 1, n + ttl, False
            return "ok", r[1], True
        if call.op == "renew":
            if r is not None and r[0] == o and r[1] == call.token:
                r[2] = max(n + ttl, r[2] + 1e-9)
                return "ok", r[1], False
            return "fail", None, False
        if r is not None and r[0] is not None and (
                self.bug == "release_no_owner_check"
                or (r[0] == o and r[1] == call.token)):
            r[0], r[3] = None, False
            return "ok", None, True
        return "ok", None, False

    def decide(self, t, call):
        result, rtoken, changed = self.engine(t + self.offset, call)
        if result == "queued":
            self.lines.setdefault(call.session, []).append(call)
            self.look_later(t, call.session)
            return
        self.commit_seq += 1
        if changed:
            self.stamp[call.session] = self.commit_seq
        need = self.stamp.get(call.session, 0)
        if need > self.synced_seq and self.bug != "reply_before_sync":
            self.waiting.append((need, call, result, rtoken))
            self.sync(t)
        else:
            self.at(t + self.lat(), self.deliver, self.gen, call, result,
                    rtoken)
        if call.op == "release" and changed:
            self.hand_over(t, call.session)

    def look_later(self, t, s):
        """A look at s's line when its lease may end."""
        r = self.rows[s]
        end = max(r[2], self.q_end if r[3] else r[2]) - self.offset
        self.at(max(t, end) + 1e-4, self.look, self.gen, s)

    def look(self, t, gen, s):
        if gen != self.gen or not self.alive or not self.lines.get(s):
            return
        if self.paused:
            self.deferred.append((self.look, (gen, s)))
            return
        self.hand_over(t, s)
        if self.lines.get(s):
            self.look_later(t, s)

    def hand_over(self, t, s):
        """The lease of s ended: the first in its line takes it."""
        line = self.lines.get(s)
        n = t + self.offset
        r = self.rows.get(s)
        if not line or (r is not None and r[0] is not None and (
                n < r[2] or (r[3] and n < self.q_end))):
            return
        self.decide(t, line.pop(0))

    def cancel(self, t, gen, call):
        """A wait's cancel reaches the daemon: out of its line."""
        if gen != self.gen or not self.alive:
            return
        line = self.lines.get(call.session, [])
        if call in line:
            line.remove(call)
            self.open.discard(call)

    def sync(self, t):
        if self.syncing or not self.waiting:
            return
        self.syncing = True
        snap = (copy.deepcopy(self.rows), self.floor)
        self.at(t + self.rng.uniform(0.002, 0.02), self.synced_done,
                self.gen, snap, self.commit_seq)

    def synced_done(self, t, gen, snap, covers):
        if gen != self.gen or not self.alive:
            return
        if self.paused:
            self.deferred.append((self.synced_done, (gen, snap, covers)))
            return
        self.synced, self.synced_seq, self.syncing = snap, covers, False
        keep = []
        for item in self.waiting:
            if item[0] <= covers:
                self.at(t + self.lat(), self.deliver, gen, *item[1:])
            else:
                keep.append(item)
        self.waiting = keep
        self.sync(t)

    def deliver(self, t, gen, call, result, rtoken):
        if gen != self.gen or not self.alive:
            return
        if self.paused:
            self.deferred.append((self.deliver, (gen, call, result, rtoken)))
            return
        self.open.discard(call)
        if result != "unknown" and self.rng.random() < 0.005:
            return  # the answer is lost: the client's deadline passes
        self.complete(t, call, result,
                      "UNAVAILABLE" if result == "unknown" else CODES[result],
                      rtoken)

    # -- the workers (as tests/faults/workload.py) --
    def send(self, t, w, op, session, token, then):
        call = _Call()
        call.w, call.op, call.session, call.token = w, op, session, token
        call.inv = max(t, w.paused_until)
        call.done, call.then = False, then
        call.gen = self.gen if self.serving else -1
        # One connection per worker: its calls arrive in the order sent.
        arrival = max(call.inv + self.lat(), w.last_arrival + 1e-6)
        w.last_arrival = arrival
        self.at(arrival, self.arrive, call)
        dl = 2 * self.ttl if op == "wait" else self.dl
        self.at(call.inv + dl, self.complete, call, "unknown",
                "DEADLINE_EXCEEDED", None)
        if op == "wait":  # the cancel follows the deadline
            self.at(max(call.inv + dl, arrival) + self.lat(), self.cancel,
                    call.gen, call)

    def complete(self, t, call, result, code, rtoken):
        if call.done:
            return
        call.done = True
        w = call.w
        ret = max(t, w.paused_until)
        self.records.append({
            "type": "op", "proc": w.name, "op": call.op,
            "session": call.session, "owner": w.name, "token": call.token,
            "inv": call.inv, "ret": ret, "result": result, "code": code,
            "rtoken": rtoken if result == "ok" else None})
        call.then(ret, result, rtoken, call)

    def think(self, t, w, lo=0.0, hi=0.02):
        self.at(t + self.ttl * self.rng.uniform(lo, hi), self.step, w)

    def forget(self, w):
        if w.held is not None:
            w.stale = (w.stale + [w.held[:2]])[-4:]
        w.held = None

    def step(self, t, w):
        if t >= self.end:
            if w.held is not None and not w.finished:
                w.finished = True
                s, tok, _ = w.held
                self.send(t, w, "release", s, tok, lambda *a: None)
            return
        rng = self.rng
        if w.held is None:
            if w.stale and rng.random() < 0.15:
                s, tok = rng.choice(w.stale)
                self.send(t, w, rng.choice(["release", "renew"]), s, tok,
                          lambda ret, *a: self.think(ret, w))
                return
            pool = self.hot if rng.random() < 0.85 else self.cold
            s = rng.choice(pool)
            op = "wait" if pool is self.hot and self.waits and \
                rng.random() < self.waits else "acquire"

            def acquired(ret, result, rtoken, call):
                if result == "ok":
                    w.held = (call.session, rtoken, call.inv + self.ttl)
                    self.think(ret, w)
                else:
                    self.think(ret, w, 0.0, 0.3)
            self.send(t, w, op, s, None, acquired)
            return
        s, tok, safe = w.held
        r = rng.random()
        if r < 0.10:
            self.forget(w)
            self.send(t, w, "release", s, tok,
                      lambda ret, *a: self.think(ret, w, 0.0, 0.2))
        elif r < 0.16:  # walks away
            self.forget(w)
            self.think(t, w)
        elif r < 0.22:
            def reacquired(ret, result, rtoken, call):
                if result == "ok":
                    if rtoken != tok:
                        self.forget(w)
                    w.held = (s, rtoken, call.inv + self.ttl)
                self.think(ret, w)
            self.send(t, w, "acquire", s, None, reacquired)
        else:
            def renewed(ret, result, rtoken, call):
                if result == "ok":
                    w.held = (s, tok, call.inv + self.ttl)
                elif result == "fail" or ret >= safe:
                    self.forget(w)
                self.think(ret, w)
            t2 = t + self.ttl * rng.uniform(0.15, 0.4)
            self.at(t2, lambda t3: self.send(t3, w, "renew", s, tok,
                                             renewed))


def simulate(seed, **kw):
    return Sim(seed, **kw).run()


# ---- cases: the clean history -----------------------------------------------

def test_clean_history():
    h = clean_history()
    r = h.check()
    expect(r)
    assert r["restarts"] == 2, r["restarts"]
    assert r["ops"]["by_kind"]["acquire fail FAILED_PRECONDITION"] == 3
    assert r["ops"]["by_kind"]["acquire unknown UNAVAILABLE"] == 1
    assert r["events"]["by_type"] == {"fault_off": 1, "fault_on": 1,
                                      "kill": 2, "power_loss": 1, "start": 2}
    assert r["takeovers"] == 7, r["takeovers"]  # w1:1,3 w2:2,4 w3:1,5 hot-2:2
    rec = r["recovery"]
    assert rec["starts"] == rec["restarts"] == rec["recovered"] == 2, rec
    assert abs(rec["times"][0]["seconds"] - 0.06) < 1e-9, rec  # 2.66 - 2.6
    assert abs(rec["times"][1]["seconds"] - 0.11) < 1e-9, rec  # 7.71 - 7.6
    assert r["input_warnings"]["count"] == 0, r["input_warnings"]
    text = checker.format_report(r)
    for name in checker.INVARIANTS + ("acknowledged_lost",):
        assert name in text, name
    assert "RESULT: consistent" in text


def test_report_independent_of_order():
    def canonical(report):  # without the places ("record N") of records
        for v in report["violations"].values():
            for ex in v["excerpts"]:
                del ex["at"]
        return json.dumps(report, sort_keys=True)
    for h in (clean_history(), _violating_history()):
        want = canonical(h.check())
        for seed in range(3):
            recs = list(h.records)
            random.Random(seed).shuffle(recs)
            got = canonical(checker.check(recs))
            assert got == want, "report changed with the order of records"


# ---- cases: one invariant each ----------------------------------------------

def test_mutual_exclusion():
    h = History()
    a = h.acquire("A", 0.0, 0.01, 5)
    ev = h.event("fault_on", 0.25, "sigstop")
    b = h.acquire("B", 0.5, 0.51, 6)  # A's lease runs until 1.0
    r = h.check()
    expect(r, mutual_exclusion=1)
    expect_excerpt(r, "mutual_exclusion", [a, b], [ev])


def test_mutual_exclusion_counts_token_pairs():
    # Both keep renewing over each other: one pair of tokens, one count.
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.renew("A", 5, 0.05, 0.06)
    h.acquire("B", 0.1, 0.11, 6)
    for i in range(1, 4):
        h.renew("B", 6, 0.3 * i, 0.3 * i + 0.01)
    expect(h.check(), mutual_exclusion=1)  # 5 grants of 6 over 2 of 5
    h.acquire("C", 0.2, 0.21, 7, session="hot-1")
    h.release("C", 7, 0.25, 0.26)
    expect(h.check(), mutual_exclusion=3, stale_renew=3, lost=1)


def test_mutual_exclusion_near_misses():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)          # A may use it until 1.0
    h.acquire("B", 0.75, 1.0, 6)          # answered at 1.0: touching
    # A release cuts the interval, whatever its result.
    h.acquire("A", 0.0, 0.01, 1, session="hot-2")
    h.release("A", 1, 0.25, 0.26, session="hot-2")
    h.acquire("B", 0.375, 0.38, 2, session="hot-2")
    h.acquire("A", 0.0, 0.01, 1, session="hot-3")
    h.release("A", 1, 0.25, 0.26, result="unknown", session="hot-3")
    h.acquire("B", 0.375, 0.38, 2, session="hot-3")
    # An answer that came after the owner's safe deadline: nothing held.
    h.acquire("A", 0.0, 1.25, 1, session="hot-4")
    h.acquire("B", 1.0, 1.01, 2, session="hot-4")
    expect(h.check())


def test_token_unique():
    h = History()
    a = h.acquire("A", 0.0, 0.5, 1)
    b = h.acquire("B", 0.1, 0.2, 1)
    r = h.check()
    expect(r, token_unique=1)
    expect_excerpt(r, "token_unique", [b, a])  # by answer time


def test_token_unique_near_miss():
    h = History()
    h.acquire("A", 0.0, 0.01, 1)
    h.renew("A", 1, 0.3, 0.31)
    h.acquire("A", 0.5, 0.51, 1)
    h.acquire("A", 0.0, 0.01, 1, session="hot-2")  # another session
    expect(h.check())


def test_tokens_rise():
    h = History()
    a = h.acquire("A", 0.0, 0.01, 5)
    h.release("A", 5, 0.1, 0.11)
    ev = h.event("kill", 0.15)
    ev2 = h.event("start", 0.16)
    b = h.acquire("B", 0.2, 0.21, 4)
    r = h.check()
    expect(r, tokens_rise=1, lost=1)
    expect_excerpt(r, "tokens_rise", [a, b], [ev, ev2])
    assert r["acknowledged_lost_examples"] == [a]


def test_tokens_rise_same_owner():
    h = History()
    a = h.acquire("A", 0.0, 0.01, 5)
    h.release("A", 5, 0.1, 0.11)
    b = h.acquire("A", 0.2, 0.21, 4)
    r = h.check()
    expect(r, tokens_rise=1)  # a takeover of one's own: nothing lost
    expect_excerpt(r, "tokens_rise", [a, b])


def test_tokens_rise_near_misses():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.release("A", 5, 0.1, 0.11)
    h.acquire("A", 0.2, 0.21, 5)           # same owner: >= is enough
    h.release("A", 5, 0.3, 0.31)
    h.acquire("B", 0.4, 0.41, 6)           # another owner: greater
    h.acquire("A", 0.0, 0.01, 3, session="hot-2")
    h.renew("A", 3, 0.2, 0.21, session="hot-2")
    h.release("A", 3, 0.3, 0.31, session="hot-2")
    h.acquire("B", 0.4, 0.41, 4, session="hot-2")
    expect(h.check())


def test_acknowledged_lost_counts_each_op_once():
    # The tokens start over (as after a lost floor): every acknowledged
    # takeover by another owner with a token >= the new one is lost, once.
    h = History()
    for i, o in enumerate("ABC"):
        h.acquire(o, i, i + 0.01, i + 1)
        h.release(o, i + 1, i + 0.1, i + 0.11)
    h.acquire("D", 3.0, 3.01, 1)
    h.release("D", 1, 3.1, 3.11)
    h.acquire("E", 4.0, 4.01, 2)
    expect(h.check(), token_unique=2, tokens_rise=2, lost=3)


def test_same_owner_keeps_token():
    h = History()
    g = h.acquire("A", 0.0, 0.01, 5)      # held until 1.0
    b = h.acquire("A", 0.5, 1.0, 6)       # answered at 1.0: still live
    r = h.check()
    expect(r, same_owner_keeps_token=1)
    expect_excerpt(r, "same_owner_keeps_token", [g, b])


def test_same_owner_keeps_token_with_overlap():
    # The usual shape: the new token's interval overlaps the old one.
    h = History()
    g = h.acquire("A", 0.0, 0.01, 5)
    b = h.acquire("A", 0.5, 0.51, 6)
    r = h.check()
    expect(r, same_owner_keeps_token=1, mutual_exclusion=1)
    expect_excerpt(r, "same_owner_keeps_token", [g, b])


def test_same_owner_keeps_token_near_misses():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.acquire("A", 0.5, 1.001, 6)         # answered after 1.0: may be new
    h.acquire("A", 0.0, 0.01, 5, session="hot-2")
    h.release("A", 5, 0.25, 0.26, result="unknown", session="hot-2")
    h.acquire("A", 0.375, 0.38, 6, session="hot-2")  # after a release
    h.acquire("A", 0.0, 0.01, 5, session="hot-3")
    h.renew("A", 5, 0.5, 0.51, session="hot-3")
    h.acquire("A", 0.75, 0.76, 5, session="hot-3")   # keeps it
    expect(h.check())


def test_stale_renew():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    a = h.acquire("B", 1.5, 1.51, 6)       # after A's lease ended (1.0)
    h.release("B", 6, 1.6, 1.61)
    ev = h.event("kill", 1.75)
    ev2 = h.event("start", 1.875)
    r_ = h.renew("A", 5, 2.0, 2.01)        # the takeover was acknowledged
    r = h.check()
    expect(r, stale_renew=1, lost=1)
    expect_excerpt(r, "stale_renew", [a, r_], [ev, ev2])
    assert r["acknowledged_lost_examples"] == [a]


def test_stale_renew_near_misses():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.acquire("B", 1.5, 1.51, result="unknown")  # may not have happened
    h.renew("A", 5, 2.0, 2.01)                   # a reclaim
    h.acquire("A", 0.0, 0.01, 5, session="hot-2")
    h.acquire("B", 1.5, 1.5, 6, session="hot-2")
    h.release("B", 6, 1.5, 1.52, session="hot-2")
    h.renew("A", 5, 1.5, 1.53, session="hot-2")  # sent as B learned it
    expect(h.check())


def test_release_lost():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    x = h.release("A", 5, 0.1, 0.11)
    ev = h.event("power_loss", 0.15)
    r_ = h.renew("A", 5, 0.2, 0.21)
    r = h.check()
    expect(r, release_lost=1, lost=1)
    expect_excerpt(r, "release_lost", [x, r_], [ev])
    assert r["acknowledged_lost_examples"] == [x]


def test_release_lost_near_misses():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.release("A", 5, 0.1, 0.11, result="unknown")
    h.renew("A", 5, 0.2, 0.21)               # the release may not have run
    h.acquire("A", 0.0, 0.01, 5, session="hot-2")
    h.release("A", 4, 0.1, 0.11, session="hot-2")  # another token
    h.renew("A", 5, 0.2, 0.21, session="hot-2")
    expect(h.check())


def _quarantine_base(kill=0.125, start=0.25):
    h = History()
    g = h.acquire("A", 0.0, 0.01, 5)  # A may use it until 1.0
    k = h.event("kill", kill, "rc=-9")
    s = h.event("start", start)
    return h, g, k, s


def test_restart_quarantine():
    h, g, k, s = _quarantine_base()
    b = h.acquire("B", 1.0, 1.01, 6)  # quarantine until 1.25
    r = h.check()
    expect(r, restart_quarantine=1)
    expect_excerpt(r, "restart_quarantine", [g, b], [k, s])


def test_restart_quarantine_at_its_end():
    h, g, k, s = _quarantine_base()
    h.acquire("B", 1.125, 1.25, 6)    # answered at S + TTL
    expect(h.check())


def test_restart_quarantine_collectable_row():
    h, g, k, s = _quarantine_base(kill=2.0, start=2.125)  # g.inv + 2 TTL
    h.acquire("B", 2.25, 2.26, 6)
    expect(h.check())
    h, g, k, s = _quarantine_base(kill=1.875, start=2.0)  # just before
    h.acquire("B", 2.25, 2.26, 6)
    expect(h.check(), restart_quarantine=1)


def test_restart_quarantine_released_before():
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.release("A", 5, 0.0625, 0.07, result="unknown")  # before the kill
    h.event("kill", 0.125)
    h.event("start", 0.25)
    h.acquire("B", 1.0, 1.01, 6)
    expect(h.check())


def test_restart_quarantine_released_after_restart():
    h, g, k, s = _quarantine_base()
    h.release("A", 5, 0.5, 0.51)       # a released lease is not held
    h.acquire("B", 0.625, 0.63, 6)
    expect(h.check())


def test_restart_quarantine_hidden_takeover():
    # B's takeover was done (and fsynced) but its answer lost to the kill:
    # after the restart B re-acquires its quarantined row. Not a violation.
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.acquire("B", 1.0625, 1.07, result="unknown", code="UNAVAILABLE")
    h.event("kill", 1.125)
    h.event("start", 1.25)
    h.acquire("B", 1.375, 1.38, 6)
    expect(h.check())
    # But when B's unknown acquire was decided before A's grant (B had a
    # definite answer since), the row at the crash was A's.
    h = History()
    h.acquire("B", 0.0, 0.0625, result="unknown")
    h.acquire("B", 0.07, 0.08, result="fail", session="hot-2")
    g = h.acquire("A", 0.125, 0.13, 5)  # A may use it until 1.125
    h.event("kill", 0.25)
    h.event("start", 0.375)
    b = h.acquire("B", 1.25, 1.26, 6)   # quarantine until 1.375
    r = h.check()
    expect(r, restart_quarantine=1)
    assert r["violations"]["restart_quarantine"]["excerpts"][0]["ops"] \
        == [g, b]


def test_restart_quarantine_hidden_takeover_by_a_wait():
    # As above, but B waited: a definite answer to B since does not say
    # its wait was decided (D2'), so B may hold the row at the crash.
    h = History()
    h.wait("B", 0.0, 0.0625, result="unknown", code="DEADLINE_EXCEEDED")
    h.acquire("B", 0.07, 0.08, result="fail", session="hot-2")
    h.acquire("A", 0.125, 0.13, 5)
    h.event("kill", 0.25)
    h.event("start", 0.375)
    h.acquire("B", 1.25, 1.26, 6)
    expect(h.check())
    # Unless its daemon died before A's grant was sent: decided before.
    h = History()
    h.wait("B", 0.0, 0.0625, result="unknown", code="UNAVAILABLE")
    h.event("kill", 0.07)
    h.event("start", 0.08)
    g = h.acquire("A", 0.125, 0.13, 5)
    h.event("kill", 0.25)
    h.event("start", 0.375)
    b = h.acquire("B", 1.25, 1.26, 6)
    r = h.check()
    expect(r, restart_quarantine=1)
    assert r["violations"]["restart_quarantine"]["excerpts"][0]["ops"] \
        == [g, b]


def test_a_wait_is_an_acquire_in_every_check():
    # An ok wait is a grant, and a takeover: B's wait below overlaps A's
    # hold; and its kind is reported as it came.
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.wait("B", 0.0, 0.5, 6)     # B may use it [0.5, 1.0): A until 1.0
    r = h.check()
    expect(r, mutual_exclusion=1)
    assert r["ops"]["by_kind"] == {"acquire ok OK": 1, "wait ok OK": 1}, \
        r["ops"]["by_kind"]
    # A wait's hold interval ends at its inv + TTL: a long one's is empty.
    h = History()
    h.acquire("A", 0.0, 0.01, 5)
    h.wait("B", 0.0, 1.0, 6)
    expect(h.check())


def test_restart_quarantine_slow_answer():
    # A's answer came late (a paused worker): B's takeover, answered
    # earlier, was decided after it, so B held the row at the crash, and
    # B's release lets C in at once.
    def history(release):
        h = History()
        h.acquire("A", 0.0, 1.5, 5)           # decided early, used never
        h.acquire("B", 1.125, 1.13, 6)        # B may use it until 2.125
        h.event("kill", 1.625)
        h.event("start", 1.75)
        if release:
            h.release("B", 6, 1.875, 1.88)
        h.acquire("C", 2.25, 2.26, 7)         # quarantine until 2.75
        return h
    expect(history(True).check())
    r = history(False).check()
    expect(r, restart_quarantine=1)
    assert "A or B held it" in \
        r["violations"]["restart_quarantine"]["excerpts"][0]["summary"]


def test_restart_quarantine_restart_between():
    # A daemon started between A's grant and the kill may have collected
    # A's row once its own quarantine was over (at 1.25): after a power
    # loss undid A's last renewals, or on a wall clock stepped forward.
    def history(kill2, start2, step=False):
        h = History()
        h.acquire("A", 0.0, 0.01, 5)
        h.event("kill", 0.125)
        if step:
            h.event("clock_step", 0.1875, "+3600")
        h.event("start", 0.25)
        h.event("kill", kill2)
        h.event("start", start2)
        h.acquire("B", kill2 + 0.25, kill2 + 0.26, 6)
        return h
    expect(history(1.25, 1.375).check())
    expect(history(1.5, 1.625, step=True).check())
    expect(history(1.125, 1.1875).check(), restart_quarantine=1)


def test_exit_event_and_odd_records():
    # "exit" (the daemon exited by itself) starts a restart like "kill";
    # odd records are reported as warnings, unknown types ignored.
    h, g, k, s = _quarantine_base()
    h.records[h.records.index(k)] = dict(k, event="exit")
    h.acquire("B", 1.0, 1.01, 6)                 # inside the quarantine
    h.renew("A", 5, 0.5, 0.6)
    h.records[-1]["rtoken"] = 7                  # answered another token
    h.renew("A", 5, 0.55, 0.7, result="fail")    # overlaps A's last call
    h.records.append({"type": "note", "text": "hello"})
    r = h.check()
    assert r["violations"]["restart_quarantine"]["count"] == 1
    w = r["input_warnings"]
    assert w["count"] == 2, w
    assert "answered with token 7" in w["examples"][0], w
    assert "overlap" in w["examples"][1], w
    assert r["ignored_records"] == {"note": 1}, r["ignored_records"]
    assert "input warnings: 2" in checker.format_report(r)


def _violating_history():
    """The clean history, and a takeover of a quarantined lease (hot-3:
    w4 renewed it at 2.0, the daemon died at 2.5 and started at 2.6)."""
    h = clean_history()
    h.acquire("w4", 0.1, 0.11, 1, session="hot-3")
    h.renew("w4", 1, 2.0, 2.01, session="hot-3")
    h.acquire("w3", 3.0, 3.01, 2, session="hot-3")  # before 3.6
    return h


# ---- cases: simulated histories ---------------------------------------------

def test_simulated_correct_service():
    totals = {"unknown": 0, "restarts": 0, "takeovers": 0, "ops": 0}
    for seed in range(6):
        recs = simulate(seed, seconds=80)
        r = checker.check(recs)
        if not r["ok"]:
            raise AssertionError("seed %d:\n%s"
                                 % (seed, checker.format_report(r)))
        assert r["input_warnings"]["count"] == 0, r["input_warnings"]
        totals["unknown"] += sum(n for k, n in r["ops"]["by_kind"].items()
                                 if " unknown " in k)
        totals["restarts"] += r["restarts"]
        totals["takeovers"] += r["takeovers"]
        totals["ops"] += r["ops"]["total"]
    # The model did exercise what the checker has to get right.
    assert totals["unknown"] > 300, totals
    assert totals["restarts"] > 20, totals
    assert totals["takeovers"] > 500, totals


def test_simulated_restarts_only():
    # kill -9 and restarts back to back: quarantines overlap the next kill.
    for seed in range(4):
        recs = simulate(100 + seed, seconds=60,
                        families=("kill9", "restart_stepped"),
                        fault_gap=(0.05, 0.6))
        r = checker.check(recs)
        assert r["ok"], "seed %d:\n%s" % (seed, checker.format_report(r))


def test_simulated_controls():
    # The negative controls of tests/faults/run, in the model.
    want = {
        "release_no_owner_check": ("mutual_exclusion",),
        "forget_tokens": ("tokens_rise", "token_unique"),
        "reply_before_sync": ("tokens_rise", "token_unique", "stale_renew",
                              "release_lost", "mutual_exclusion"),
        "no_quarantine": ("restart_quarantine", "mutual_exclusion"),
    }
    fams = {"release_no_owner_check": (), "forget_tokens": ("kill9",),
            "reply_before_sync": ("kill9",), "no_quarantine": ("kill9",)}
    for bug, names in want.items():
        recs = simulate(7, seconds=40, bug=bug, families=fams[bug])
        r = checker.check(recs)
        hit = [n for n in names if r["violations"][n]["count"]]
        assert hit, "control %s not caught:\n%s" % (
            bug, checker.format_report(r))


def test_simulated_gc_answered_before_sync():
    # leased as it is (daemon/mode_embedded.c): a garbage collection is not an
    # ownership change, so w2's release of its collected row (cold-0,
    # token 16, after a SIGSTOP) is answered before the deletion is
    # synced; a power loss brings the row back, and w2's renewal with
    # token 16 succeeds. The same seed with the collection stamped (the
    # model's default) is consistent.
    recs = simulate(72, seconds=80, bug="answer_from_unsynced_gc", waits=0)
    r = checker.check(recs)
    expect(r, release_lost=1, lost=1)
    ex = r["violations"]["release_lost"]["excerpts"][0]
    assert [(x["owner"], x["op"], x["session"], x["token"])
            for x in ex["ops"]] == [("w2", "release", "cold-0", 16),
                                    ("w2", "renew", "cold-0", 16)], ex
    assert any(e["event"] == "power_loss" for e in ex["events"]), ex
    expect(checker.check(simulate(72, seconds=80, waits=0)))


def test_speed_100k_ops():
    recs = simulate(42, seconds=1500, workers=16, hot=4, cold=12, waits=0)
    nops = sum(1 for x in recs if x["type"] == "op")
    assert nops >= 100000, nops
    t0 = time.monotonic()
    r = checker.check(recs)
    took = time.monotonic() - t0
    print("    %d ops, %d events checked in %.2fs"
          % (nops, r["events"]["total"], took))
    assert r["ok"], checker.format_report(r)
    assert took < 60, took  # generous: the machine may be busy


# ---- cases: the command -----------------------------------------------------

def _write(path, records):
    with open(path, "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")


def _run(*args):
    return subprocess.run([PYTHON, CHECKER] + list(args),
                          capture_output=True, text=True, timeout=60)


def test_command_clean_exit_0_and_json():
    with tempfile.TemporaryDirectory() as d:
        recs = list(clean_history().records)
        random.Random(1).shuffle(recs)
        a, b, out = (os.path.join(d, n) for n in ("a.jsonl", "b.jsonl",
                                                  "report.json"))
        _write(a, recs[:len(recs) // 2])
        _write(b, recs[len(recs) // 2:])
        p = _run(a, b, "--json", out)
        assert p.returncode == 0, p.stdout + p.stderr
        for name in checker.INVARIANTS:
            assert name in p.stdout, name
        with open(out) as f:
            rep = json.load(f)
        assert rep["ok"] is True
        assert rep["ops"]["total"] == 25, rep["ops"]
        assert all(v["count"] == 0 for v in rep["violations"].values())
        assert rep["acknowledged_lost"] == 0


def test_command_violation_exit_1():
    with tempfile.TemporaryDirectory() as d:
        path, out = os.path.join(d, "h.jsonl"), os.path.join(d, "r.json")
        _write(path, _violating_history().records)
        p = _run(path, "--json", out)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "restart_quarantine" in p.stdout
        with open(out) as f:
            rep = json.load(f)
        assert rep["ok"] is False
        counts = {k: v["count"] for k, v in rep["violations"].items()}
        assert counts == dict(counts, restart_quarantine=1) and \
            sum(counts.values()) == 1, counts
        ex = rep["violations"]["restart_quarantine"]["excerpts"][0]
        n = len(_violating_history().records)
        assert ex["at"] == ["%s:%d" % (path, n - 1), "%s:%d" % (path, n)], \
            ex["at"]
        # acknowledged_lost alone fails too.
        h = History()
        h.acquire("A", 0.0, 0.01, 5)
        h.release("A", 5, 0.1, 0.11)
        h.renew("A", 5, 0.2, 0.21)
        _write(path, h.records)
        assert _run(path).returncode == 1


def test_command_bad_input_exit_2():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "h.jsonl")
        with open(path, "w") as f:
            f.write('{"type": "meta", "ttl": 1.0}\n{"type": "op", "op"\n')
        p = _run(path)
        assert p.returncode == 2 and "h.jsonl:2" in p.stderr, p.stderr
        _write(path, [{"type": "op", "proc": "A", "op": "acquire",
                       "session": "s", "owner": "A", "token": None,
                       "inv": 0.0, "ret": 0.1, "result": "ok", "code": "OK",
                       "rtoken": 1}])
        p = _run(path)
        assert p.returncode == 2 and "meta" in p.stderr, p.stderr
    # The module raises InputError, naming the record.
    for bad in ({"result": "maybe"}, {"ret": -1.0}, {"inv": "0"},
                {"token": -3}, {"op": "steal"}):
        h = History()
        h.acquire("A", 0.0, 0.01, 1)
        h.records[-1].update(bad)
        try:
            h.check()
        except checker.InputError as e:
            assert "record 2" in str(e), e
        else:
            raise AssertionError("accepted %s" % bad)


if __name__ == "__main__":
    cases.main(globals())
