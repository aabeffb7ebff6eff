#!/usr/bin/python3
"""The holders' side of the history checker: end-to-end exclusion.

    python3 holders_checker.py DIR [--json REPORT.json]

checker.py proves leased's half of exclusion: no two owners of a live
lease. This module proves the holders' half, over what the holders'
campaign (tests/faults/holders) leaves in DIR: that the holders this
project ships (liblease's keeper, `leasectl hold`, the fence) stop
working before leased could grant their session to anyone else,
whatever fails, and that a late write after a pause of a whole holder is
refused by the fence. It reads only what the holders and leased wrote,
never asks leased. As a module: load(DIR) reads a history, check(history)
returns the report (a dict), format_report() renders it. The command
prints the report and exits 1 when an invariant is violated, 2 on
unreadable input, else 0.

Input (DIR)
-----------
  meta.json         {"ttl_ns": the TTL leased runs with,
                     "clock_drift_ns": how far (wall - monotonic) moved
                     during the run, as the runner measured it}
  leased-*.log      leased's logs: every takeover's audit line,
                      ... msg=takeover identity="" session="S" owner="O"
                      token=N expires=2026-12-04T17:10:52.123Z
                    and every release's (msg=release ... token=N)
  units.jsonl       one line per unit of work, from the holders:
                    {"kind": "unit", "session", "owner", "token", "pid",
                     "start", "end": CLOCK_REALTIME ns, "write":
                     "accepted"|"refused"}
  resource-S.log    session S's resource, one line per accepted write, in
                    the order written: "TOKEN OWNER PID WALL_NS"
  events.jsonl      the runner's faults, wall-clock ns:
                    {"kind": "event", "event": NAME, "t", "t_end"?, ...};
                    the checker reads these three:
                      pause      a whole holder stopped at t and running
                                 again (every part of it) at t_end:
                                 "pids" (every process stopped), "owner"
                                 (a hold's owner, whose command's units
                                 carry it) or null
                      hold_kill  `leasectl hold` SIGKILLed at t: "owner"
                                 (its owner: its command's units), "pid",
                                 "pgid"
                      survivor   a process of the run still there after
                                 the run: "pid", "cmdline"
                    and counts the others (leased_stop, leased_kill,
                    partition, ...) by name.

Terms
-----
A *grant* is a takeover line: (session, owner, token, t) with
t = expires - TTL. leased decides a takeover at exactly expires - TTL on
its clock, the host's wall clock (wall time at its start plus monotonic
time elapsed; over PostgreSQL the database's clock_timestamp()), the
clock the holders' units are timed with; the log rounds expires down to
the millisecond, so the decision came in [t, t + 1 ms). The campaign
never steps the wall clock, and meta's clock_drift_ns bounds how far the
two clocks' readings may differ besides. The *tolerance* is 1 ms plus
that drift: an end within it of a grant is not counted. Lines are read
from leased's log, not from the replies, so grants whose reply was lost
count too (a takeover on disk whose line a kill -9 cut off is missed:
that loses a check, never adds a violation; a unit token with no logged
grant is listed as a warning).

A unit is *paused* when a pause event covers it: its pid is among the
event's pids, or its owner is the event's owner, and it overlaps
[t, t_end + SLACK]: the holder was stopped as a whole during the unit, or
ran again less than SLACK (100 ms) before the unit began (time for a
`leasectl hold` continued last to kill the command it lets run first).
Only the fence can stop such a unit's write.

The invariants
--------------
H1 exclusion: no unit that is not paused ends more than the tolerance
   after a grant of the same session with a greater token. Counted per
   unit; the report gives the worst lateness (end - grant).
   Why a correct holder never breaks it: the keeper trusts a lease until
   the send time of its last successful grant + TTL - margin; leased
   decided that grant after it was sent, so the lease is live on
   leased's clock until then, and no takeover by a greater token comes
   before. `leasectl hold` kills its command's group by that deadline; a
   keeper's user does units only while lease_keeper_valid() says true.
H2 fence: in each resource log, tokens never go down: a line with a
   token lower than an earlier line's is a stale write accepted (counted
   per line). Equal tokens are the same holder. The report also counts
   the late writes refused: refused units that are paused.
   Why: the fence lets a writer in only with a token at least the
   highest recorded, under its lock, in the order of the log.
H3 no survivor: no unit of a hold's command (its owner) ends more than
   SLACK (100 ms, for the kill to land) after that hold was SIGKILLed;
   and no process of the run is left after it (each survivor event is a
   violation). Why: CMD has PR_SET_PDEATHSIG, and the guardian kills the
   whole group when leasectl dies.

The margin: for each unit that is not paused, the time from its end to
the first grant of its session with a greater token (none if no such
grant came). The report gives the smallest, apart for leases that
ended by a release (the next grant can follow at once) and by an expiry
(the deadline rule's own margin), with the units that set them; and
the latter by kind of holder (the owner's first word: hold, keep, ...).
"""
import argparse
import bisect
import calendar
import collections
import glob
import json
import os
import re
import sys
import time

