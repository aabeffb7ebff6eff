#!/usr/bin/python3
"""The fault campaign's offline history checker (issue 9).

    python3 checker.py HISTORY.jsonl [MORE.jsonl ...] [--json REPORT.json]

Reads the JSON lines that the campaign's workers and runner wrote (any
number of files, lines in any order) and decides whether the history is
consistent with what leased promises (docs/protocol.md). It reads only the
history, never the store, so it judges any backend. As a module:
check(records) returns the report (a dict, see check()), format_report()
renders it. The command prints the report and exits 1 when an invariant
is violated or an acknowledged op was lost, 2 on unreadable input, else 0.

Input
-----
  {"type": "meta", "ttl": 1.0}            the lease TTL, seconds (one value)
  {"type": "op", "proc", "op": acquire|renew|release|wait, "session",
   "owner",
   "token": sent (null for acquire), "inv", "ret": CLOCK_MONOTONIC seconds
   when sent / answered, "result": ok|fail|unknown, "code", "rtoken": the
   token of an OK acquire/renew reply}
  {"type": "event", "event": kill|exit|start|power_loss|clock_step|..., "t",
   "detail"}   kill/exit at t: the daemon was dead by t; start at t: a new
               daemon was spawned at t (it started no earlier)

Records of another type are counted and otherwise ignored. Lines are put
in a canonical order first (by time, then content), so the report does not
depend on the order of files or lines.

Terms
-----
TTL is meta.ttl. A *grant* is an op with result ok and op acquire or
renew; it gives (session, owner, token) with token = rtoken (for a renew
whose reply carries none, the token sent). Its *hold interval* is
[ret, end) with end = min(inv + TTL, inv of the first release (any
result) by the same owner of the same session and token invoked at or
after ret): the owner may use the lease from when it learns of it until
its own safe deadline, the time it sent the request plus the TTL
(docs/protocol.md, "Clocks"), and it stops before it sends a release. The
interval is empty when ret >= end (the answer came too late to use). A
grant is a *takeover* if it is an acquire whose token differs from every
token that owner was granted on that session before (in ret order): the
first time an owner learns a token is always a takeover in this sense.

What soundness rests on (why a correct leased never trips a check):
  D1. The daemon decides each call at one instant d, inv <= d, and an ok
      or fail answer comes after the decision: d <= ret. It decides on its
      own clock, wall time at start plus CLOCK_MONOTONIC elapsed, so
      within one daemon process its time is the history's monotonic time
      up to a constant; a grant decided at d promises the lease until
      d + TTL >= inv + TTL >= end.
  D2. A call with an unknown result may take effect or not, and may take
      effect after its ret (a SIGSTOPped daemon decides what it had read
      once it runs again), but before the daemon decides that worker's
      next call: a worker makes one call at a time on one gRPC channel,
      and the daemon decides calls in arrival order. It takes effect, if
      at all, before its daemon process dies.
  D2'. A wait (an acquire that waits in the session's line) with an
      unknown result may take effect after the worker's next calls were
      decided too: the daemon may grant it as its end reaches it, while
      the worker's next call, sent after the end on the same channel, is
      decided first. It takes effect, if at all, before its daemon
      process dies. Every check treats a wait as an acquire (its hold
      interval from its inv, so a long wait's may be empty); only 7's
      possible holders use D2 for acquires, and there a wait counts as
      one until its daemon died.
  D3. Tokens of a session only go up, and ownership changes only by a
      takeover (to a token greater than any the session had, whoever the
      owner) or a release; a renewal or same-owner re-acquire of a live
      lease keeps the token. An OK takeover or release is fsynced before
      it is answered, and so is every answer decided from an ownership
      change not yet synced (daemon/mode_embedded.c; a start syncs what it
      loaded before it answers), so no answer is ever undone by a crash
      or a power loss; a renewal can be (only its expiry), which the
      restart quarantine covers. (Garbage collection is the exception in
      leased today: see 6.)
  D4. After a start at S, every row that has an owner on disk is held
      (for every other owner; its owner may renew or re-acquire it with
      its token) until its expiry or S + TTL, whichever is later.
      Garbage collection deletes released rows and rows expired for more
      than a TTL, and only after the quarantine ended.
  D5. A deciding takes a positive time: d > inv and ret > d (boundary
      cases where every inequality below is tight cannot happen).

The invariants, exactly as implemented (per session)
-----------------------------------------------------
1. mutual_exclusion: two grants with different tokens have disjoint hold
   intervals (a.ret < b.end and b.ret < a.end is a violation; touching is
   fine). Counted once per (session, pair of tokens).
   Sound: a token changes only by a takeover decided at some d_T (D3).
   For a grant a of the older token decided before it, the takeover needs
   a's lease expired, d_T >= d_a + TTL >= a.inv + TTL >= a.end, or
   released, d_T >= the release's decision >= its inv >= a.end; after a
   crash the quarantine keeps the row held until S + TTL, later than any
   promise made before the crash (D4). A release sent before a, whatever
   its result, took effect before d_a (D2), so it did not free a's lease.
   No grant of the older token is decided after d_T (its renewals fail,
   its owner's acquires get a new token), and every grant b of the newer
   token is answered after d_T: b.ret >= d_T >= a.end.
2. token_unique: each (session, token) is granted to one owner only.
   Sound: a token is created by a takeover for one owner, and renewals
   and re-acquires keep it only for that owner; tokens only rise (D3),
   including across garbage collection (the floor) and power loss (an
   acknowledged takeover is on disk).
3. tokens_rise: for grants a (acquire or renew) and b (acquire) with
   a.ret < b.inv: b.token >= a.token, and b.token > a.token if their
   owners differ. Counted once per acquire b; the excerpt shows the
   earlier grant with the highest token.
   Sound: at d_a the row has a.token, a.ret < b.inv <= d_b, tokens never
   go down (D3); b keeps the current token (its owner's live lease) or
   takes over with a greater one. With another owner, b's token is
   either new (greater) or one b's owner got by a takeover after d_a.
4. same_owner_keeps_token: an ok acquire b by owner o, with a grant g by
   o (g.ret < b.inv) whose hold interval has b.ret <= g.end, returns
   g's token. Counted once per acquire b.
   Sound: d_g <= g.ret < b.inv <= d_b <= b.ret <= g.end <= d_g + TTL, so
   the lease is live at d_b (D5 makes the chain strict somewhere), across
   a restart too (D4); o released it neither after g (that release would
   cut g.end to before b.ret: o's calls do not overlap) nor before it
   with effect after d_g (D2). So b is a re-acquire of a live lease.
   (In practice, with b's interval non-empty, this is also a
   mutual_exclusion violation; alone it shows at b.ret == g.end.)
5. stale_renew: an ok renew r of (s, o, t) with r.inv > a.ret for a
   takeover a on s with a.token > t. Counted once per renew r.
   Sound: at d_a <= a.ret < r.inv <= d_r the row had a.token > t, and
   tokens never go down (D3): the renewal must fail (or the row is gone
   and it fails as well).
6. release_lost: an ok release x of (s, o, t), then an ok renew r of
   (s, o, t) with r.inv > x.ret. Counted once per renew r.
   Sound: x was decided before d_r. If it freed the lease, the release
   is on disk (D3) and a renewal of a released lease fails. If it was a
   no-op, the row had another token (greater: o knew t from a grant, D3)
   or was gone, and a renewal of t fails too.
   Caveat: leased (daemon/mode_embedded.c) does not count a garbage collection
   as a change of owner, so a no-op release of a row collected but not
   yet synced is answered at once; after a power loss the row is back
   (expired, but with its owner and token) and a renewal reclaims it.
   This check reports that (test_checker.py,
   test_simulated_gc_answered_before_sync): a real, if narrow, breach of
   "after a release, Renew with that lease fails".
7. restart_quarantine: for each restart (a kill/exit event at K, the
   earliest since the previous start, and the next start at S) and each
   session s: let G be the grants on s that may have been decided last
   before the death: those answered before K whose ret is at least the
   latest inv among them (g, the one answered last, is one), and those
   sent before K and answered after it. Skip s if, for any g in G, a
   release of (s, g.owner, g.token) was invoked before K (any result: it
   may have freed the row), or the row may have been garbage collected
   before K, that is K >= the collect bound: g.inv + 2 TTL (the row's
   expiry was at least d_g + TTL), or S' + TTL if a daemon started at S'
   in (g.inv, K) and that is earlier (that daemon may see an earlier
   expiry than g's: a power loss undoes unsynced renewals, and on a wall
   clock stepped forward every stored expiry looks earlier; so it may
   collect the row once its own quarantine is over, when every promise
   made before it started has ended). The possible holders H at K are
   the owners of G and every owner whose last unknown-result acquire on
   s before K may have been decided after the first inv in G (its ret is
   later, or no definite answer to that worker came back between its ret
   and that inv; D2), or any of whose unknown-result waits on s before K
   may have been (its daemon died after that inv; D2'): such an acquire
   may have taken the lease over without the owner learning it. Then a takeover grant b on s with
   b.inv >= S and b.ret < S + TTL, by an owner not in H, with no release
   on s by an owner in H invoked in [K, b.ret) (a released lease is not
   quarantined), is a violation. Counted once per (restart, b).
   Sound: the daemon was dead by K, so at the crash the row on disk was
   held by a member of H, unless the row of the grant decided last was
   released or collected (both excluded above). The process that decided
   b started at or after S (b.inv >= S >= K), so by D4 the row was held
   for other owners until at least S + TTL > b.ret >= d_b, unless a
   holder released it first.
8. acknowledged_lost (a count, must be 0): distinct acknowledged ops that
   a later op contradicts: a takeover a that is the earlier grant of a
   tokens_rise violation whose b has another owner, or below a
   stale_renew (a.token > t, a.ret < r.inv); a release x below a
   release_lost (every ok release of that (s, o, t) with ret < r.inv).

Where this differs from the first spec (issue 9), and why:
  - 7 considers every grant that may have been decided last (G), not
    only the one answered last; exempts possible holders that learned
    nothing (H, from unknown acquires) and holders' releases after the
    restart; and lowers the collect bound after an earlier restart.
    Without each, a model of a correct leased (test_checker.py, Sim) is
    reported: a slow answer (a paused worker) to a grant that another
    owner's takeover followed; a takeover done and fsynced whose answer
    was lost to the kill, its owner then re-acquiring its quarantined
    row; a holder releasing during the quarantine; a daemon started
    after a power loss (or on a stepped clock) collecting the row early.
  - 7 takes, for several kills before one start, the earliest (the
    daemon was dead by then).
  - Violations are counted as stated for each invariant; for
    mutual_exclusion per pair of tokens, not per pair of grants
    (renewals every TTL/3 would multiply one fault).
  - Recovery statistics leave out the run's first start.
Recovery time: for each start event at S, the time from S to the earliest
answer (ret) of an ok op invoked at or after S; count, median and max are
over restarts (starts after a kill/exit), not the run's first start.
"""
import argparse
import bisect
import collections
import heapq
import json
import math
import statistics
import sys

