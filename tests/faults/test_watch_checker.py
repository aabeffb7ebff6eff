#!/usr/bin/python3
"""Tests of the watcher's checker (tests/faults/watch_checker.py).

`python3 test_watch_checker.py` runs every case, `CASE` runs one,
`--list` lists them (tests/cases.py; no daemon). Small hand-written
histories: a clean one across a death, and for each check a history
that breaks exactly it, and its near misses, left alone.
"""
import os
import sqlite3
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import cases  # noqa: E402
import watch_checker as wc  # noqa: E402

W1, W2, W3 = wc.NAMES


def ev(rev, kind, session, owner, token):
    return {"type": "event", "revision": rev, "kind": kind,
            "session": session, "owner": owner, "token": token}


def grant(owner, session, token, op="acquire", result="ok"):
    return {"type": "op", "op": op, "owner": owner, "session": session,
            "result": result, "rtoken": token if result == "ok" else None}


STORED = {1: ("granted", "s", "a", 1), 2: ("released", "s", "a", 1),
          3: ("granted", "s", "b", 2), 4: ("expired", "s", "b", 2),
          5: ("granted", "t", "a", 1)}


def told(revs):
    return [{"type": "start", "revision": revs[0] - 1}] + [
        ev(r, *STORED[r]) for r in revs]


def counts(v):
    return [v[n]["count"] for n in wc.NAMES]


def test_a_clean_history_passes():
    ops = [grant("a", "s", 1), grant("b", "s", 2, op="wait"),
           grant("a", "t", 1), grant("a", "t", 1),   # the holder again
           grant("c", "s", None, result="fail"),
           grant("c", "s", None, result="unknown")]
    # It saw 2..4 only (it started at 1), and the store has one more.
    assert counts(wc.check(told([2, 3, 4]), STORED, ops)) == [0, 0, 0]


def test_a_gap_or_a_duplicate_is_caught():
    v = wc.check(told([1, 2]) + [ev(4, *STORED[4])], STORED, [])
    assert counts(v) == [1, 0, 0], v
    assert "revision 4 after 2" in v[W1]["examples"][0]
    v = wc.check(told([1, 2]) + [ev(2, *STORED[2])], STORED, [])
    assert counts(v) == [1, 0, 0], v


def test_an_event_the_store_does_not_hold_is_caught():
    wrong = told([1, 2, 3])
    wrong[3] = ev(3, "granted", "s", "c", 2)       # another owner
    v = wc.check(wrong, STORED, [])
    assert counts(v) == [0, 1, 0], v
    v = wc.check(told([1]) + [ev(2, *STORED[2]), ev(3, *STORED[3]),
                              ev(4, *STORED[4]), ev(5, *STORED[5]),
                              ev(6, "granted", "u", "a", 1)], STORED, [])
    assert counts(v) == [0, 1, 0], v                # 6: never stored


def test_a_grant_not_told_is_caught():
    for op in ["acquire", "wait"]:
        v = wc.check(told([1]), STORED, [grant("b", "s", 3, op=op)])
        assert counts(v) == [0, 0, 1], (op, v)
    # The same session and token, another owner: not the grant told.
    v = wc.check(told([1]), STORED, [grant("b", "t", 1)])
    assert counts(v) == [0, 0, 1], v


def test_stored_events_reads_a_leased_db():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "leased.db")
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE events(revision INTEGER PRIMARY KEY, "
                   "session_id TEXT, kind INTEGER, owner TEXT, "
                   "token INTEGER, expiry_ns INTEGER)")
        db.execute("INSERT INTO events VALUES(7, 's', 3, 'a', 2, 0)")
        db.commit()
        db.close()
        assert wc.stored_events(path) == {7: ("expired", "s", "a", 2)}


if __name__ == "__main__":
    cases.main(globals())
