"""Checks what the fault campaign's watcher (watcher.py) was told against
what leased stored and what its workers were answered:

  W1 no gap, no duplicate: the revisions it got follow each other by one,
     from where it started, across every death of leased;
  W2 told only what is durable: each event it got is the event the store
     holds under that revision at the end (a power loss may undo what was
     not synced; an event told before its sync would then be missing, or
     its revision given to another change);
  W3 every grant told: each acquire or wait answered OK (a lease the
     worker was told it holds) is in the store's events as a GRANTED of
     that session, owner and token.

check() takes the watcher's records, the store's events (revision ->
(kind, session, owner, token), e.g. read from its events table) and the
workers' op records (checker.py's format), and returns {name: {"count",
"examples"}} for the three.
"""
import json
import sqlite3

NAMES = ["W1 no gap or duplicate", "W2 told only what is durable",
         "W3 every grant told"]
KINDS = {1: "granted", 2: "released", 3: "expired", 4: "revoked"}


def read_watched(path):
    """The watcher's records (its last line may be cut short by a kill)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def stored_events(db_path):
    """revision -> (kind, session, owner, token) from a leased.db."""
    db = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True)
    try:
        return {r: (KINDS.get(k, str(k)), s, o, t) for r, k, s, o, t in
                db.execute("SELECT revision, kind, session_id, owner, token "
                           "FROM events")}
    finally:
        db.close()


def check(watched, stored, ops):
    v = {name: {"count": 0, "examples": []} for name in NAMES}

    def violation(name, what):
        v[name]["count"] += 1
        if len(v[name]["examples"]) < 5:
            v[name]["examples"].append(what)

    starts = [r["revision"] for r in watched if r["type"] == "start"]
    events = [r for r in watched if r["type"] == "event"]
    last = starts[0] if starts else 0
    for e in events:
        if e["revision"] != last + 1:
            violation(NAMES[0], "revision %d after %d" % (e["revision"],
                                                         last))
        last = max(last, e["revision"])
        got = (e["kind"], e["session"], e["owner"], e["token"])
        if stored.get(e["revision"]) != got:
            violation(NAMES[1], "revision %d told %s, stored %s"
                      % (e["revision"], got, stored.get(e["revision"])))
    grants = {(s, o, t) for k, s, o, t in stored.values() if k == "granted"}
    for op in ops:
        if (op.get("type") == "op" and op["op"] in ("acquire", "wait") and
                op["result"] == "ok" and
                (op["session"], op["owner"], op["rtoken"]) not in grants):
            violation(NAMES[2], "%s %s of %s got token %s: no GRANTED"
                      % (op["owner"], op["op"], op["session"],
                         op["rtoken"]))
    return v


def format_report(v, watched):
    events = [r["revision"] for r in watched if r["type"] == "event"]
    lines = ["watch: %d events told to the watcher%s" % (
        len(events), " (revisions %d..%d)" % (events[0], events[-1])
        if events else "")]
    for name in NAMES:
        lines.append("  %-32s %d" % (name, v[name]["count"]))
        for ex in v[name]["examples"][:3]:
            lines.append("    - " + ex)
    return "\n".join(lines)