INVARIANTS = ("mutual_exclusion", "token_unique", "tokens_rise",
              "same_owner_keeps_token", "stale_renew", "release_lost",
              "restart_quarantine")
OPS = ("acquire", "renew", "release", "wait")
RESULTS = ("ok", "fail", "unknown")
DEATHS = ("kill", "exit")  # events: the daemon was dead by t
MAX_EXCERPTS = 5          # excerpts kept per invariant
MAX_EXCERPT_EVENTS = 12   # events shown per excerpt
MAX_WARNINGS = 10


class InputError(ValueError):
    """The history cannot be read (a malformed record)."""


class Op:
    __slots__ = ("id", "proc", "op", "session", "owner", "token", "inv",
                 "ret", "result", "code", "rtoken", "rec", "src",
                 "gtoken", "end", "takeover", "kind", "wait")

    def __repr__(self):
        return "Op(%s %s %s %s %s..%s %s)" % (self.id, self.owner, self.op,
                                             self.session, self.inv,
                                             self.ret, self.result)


class Event:
    __slots__ = ("t", "event", "detail", "rec", "src")


def _where(src):
    return src if src else "a record"


def _number(rec, key, src):
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) \
            or not math.isfinite(v):
        raise InputError("%s: %r must be a finite number" % (_where(src), key))
    return float(v)