INVARIANTS = ("exclusion", "fence", "no_survivor")
MS = 1000000
RESOLUTION_NS = 1 * MS  # leased's log gives expiries in whole ms
SLACK_NS = 100 * MS     # a kill landing; a hold continued last acting
MAX_EXCERPTS = 5
AUDIT = re.compile(
    r'^ts=(\S+) level=\w+ msg=(takeover|release) identity="[^"]*" '
    r'session="([^"]*)" owner="([^"]*)" token=(\d+)(?: expires=(\S+))?')


class InputError(ValueError):
    """The history cannot be read."""


class Grant:
    __slots__ = ("session", "owner", "token", "t", "src")

    def __init__(self, session, owner, token, t, src=""):
        self.session, self.owner, self.token, self.t, self.src = (
            session, owner, token, t, src)


class Release(Grant):
    __slots__ = ()


class Write:
    """One line of a resource log."""
    __slots__ = ("session", "token", "owner", "pid", "t", "src")

    def __init__(self, session, token, owner, pid, t, src=""):
        self.session, self.token, self.owner, self.pid, self.t, self.src = (
            session, token, owner, pid, t, src)


def parse_time(text):
    """leased's log time (2026-12-04T17:10:52.123Z) in ns since the epoch."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z", text)
    if m is None:
        raise InputError("not a log time: %r" % text)
    secs = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    return secs * 1000000000 + int(m.group(2)) * MS


def fmt_t(ns):
    """A wall-clock time for the report: HH:MM:SS.mmm (UTC)."""
    return time.strftime("%H:%M:%S", time.gmtime(ns // 1000000000)) + \
        ".%03d" % (ns % 1000000000 // MS)


def fmt_ms(ns):
    return "%.1f ms" % (ns / MS)


def parse_leased_log(path, ttl_ns):
    """(grants, releases) from one leased log."""
    grants, releases = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = AUDIT.match(line)
            if m is None:
                continue
            src = "%s:%d" % (os.path.basename(path), n)
            ts, what, session, owner, token, expires = m.groups()
            if what == "takeover":
                if expires is None:
                    raise InputError("%s: a takeover without expires=" % src)
                grants.append(Grant(session, owner, int(token),
                                    parse_time(expires) - ttl_ns, src))
            else:
                releases.append(Release(session, owner, int(token),
                                        parse_time(ts), src))
    return grants, releases


def parse_resource_log(path, session):
    writes = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            src = "%s:%d" % (os.path.basename(path), n)
            parts = line.split()
            if len(parts) != 4:
                raise InputError("%s: not TOKEN OWNER PID WALL_NS" % src)
            try:
                writes.append(Write(session, int(parts[0]), parts[1],
                                    int(parts[2]), int(parts[3]), src))
            except ValueError:
                raise InputError("%s: not TOKEN OWNER PID WALL_NS" % src)
    return writes


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise InputError("%s:%d: %s" % (path, n, e))
            if not isinstance(rec, dict):
                raise InputError("%s:%d: not a JSON object" % (path, n))
            rec["src"] = "%s:%d" % (os.path.basename(path), n)
            out.append(rec)
    return out


def load(directory):
    """The history a campaign left in directory, as check() takes it."""
    with open(os.path.join(directory, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    ttl_ns = meta.get("ttl_ns")
    if not isinstance(ttl_ns, int) or ttl_ns <= 0:
        raise InputError("meta.json: ttl_ns must be a positive integer")
    grants, releases = [], []
    for path in sorted(glob.glob(os.path.join(directory, "leased-*.log"))):
        g, r = parse_leased_log(path, ttl_ns)
        grants += g
        releases += r
    writes = []
    for path in sorted(glob.glob(os.path.join(directory, "resource-*.log"))):
        session = os.path.basename(path)[len("resource-"):-len(".log")]
        writes += parse_resource_log(path, session)
    return {"ttl_ns": ttl_ns,
            "clock_drift_ns": int(meta.get("clock_drift_ns", 0)),
            "grants": grants, "releases": releases, "writes": writes,
            "units": read_jsonl(os.path.join(directory, "units.jsonl")),
            "events": read_jsonl(os.path.join(directory, "events.jsonl"))}


def _int(rec, key):
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError("%s: %r must be an integer" % (rec.get("src", rec),
                                                        key))
    return v


class _Tally:
    """One invariant's violations: a count, the worst lateness, and the
    first few excerpts (by time)."""

    def __init__(self):
        self.count = 0
        self.worst = None
        self.items = []

    def add(self, at, late, summary, records):
        self.count += 1
        if late is not None and (self.worst is None or late > self.worst):
            self.worst = late
        self.items.append((at, summary, records))

    def report(self):
        items = sorted(self.items, key=lambda x: (x[0], x[1]))
        return {"count": self.count, "worst_ns": self.worst,
                "excerpts": [{"summary": s, "records": r}
                             for _, s, r in items[:MAX_EXCERPTS]]}


def _grant_rec(g):
    return {"grant": g.session, "owner": g.owner, "token": g.token,
            "t": g.t, "src": g.src}


def check(history):
    """The report on a history (see load() for its shape)."""
    ttl_ns = history["ttl_ns"]
    tolerance = RESOLUTION_NS + max(0, history.get("clock_drift_ns", 0))
    units = history["units"]
    events = history["events"]
    for u in units:
        for key in ("token", "pid", "start", "end"):
            _int(u, key)
        if u.get("write") not in ("accepted", "refused") or \
                not isinstance(u.get("session"), str) or \
                not isinstance(u.get("owner"), str):
            raise InputError("%s: not a unit" % u.get("src", u))
    pauses = [e for e in events if e.get("event") == "pause"]
    kills = [e for e in events if e.get("event") == "hold_kill"]
    survivors = [e for e in events if e.get("event") == "survivor"]
    for e in pauses:
        _int(e, "t")
        _int(e, "t_end")
    for e in kills:
        _int(e, "t")

    # Per session: grants by token, and the earliest time of a grant with
    # a token above each (a suffix minimum), for "the next grant".
    by_session = collections.defaultdict(list)
    for g in history["grants"]:
        by_session[g.session].append(g)
    nexts = {}
    for s, gl in by_session.items():
        gl.sort(key=lambda g: (g.token, g.t))
        first = [None] * (len(gl) + 1)
        for i in range(len(gl) - 1, -1, -1):
            g = gl[i]
            first[i] = g if first[i + 1] is None or g.t < first[i + 1].t \
                else first[i + 1]
        nexts[s] = ([g.token for g in gl], first)

    def next_grant(session, token):
        """The earliest grant of session with a token above token."""
        if session not in nexts:
            return None
        tokens, first = nexts[session]
        return first[bisect.bisect_right(tokens, token)]

    released = {(r.session, r.owner, r.token) for r in history["releases"]}
    granted = {(g.session, g.token) for g in history["grants"]}

    # The pauses by each pid and owner they stopped.
    pauses_of = collections.defaultdict(list)
    for e in pauses:
        for pid in e.get("pids", ()):
            pauses_of[("pid", pid)].append(e)
        if e.get("owner") is not None:
            pauses_of[("owner", e["owner"])].append(e)

    def paused(u):
        for e in pauses_of.get(("pid", u["pid"]), []) + \
                pauses_of.get(("owner", u["owner"]), []):
            if u["start"] < e["t_end"] + SLACK_NS and u["end"] > e["t"]:
                return e
        return None

    v = {name: _Tally() for name in INVARIANTS}
    margins = {"after_expiry": None, "after_release": None}
    by_kind = {}  # after an expiry, by kind of holder (hold, keep, ...)
    counts = collections.Counter()
    warnings = []
    missing = set()
    for u in units:
        counts[u["write"]] += 1
        if (u["session"], u["token"]) not in granted:
            missing.add((u["session"], u["token"]))
        e = paused(u)
        if e is not None:
            counts["paused"] += 1
            if u["write"] == "refused":
                counts["late_refused"] += 1
            continue
        g = next_grant(u["session"], u["token"])
        if g is None:
            continue
        late = u["end"] - g.t
        if late > tolerance:
            v["exclusion"].add(u["end"], late, (
                "%s: a unit of %s (token %d, pid %d) ended at %s, %s after "
                "the grant of token %d to %s" % (
                    u["session"], u["owner"], u["token"], u["pid"],
                    fmt_t(u["end"]), fmt_ms(late), g.token, g.owner)),
                [u, _grant_rec(g)])
            continue
        how = "after_release" if (u["session"], u["owner"], u["token"]) \
            in released else "after_expiry"
        m = margins[how]
        if m is None or -late < m["ns"]:
            margins[how] = {"ns": -late, "unit": u, "grant": _grant_rec(g)}
        kind = u["owner"].split("-")[0]
        if how == "after_expiry" and -late < by_kind.get(kind, -late + 1):
            by_kind[kind] = -late
    for s, t in sorted(missing):
        warnings.append("%s: units with token %d, and no takeover line for "
                        "it in leased's log" % (s, t))

    # H2: each resource log, in the order written.
    by_resource = collections.defaultdict(list)
    for w in history["writes"]:
        by_resource[w.session].append(w)
    for s, wl in sorted(by_resource.items()):
        top = None
        for w in wl:
            if top is not None and w.token < top.token:
                late = w.t - top.t
                v["fence"].add(w.t, late, (
                    "%s: %s (pid %d) wrote with token %d at %s, %s after "
                    "%s wrote with token %d" % (
                        s, w.owner, w.pid, w.token, fmt_t(w.t), fmt_ms(late),
                        top.owner, top.token)),
                    [{"write": w.src, "token": w.token, "owner": w.owner},
                     {"write": top.src, "token": top.token,
                      "owner": top.owner}])
            elif top is None or w.token > top.token:
                top = w

    # H3: a killed hold's command, and survivors.
    by_owner = collections.defaultdict(list)
    for u in units:
        by_owner[u["owner"]].append(u)
    for k in kills:
        for u in by_owner.get(k.get("owner"), ()):
            if u["end"] > k["t"] + SLACK_NS:
                late = u["end"] - k["t"]
                v["no_survivor"].add(u["end"], late, (
                    "%s: a unit of %s (pid %d) ended at %s, %s after its "
                    "hold (pid %s) was killed" % (
                        u["session"], u["owner"], u["pid"], fmt_t(u["end"]),
                        fmt_ms(late), k.get("pid"))), [u, k])
    for e in survivors:
        v["no_survivor"].add(_int(e, "t"), None, (
            "process %s of the run was left after it: %s" % (
                e.get("pid"), e.get("cmdline", "?"))), [e])

    by_type = collections.Counter(e.get("event") for e in events)
    leases = collections.Counter(kind for kind, _ in {
        (u["owner"].split("-")[0], (u["session"], u["owner"], u["token"]))
        for u in units})
    report = {
        "ttl_ns": ttl_ns,
        "tolerance_ns": tolerance,
        "units": {"total": len(units), "accepted": counts["accepted"],
                  "refused": counts["refused"], "paused": counts["paused"]},
        "late_writes_refused": counts["late_refused"],
        "leases_worked": dict(sorted(leases.items())),
        "sessions": len(by_session),
        "grants": len(history["grants"]),
        "releases": len(history["releases"]),
        "writes": len(history["writes"]),
        "events": dict(sorted((k, n) for k, n in by_type.items() if k)),
        "violations": {n: v[n].report() for n in INVARIANTS},
        "margin": margins,
        "margin_after_expiry_by_kind": dict(sorted(by_kind.items())),
        "warnings": warnings,
    }
    report["ok"] = failed(report) == []
    return report


def failed(report):
    """The names of the violated invariants: empty when none is."""
    return [n for n in INVARIANTS if report["violations"][n]["count"]]


def _strip(rec):
    return {k: val for k, val in rec.items() if k != "src"} \
        if isinstance(rec, dict) else rec


def format_report(report):
    r = report
    u = r["units"]
    lines = ["units %d: accepted %d, refused %d (paused %d, late writes "
             "refused %d); resource writes %d"
             % (u["total"], u["accepted"], u["refused"], u["paused"],
                r["late_writes_refused"], r["writes"]),
             "leases worked on (by kind of owner): " + (", ".join(
                 "%s %d" % kv for kv in r["leases_worked"].items()) or "none"),
             "grants %d on %d sessions, releases %d, TTL %gs, tolerance %s"
             % (r["grants"], r["sessions"], r["releases"], r["ttl_ns"] / 1e9,
                fmt_ms(r["tolerance_ns"]))]
    lines.append("invariants (violations):")
    for name in INVARIANTS:
        x = r["violations"][name]
        worst = ", worst lateness %s" % fmt_ms(x["worst_ns"]) \
            if x["worst_ns"] is not None else ""
        lines.append("  %-12s %d%s" % (name, x["count"], worst))
        for ex in x["excerpts"][:3]:
            lines.append("    - " + ex["summary"])
            for rec in ex["records"]:
                lines.append("      %s" % json.dumps(_strip(rec),
                                                     sort_keys=True))
        if x["count"] > 3:
            lines.append("    ... %d more" % (x["count"] - 3))
    for how, words in (("after_expiry", "a lease that ran out"),
                       ("after_release", "a released lease")):
        m = r["margin"][how]
        if m is None:
            lines.append("smallest margin, %s: none seen" % words)
        else:
            lines.append("smallest margin, %s: %s (%s, token %d, to the "
                         "grant of token %d)" % (
                             words, fmt_ms(m["ns"]), m["unit"]["owner"],
                             m["unit"]["token"], m["grant"]["token"]))
    if r["margin_after_expiry_by_kind"]:
        lines.append("  by holder, after a lease ran out: " + ", ".join(
            "%s %s" % (k, fmt_ms(ns)) for k, ns in
            r["margin_after_expiry_by_kind"].items()))
    for w in r["warnings"][:5]:
        lines.append("warning: " + w)
    if len(r["warnings"]) > 5:
        lines.append("warning: ... %d more" % (len(r["warnings"]) - 5))
    bad = failed(r)
    lines.append("RESULT: " + ("consistent" if not bad
                               else "VIOLATED: " + ", ".join(bad)))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Check a holders' campaign history (see the top of "
                    "holders_checker.py).")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", metavar="REPORT.json",
                   help="also write the report as JSON here")
    args = p.parse_args(argv)
    try:
        report = check(load(args.dir))
    except (InputError, OSError, ValueError) as e:
        print("holders_checker: %s" % e, file=sys.stderr)
        return 2
    print(format_report(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)
            f.write("\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