def _string(rec, key, src):
    v = rec.get(key)
    if not isinstance(v, str):
        raise InputError("%s: %r must be a string" % (_where(src), key))
    return v


def _token(rec, key, src):
    v = rec.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError("%s: %r must be null or an integer >= 0"
                         % (_where(src), key))
    return v


def _load(records, sources):
    """Validates the records: (ttl, ops, events, ignored types, warnings),
    ops and events in canonical order, ops numbered 0.. in that order."""
    ttls = set()
    ops, events = [], []
    ignored = collections.Counter()
    warnings = []
    for i, rec in enumerate(records):
        src = sources[i] if sources is not None else "record %d" % (i + 1)
        if not isinstance(rec, dict):
            raise InputError("%s: not a JSON object" % src)
        kind = rec.get("type")
        if kind == "meta":
            ttl = _number(rec, "ttl", src)
            if ttl <= 0:
                raise InputError("%s: ttl must be > 0" % src)
            ttls.add(ttl)
        elif kind == "op":
            o = Op()
            o.rec, o.src = rec, src
            o.proc, o.op, o.session, o.owner, o.result = (
                rec.get("proc"), rec.get("op"), rec.get("session"),
                rec.get("owner"), rec.get("result"))
            o.inv, o.ret = rec.get("inv"), rec.get("ret")
            if not (o.op in OPS and o.result in RESULTS
                    and type(o.proc) is str and type(o.session) is str
                    and type(o.owner) is str and type(o.inv) is float
                    and type(o.ret) is float and math.isfinite(o.inv)
                    and math.isfinite(o.ret)):
                # The slow path, for the message (or an int time).
                o.proc = _string(rec, "proc", src)
                o.op = _string(rec, "op", src)
                if o.op not in OPS:
                    raise InputError("%s: unknown op %r" % (src, o.op))
                o.session = _string(rec, "session", src)
                o.owner = _string(rec, "owner", src)
                o.inv = _number(rec, "inv", src)
                o.ret = _number(rec, "ret", src)
                o.result = _string(rec, "result", src)
                if o.result not in RESULTS:
                    raise InputError("%s: unknown result %r"
                                     % (src, o.result))
            o.token = _token(rec, "token", src)
            # A wait (leased.v1.Leases/Wait) is an acquire in every check
            # (see "Waits" above), but D2's order.
            o.kind, o.wait = o.op, o.op == "wait"
            if o.wait:
                o.op = "acquire"
            if o.ret < o.inv:
                raise InputError("%s: ret < inv" % src)
            code = rec.get("code")
            o.code = code if isinstance(code, str) else str(code)
            o.rtoken = _token(rec, "rtoken", src)
            o.gtoken = None
            o.takeover = False
            o.end = None
            if o.result == "ok" and o.op != "release":
                o.gtoken = o.rtoken if o.rtoken is not None else (
                    o.token if o.op == "renew" else None)
            ops.append(o)
        elif kind == "event":
            e = Event()
            e.rec, e.src = rec, src
            e.t = _number(rec, "t", src)
            e.event = _string(rec, "event", src)
            e.detail = rec.get("detail", "")
            events.append(e)
        else:
            ignored[str(kind)] += 1
    if len(ttls) != 1:
        raise InputError("want exactly one meta ttl, found %s"
                         % (sorted(ttls) or "none"))

    def k(t):
        return -1 if t is None else t
    ops.sort(key=lambda o: (o.inv, o.ret, o.owner, o.proc, o.op, o.session,
                            k(o.token), o.result, o.code, k(o.rtoken)))
    for i, o in enumerate(ops):
        o.id = i
    events.sort(key=lambda e: (e.t, e.event,
                               json.dumps(e.rec, sort_keys=True)))
    # Odd records are reported (not fatal). Each owner is one worker
    # making one call at a time (D2 and check 4 rely on it): overlaps mean
    # a broken history writer.
    last = {}
    for o in ops:
        if o.result == "ok" and o.op != "release" and o.gtoken is None:
            warnings.append("%s: ok %s without a token (not counted as a "
                            "grant)" % (o.src, o.op))
        if o.op == "renew" and o.result == "ok" and o.rtoken is not None \
                and o.token is not None and o.rtoken != o.token:
            warnings.append("%s: ok renew of token %d answered with token "
                            "%d" % (o.src, o.token, o.rtoken))
        if o.op != "acquire" and o.token is None:
            warnings.append("%s: %s without a token" % (o.src, o.op))
        p = last.get(o.owner)
        if p is not None and o.inv < p.ret:
            warnings.append("%s: %s's calls overlap (%s)"
                            % (o.src, o.owner, p.src))
        if p is None or o.ret > p.ret:
            last[o.owner] = o
    return ttls.pop(), ops, events, ignored, warnings


class _Violations:
    """The violations of one invariant: a count, and the data for the
    excerpts of the first few (by time)."""

    def __init__(self):
        self.count = 0
        self.items = []  # (time, op ids, summary, ops, extra events)

    def add(self, time, summary, ops, extra=()):
        self.count += 1
        self.items.append((time, tuple(o.id for o in ops), summary, ops,
                           tuple(extra)))


def _fmt_t(t):
    return "%.3f" % t


def check(records, sources=None):
    """Checks a history (an iterable of dicts, in any order; sources: an
    optional parallel list of "file:line" strings for the excerpts).
    Raises InputError on a malformed record. Returns the report, a dict:

      ttl, ops {total, by_kind {"acquire ok OK": n}}, events {total,
      by_type}, sessions, owners, grants, takeovers, restarts,
      violations {invariant: {count, excerpts [{summary, ops [records],
      at [sources], events [records], events_omitted}]}},
      acknowledged_lost, acknowledged_lost_examples [records],
      recovery {starts, restarts, recovered, median, max (over restarts),
      times [{start, restart, seconds or null}]},
      input_warnings {count, examples}, ignored_records {type: n}, ok.
    """
    records = list(records)
    ttl, ops, events, ignored, warnings = _load(records, sources)

    # ---- indexes --------------------------------------------------------
    grants = [o for o in ops if o.gtoken is not None]
    grants.sort(key=lambda o: (o.ret, o.id))
    by_session = collections.defaultdict(list)   # s -> grants by ret
    by_sess_owner = collections.defaultdict(list)  # (s, o) -> grants by ret
    for g in grants:
        by_session[g.session].append(g)
        by_sess_owner[(g.session, g.owner)].append(g)
    release_invs = collections.defaultdict(list)  # (s, o, t) -> invs
    owner_release_invs = collections.defaultdict(list)  # (s, o) -> invs
    ok_releases = collections.defaultdict(list)   # (s, o, t) -> by ret
    unknown_acquires = collections.defaultdict(list)  # (s, o) -> by inv
    answered = collections.defaultdict(list)  # o -> its ops, by inv
    for o in ops:  # ops are in inv order
        if o.op == "release":
            owner_release_invs[(o.session, o.owner)].append(o.inv)
            if o.token is not None:
                release_invs[(o.session, o.owner, o.token)].append(o.inv)
                if o.result == "ok":
                    ok_releases[(o.session, o.owner, o.token)].append(o)
        elif o.op == "acquire" and o.result == "unknown":
            unknown_acquires[(o.session, o.owner)].append(o)
        # Decided by the daemon's loop and answered (D2's ordering).
        if o.result == "ok" or o.code == "FAILED_PRECONDITION":
            answered[o.owner].append(o)
    for lst in ok_releases.values():
        lst.sort(key=lambda o: (o.ret, o.id))

    # Hold intervals and takeovers.
    for g in grants:
        g.end = g.inv + ttl
        invs = release_invs.get((g.session, g.owner, g.gtoken))
        if invs:
            i = bisect.bisect_left(invs, g.ret)
            if i < len(invs) and invs[i] < g.end:
                g.end = invs[i]
    for s, gs in by_session.items():
        seen = collections.defaultdict(set)  # owner -> tokens granted
        for g in gs:
            g.takeover = g.op == "acquire" and g.gtoken not in seen[g.owner]
            seen[g.owner].add(g.gtoken)

    v = {name: _Violations() for name in INVARIANTS}
    lost = set()  # ids of acknowledged takeovers and releases contradicted
    sessions = sorted(by_session)

    # ---- 1. mutual_exclusion: a sweep in ret order ------------------------
    for s in sessions:
        active = {}  # token -> its grant with the latest end > now
        pairs = set()
        for b in by_session[s]:
            if b.end <= b.ret:
                continue  # an empty interval overlaps nothing
            for t in [t for t, a in active.items() if a.end <= b.ret]:
                del active[t]
            for t in sorted(active):
                if t == b.gtoken:
                    continue
                pair = (min(t, b.gtoken), max(t, b.gtoken))
                if pair in pairs:
                    continue
                pairs.add(pair)
                a = active[t]
                v["mutual_exclusion"].add(b.ret, (
                    "%s: %s's token %d held [%s, %s) overlaps %s's token %d "
                    "held [%s, %s)" % (s, a.owner, a.gtoken, _fmt_t(a.ret),
                                       _fmt_t(a.end), b.owner, b.gtoken,
                                       _fmt_t(b.ret), _fmt_t(b.end))), [a, b])
            cur = active.get(b.gtoken)
            if cur is None or b.end > cur.end:
                active[b.gtoken] = b

    # ---- 2. token_unique --------------------------------------------------
    firsts = collections.defaultdict(dict)  # (s, t) -> owner -> 1st grant
    for g in grants:
        firsts[(g.session, g.gtoken)].setdefault(g.owner, g)
    for (s, t), by_owner in sorted(firsts.items()):
        if len(by_owner) > 1:
            gs = sorted(by_owner.values(), key=lambda g: (g.ret, g.id))
            v["token_unique"].add(gs[1].ret, "%s: token %d granted to %s" % (
                s, t, ", ".join(g.owner for g in gs)), gs)

    # ---- 3. tokens_rise, and 5. stale_renew: sweeps in inv order ---------
    for s in sessions:
        gs = by_session[s]
        acquires = sorted((g for g in gs if g.op == "acquire"),
                          key=lambda g: (g.inv, g.id))
        best = {}    # owner -> its grant with the highest token so far
        heaps = {}   # owner -> takeovers not yet counted lost (max-heap)
        i = 0
        for b in acquires:
            while i < len(gs) and gs[i].ret < b.inv:
                a = gs[i]
                i += 1
                cur = best.get(a.owner)
                if cur is None or a.gtoken > cur.gtoken:
                    best[a.owner] = a
                if a.takeover:
                    heapq.heappush(heaps.setdefault(a.owner, []),
                                   (-a.gtoken, a.id, a))
            w, wkey = None, None
            for o in sorted(best):
                a = best[o]
                if a.gtoken > b.gtoken or (o != b.owner
                                           and a.gtoken == b.gtoken):
                    key = (o == b.owner, -a.gtoken, a.ret, a.id)
                    if wkey is None or key < wkey:
                        w, wkey = a, key
            if w is None:
                continue
            v["tokens_rise"].add(b.ret, (
                "%s: %s acquired token %d after %s had been granted token "
                "%d" % (s, b.owner, b.gtoken, w.owner, w.gtoken)), [w, b])
            for o, h in sorted(heaps.items()):
                if o == b.owner:
                    continue
                while h and -h[0][0] >= b.gtoken:
                    lost.add(heapq.heappop(h)[1])

        takeovers = [g for g in gs if g.takeover]  # by ret
        renews = sorted((g for g in gs if g.op == "renew"),
                        key=lambda g: (g.inv, g.id))
        top, heap, j = None, [], 0
        for r in renews:
            while j < len(takeovers) and takeovers[j].ret < r.inv:
                a = takeovers[j]
                j += 1
                if top is None or a.gtoken > top.gtoken:
                    top = a
                heapq.heappush(heap, (-a.gtoken, a.id, a))
            t = r.token if r.token is not None else r.gtoken
            if top is None or top.gtoken <= t:
                continue
            v["stale_renew"].add(r.ret, (
                "%s: %s renewed token %d after %s's takeover with token %d "
                "was acknowledged" % (s, r.owner, t, top.owner, top.gtoken)),
                [top, r])
            while heap and -heap[0][0] > t:
                lost.add(heapq.heappop(heap)[1])

    # ---- 4. same_owner_keeps_token ----------------------------------------
    for (s, o), gl in sorted(by_sess_owner.items()):
        rets = [g.ret for g in gl]
        for b in gl:
            if b.op != "acquire":
                continue
            j = bisect.bisect_left(rets, b.inv) - 1  # gl[j].ret < b.inv
            while j >= 0 and gl[j].inv + ttl >= b.ret:
                g = gl[j]
                j -= 1
                if g.end >= b.ret and g.gtoken != b.gtoken:
                    v["same_owner_keeps_token"].add(b.ret, (
                        "%s: %s re-acquired its lease (token %d, held until "
                        "%s) and got token %d" % (s, o, g.gtoken,
                                                  _fmt_t(g.end), b.gtoken)),
                        [g, b])
                    break

    # ---- 6. release_lost --------------------------------------------------
    counted = {}  # (s, o, t) -> how many of its ok releases are in `lost`
    for r in sorted((g for g in grants if g.op == "renew"),
                    key=lambda g: (g.inv, g.id)):
        t = r.token if r.token is not None else r.gtoken
        key = (r.session, r.owner, t)
        rl = ok_releases.get(key)
        if not rl:
            continue
        k = bisect.bisect_left([x.ret for x in rl], r.inv)
        if k == 0:
            continue
        x = rl[k - 1]
        v["release_lost"].add(r.ret, (
            "%s: %s renewed token %d after its release was acknowledged"
            % (r.session, r.owner, t)), [x, r])
        for x in rl[counted.get(key, 0):k]:
            lost.add(x.id)
        counted[key] = max(counted.get(key, 0), k)

    # ---- 7. restart_quarantine --------------------------------------------
    restarts = []  # (K, S, kill event, start event)
    death = None
    for e in events:
        if e.event in DEATHS:
            if death is None:
                death = e
        elif e.event == "start":
            if death is not None:
                restarts.append((death.t, e.t, death, e))
            death = None
    start_times = [e.t for e in events if e.event == "start"]
    answered_invs = {o: [x.inv for x in lst] for o, lst in answered.items()}
    unknown_invs = {k: [x.inv for x in lst]
                    for k, lst in unknown_acquires.items()}
    takeovers_by_inv = {}
    for s in sessions:
        tk = sorted((g for g in by_session[s] if g.takeover),
                    key=lambda g: (g.inv, g.id))
        takeovers_by_inv[s] = (tk, [g.inv for g in tk])
    owners_by_session = collections.defaultdict(list)
    for (s, o) in sorted(unknown_acquires):
        owners_by_session[s].append(o)

    def collect_bound(g):
        """Before this time g's row cannot have been garbage collected."""
        bound = g.inv + 2 * ttl
        j = bisect.bisect_right(start_times, g.inv)  # the first start > inv
        if j < len(start_times):
            bound = min(bound, start_times[j] + ttl)
        return bound

    deaths = [e.t for e in events if e.event in DEATHS]

    def may_follow(x, t):
        """Whether unknown op x may have been decided after time t (D2;
        a wait: before its daemon died, D2')."""
        if x.wait:
            i = bisect.bisect_left(deaths, x.inv)
            return i == len(deaths) or deaths[i] > t
        if x.ret > t:
            return True
        lst = answered.get(x.owner)
        if not lst:
            return True
        i = bisect.bisect_left(answered_invs[x.owner], x.ret)
        return i == len(lst) or lst[i].ret > t

    # Per session: rets of the grants (by ret), the running maximum of
    # their invs, and the longest call among them.
    g_rets = {s: [g.ret for g in by_session[s]] for s in sessions}
    g_maxinv = {}
    g_longest = {}
    for s in sessions:
        m, run = -math.inf, []
        for g in by_session[s]:
            m = max(m, g.inv)
            run.append(m)
        g_maxinv[s] = run
        g_longest[s] = max(g.ret - g.inv for g in by_session[s])

    for K, S, kev, sev in restarts:
        for s in sessions:
            gs, rets = by_session[s], g_rets[s]
            # The grants that may have been decided last before the death:
            # every grant answered before K and not before the latest inv
            # among those (that one was decided after every grant answered
            # before its inv), and any grant sent before K and answered
            # after it.
            i = bisect.bisect_left(rets, K)
            cands = gs[bisect.bisect_left(rets, g_maxinv[s][i - 1]):i] \
                if i else []
            g = cands[-1] if cands else None  # the latest answered
            k = i
            while k < len(gs) and gs[k].ret < K + g_longest[s]:
                if gs[k].inv < K:
                    cands.append(gs[k])
                k += 1
            if not cands:
                continue
            if g is None:
                g = cands[0]
            free = False
            for c in cands:
                invs = release_invs.get((s, c.owner, c.gtoken))
                if (invs and invs[0] < K) or K >= collect_bound(c):
                    free = True
                    break
            if free:
                continue
            holders = {c.owner for c in cands}
            first = min(c.inv for c in cands)
            for o in owners_by_session.get(s, ()):
                ua = unknown_acquires[(s, o)]
                n = bisect.bisect_left(unknown_invs[(s, o)], K)
                # The last acquire (D2 orders the earlier ones before
                # it), and every wait (D2').
                last = next((x for x in reversed(ua[:n]) if not x.wait),
                            None)
                if any(may_follow(x, first) for x in ua[:n]
                       if x.wait or x is last):
                    holders.add(o)
            tk, tk_invs = takeovers_by_inv[s]
            j = bisect.bisect_left(tk_invs, S)
            while j < len(tk) and tk[j].inv < S + ttl:
                b = tk[j]
                j += 1
                if b.ret >= S + ttl or b.owner in holders:
                    continue
                freed = False
                for h in sorted(holders):
                    ri = owner_release_invs.get((s, h))
                    if ri:
                        n = bisect.bisect_left(ri, K)
                        if n < len(ri) and ri[n] < b.ret:
                            freed = True
                            break
                if freed:
                    continue
                v["restart_quarantine"].add(b.ret, (
                    "%s: %s took over (token %d) at %s, before the "
                    "quarantine of the restart at %s ended (%s); %s held "
                    "it (token %d) when the daemon died by %s" % (
                        s, b.owner, b.gtoken, _fmt_t(b.ret), _fmt_t(S),
                        _fmt_t(S + ttl), " or ".join(sorted(holders)),
                        g.gtoken, _fmt_t(K))),
                    [g, b], [kev, sev])

    # ---- recovery times ---------------------------------------------------
    ok_ops = [o for o in ops if o.result == "ok"]  # by inv
    ok_invs = [o.inv for o in ok_ops]
    suffix_min = [math.inf] * (len(ok_ops) + 1)
    for i in range(len(ok_ops) - 1, -1, -1):
        suffix_min[i] = min(ok_ops[i].ret, suffix_min[i + 1])
    times = []
    restart_starts = {S for _, S, _, _ in restarts}
    for S in start_times:
        first = suffix_min[bisect.bisect_left(ok_invs, S)]
        times.append({"start": S, "restart": S in restart_starts,
                      "seconds": None if first == math.inf else first - S})
    # The first start of a run is no recovery (the workers start too).
    rec_secs = [x["seconds"] for x in times
                if x["restart"] and x["seconds"] is not None]

    # ---- the report -------------------------------------------------------
    ev_times = [e.t for e in events]

    def excerpt(summary, xops, extra):
        lo = min(o.inv for o in xops)
        hi = max(o.ret for o in xops)
        evs = events[bisect.bisect_left(ev_times, lo):
                     bisect.bisect_right(ev_times, hi)]
        for e in extra:  # the restart's events, even outside the window
            if e not in evs:
                evs.append(e)
        evs.sort(key=lambda e: e.t)
        shown = evs[:MAX_EXCERPT_EVENTS]
        return {"summary": summary,
                "ops": [o.rec for o in xops],
                "at": [o.src for o in xops],
                "events": [e.rec for e in shown],
                "events_omitted": len(evs) - len(shown)}

    violations = {}
    for name in INVARIANTS:
        items = sorted(v[name].items, key=lambda x: (x[0], x[1]))
        violations[name] = {
            "count": v[name].count,
            "excerpts": [excerpt(summ, xops, extra)
                         for _, _, summ, xops, extra in items[:MAX_EXCERPTS]]}
    by_kind = collections.Counter("%s %s %s" % (o.kind, o.result, o.code)
                                  for o in ops)
    by_type = collections.Counter(e.event for e in events)
    lost_ops = [ops[i] for i in sorted(lost)]
    report = {
        "ttl": ttl,
        "ops": {"total": len(ops), "by_kind": dict(sorted(by_kind.items()))},
        "events": {"total": len(events),
                   "by_type": dict(sorted(by_type.items()))},
        "sessions": len({o.session for o in ops}),
        "owners": len({o.owner for o in ops}),
        "grants": len(grants),
        "takeovers": sum(1 for g in grants if g.takeover),
        "restarts": len(restarts),
        "violations": violations,
        "acknowledged_lost": len(lost),
        "acknowledged_lost_examples": [o.rec for o in lost_ops[:MAX_EXCERPTS]],
        "recovery": {
            "starts": len(times),
            "restarts": len(restarts),
            "recovered": len(rec_secs),
            "median": statistics.median(rec_secs) if rec_secs else None,
            "max": max(rec_secs) if rec_secs else None,
            "times": times,
        },
        "input_warnings": {"count": len(warnings),
                           "examples": warnings[:MAX_WARNINGS]},
        "ignored_records": dict(sorted(ignored.items())),
    }
    report["ok"] = failed(report) == []
    return report


def failed(report):
    """The names of the violated invariants, and "acknowledged_lost" if
    acknowledged ops were lost: empty when the history is consistent."""
    out = [n for n in INVARIANTS if report["violations"][n]["count"]]
    if report["acknowledged_lost"]:
        out.append("acknowledged_lost")
    return out


def format_report(report):
    """The report as text: a few lines per section."""
    r = report
    lines = ["history: %d ops by %d owners on %d sessions, %d events, "
             "TTL %gs" % (r["ops"]["total"], r["owners"], r["sessions"],
                          r["events"]["total"], r["ttl"])]
    lines.append("ops (op result code):")
    kinds = sorted(r["ops"]["by_kind"].items())
    for i in range(0, len(kinds), 3):
        lines.append("  " + "   ".join("%-34s" % ("%s %d" % kv)
                                       for kv in kinds[i:i + 3]).rstrip())
    lines.append("events: " + (", ".join(
        "%s %d" % kv for kv in r["events"]["by_type"].items()) or "none"))
    lines.append("grants %d, takeovers %d, restarts %d"
                 % (r["grants"], r["takeovers"], r["restarts"]))
    lines.append("invariants (violations):")
    for name in INVARIANTS:
        x = r["violations"][name]
        lines.append("  %-24s %d" % (name, x["count"]))
        for ex in x["excerpts"][:3]:
            lines.append("    - " + ex["summary"])
            for rec, at in zip(ex["ops"], ex["at"]):
                lines.append("      op %s  (%s)" % (
                    json.dumps(rec, sort_keys=True), at))
            for rec in ex["events"]:
                lines.append("      ev %s" % json.dumps(rec, sort_keys=True))
            if ex["events_omitted"]:
                lines.append("      ... %d more events"
                             % ex["events_omitted"])
        if x["count"] > 3:
            lines.append("    ... %d more" % (x["count"] - 3))
    lines.append("acknowledged_lost: %d" % r["acknowledged_lost"])
    for rec in r["acknowledged_lost_examples"][:3]:
        lines.append("  op %s" % json.dumps(rec, sort_keys=True))
    rc = r["recovery"]
    if rc["recovered"]:
        lines.append("recovery after %d restarts: %d recovered (first ok "
                     "answer), median %.3fs, max %.3fs"
                     % (rc["restarts"], rc["recovered"], rc["median"],
                        rc["max"]))
    else:
        lines.append("recovery after %d restarts: none recovered"
                     % rc["restarts"])
    w = r["input_warnings"]
    if w["count"]:
        lines.append("input warnings: %d" % w["count"])
        for text in w["examples"][:3]:
            lines.append("  " + text)
    if r["ignored_records"]:
        lines.append("ignored records: " + ", ".join(
            "%s %d" % kv for kv in r["ignored_records"].items()))
    bad = failed(r)
    lines.append("RESULT: " + ("consistent" if not bad
                               else "VIOLATED: " + ", ".join(bad)))
    return "\n".join(lines)


def read_files(paths):
    """(records, sources) from JSON-lines files; InputError if a line is
    not JSON."""
    records, sources = [], []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except ValueError as e:
                    raise InputError("%s:%d: %s" % (path, n, e))
                sources.append("%s:%d" % (path, n))
    return records, sources


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Check a fault-campaign history of leased "
                    "(see the top of checker.py).")
    p.add_argument("files", nargs="+", metavar="HISTORY.jsonl")
    p.add_argument("--json", metavar="REPORT.json",
                   help="also write the report as JSON here")
    args = p.parse_args(argv)
    try:
        records, sources = read_files(args.files)
        report = check(records, sources)
    except (InputError, OSError) as e:
        print("checker: %s" % e, file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
