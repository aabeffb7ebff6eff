#!/usr/bin/python3
"""Tests of the holders' checker (tests/faults/holders_checker.py).

`python3 test_holders_checker.py` runs every case, `python3
test_holders_checker.py CASE` runs one, `--list` lists them (tests/cases.py;
no daemon, no gRPC).

Small hand-written histories (class History): a clean one, and for each
invariant a history that breaks exactly it and its near misses, which
must be left alone: a unit ending 1 ms before the grant, a paused unit
refused, a write with a token equal to the last. Times are whole
milliseconds from an arbitrary origin, so every comparison is exact.
Then the loader, on a directory laid out as the campaign leaves it
(leased's own log lines included), and the command's exit codes.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import cases  # noqa: E402
import holders_checker as hc  # noqa: E402

PYTHON = "/usr/bin/python3"
CHECKER = os.path.join(HERE, "holders_checker.py")
MS = 1000000
T0 = 1796400000000 * MS  # 2026-12-04T16:00:00Z: any origin would do
TTL_MS = 3000


def at(ms):
    return T0 + ms * MS


class History:
    """A synthetic history, as holders_checker.load() returns one; times in
    ms from T0."""

    def __init__(self, drift_ms=0):
        self.h = {"ttl_ns": TTL_MS * MS, "clock_drift_ns": drift_ms * MS,
                  "grants": [], "releases": [], "writes": [], "units": [],
                  "events": []}

    def grant(self, session, owner, token, ms):
        g = hc.Grant(session, owner, token, at(ms), "leased-001.log:1")
        self.h["grants"].append(g)
        return g

    def release(self, session, owner, token, ms):
        self.h["releases"].append(hc.Release(session, owner, token, at(ms)))

    def unit(self, session, owner, token, start, end, write="accepted",
             pid=100):
        u = {"kind": "unit", "session": session, "owner": owner,
             "token": token, "pid": pid, "start": at(start), "end": at(end),
             "write": write}
        self.h["units"].append(u)
        return u

    def write(self, session, token, owner, ms, pid=100):
        self.h["writes"].append(hc.Write(session, token, owner, pid, at(ms),
                                         "resource-%s.log:%d" % (
                                             session,
                                             len(self.h["writes"]) + 1)))

    def event(self, name, ms, **kw):
        e = {"kind": "event", "event": name, "t": at(ms)}
        e.update(kw)
        self.h["events"].append(e)
        return e

    def pause(self, ms, end_ms, pids=(), owner=None):
        return self.event("pause", ms, t_end=at(end_ms), pids=list(pids),
                          owner=owner)

    def hold_kill(self, ms, owner, pid=500):
        return self.event("hold_kill", ms, owner=owner, pid=pid, pgid=pid + 1)

    def check(self):
        return hc.check(self.h)


def expect(report, **counts):
    """Asserts each invariant's count (0 unless given)."""
    got = {n: report["violations"][n]["count"] for n in hc.INVARIANTS}
    want = {n: counts.get(n, 0) for n in hc.INVARIANTS}
    assert got == want, "violations %s, want %s\n%s" % (
        got, want, hc.format_report(report))
    assert report["ok"] == (not any(want.values()))


def clean_history():
    """Two sessions: a keeper's lease that runs out and is taken over, a
    hold's released, a whole holder paused whose late write is refused, a
    hold killed before its command's last unit ended. TTL 3 s."""
    h = History()
    # s1: keep-1-0 (token 1) works until 2700, its lease runs out at 3000.
    h.grant("s1", "keep-1-0", 1, 0)
    h.unit("s1", "keep-1-0", 1, 10, 30)
    h.write("s1", 1, "keep-1-0", 29)
    h.unit("s1", "keep-1-0", 1, 2680, 2700)
    h.write("s1", 1, "keep-1-0", 2699)
    h.grant("s1", "comp-0", 2, 3010)                  # margin 310 ms
    h.unit("s1", "comp-0", 2, 3020, 3040, pid=200)
    h.write("s1", 2, "comp-0", 3039, pid=200)
    # comp-0 releases at 3500; hold-0-0 takes s1 at once.
    h.release("s1", "comp-0", 2, 3500)
    h.grant("s1", "hold-0-0", 3, 3501)                # margin 461 ms
    # hold-0-0's command (pid 300) is paused as a whole from 4000 (in a
    # unit) to 8500; comp-1 takes over at 7100 and writes; the late write
    # at 8510 is refused, and so is the one after it, within the slack.
    h.unit("s1", "hold-0-0", 3, 3510, 3530, pid=300)
    h.write("s1", 3, "hold-0-0", 3529, pid=300)
    h.pause(4000, 8500, pids=[299, 300], owner="hold-0-0")
    h.grant("s1", "comp-1", 4, 7100)
    h.unit("s1", "comp-1", 4, 7110, 7130, pid=200)
    h.write("s1", 4, "comp-1", 7129, pid=200)
    h.unit("s1", "hold-0-0", 3, 3990, 8510, write="refused", pid=300)
    h.unit("s1", "hold-0-0", 3, 8540, 8560, write="refused", pid=300)
    # s2: hold-1-0, killed at 2000; its command's last unit ended at 2050.
    h.grant("s2", "hold-1-0", 1, 0)
    h.unit("s2", "hold-1-0", 1, 1980, 2050, pid=400)
    h.write("s2", 1, "hold-1-0", 2049, pid=400)
    h.hold_kill(2000, "hold-1-0")
    h.grant("s2", "comp-0", 2, 5000)
    h.event("partition", 100, t_end=4600, holder="keep-1")
    return h


def test_clean_history():
    r = clean_history().check()
    expect(r)
    assert r["units"] == {"total": 8, "accepted": 6, "refused": 2,
                          "paused": 2}, r["units"]
    assert r["late_writes_refused"] == 2
    assert r["grants"] == 6 and r["releases"] == 1 and r["writes"] == 6
    assert r["margin"]["after_expiry"]["ns"] == 310 * MS, r["margin"]
    assert r["margin"]["after_expiry"]["unit"]["owner"] == "keep-1-0"
    assert r["margin"]["after_release"]["ns"] == 461 * MS, r["margin"]
    assert r["margin_after_expiry_by_kind"] == {"hold": 2950 * MS,
                                                "keep": 310 * MS}, r
    assert r["leases_worked"] == {"comp": 2, "hold": 2, "keep": 1}, r
    assert r["events"] == {"hold_kill": 1, "partition": 1, "pause": 1}
    assert r["warnings"] == []
    text = hc.format_report(r)
    assert "RESULT: consistent" in text and "310.0 ms" in text, text


# ---- H1 exclusion ---------------------------------------------------------

def test_exclusion():
    h = History()
    h.grant("s1", "keep-1-0", 1, 0)
    h.unit("s1", "keep-1-0", 1, 2990, 3005)
    h.grant("s1", "comp-0", 2, 3000)
    u = h.unit("s1", "keep-1-0", 1, 3010, 3030)        # after it, too
    r = h.check()
    expect(r, exclusion=2)
    x = r["violations"]["exclusion"]
    assert x["worst_ns"] == 30 * MS, x
    ex = x["excerpts"][1]
    assert ex["records"][0] is u and ex["records"][1]["token"] == 2, ex
    assert "30.0 ms after the grant of token 2 to comp-0" in ex["summary"]


def test_exclusion_any_greater_token():
    """The earliest grant with a greater token counts, whichever token."""
    h = History()
    h.grant("s1", "a", 1, 0)
    h.grant("s1", "c", 5, 4000)
    h.grant("s1", "b", 3, 3500)
    h.unit("s1", "a", 1, 3400, 3600)
    r = h.check()
    expect(r, exclusion=1)
    assert r["violations"]["exclusion"]["worst_ns"] == 100 * MS


def test_exclusion_near_misses():
    h = History()
    h.grant("s1", "a", 1, 0)
    h.unit("s1", "a", 1, 2980, 2999)          # 1 ms before the grant
    h.unit("s1", "a", 1, 2981, 3001)          # within the log's 1 ms
    h.grant("s1", "b", 2, 3000)
    h.unit("s1", "b", 2, 3010, 9000)          # its own token
    h.grant("s2", "c", 7, 100)                # another session's
    h.unit("s2", "c", 7, 200, 9000)
    h.unit("s1", "b", 2, 9000, 9020)          # no greater token yet
    r = h.check()
    expect(r)
    assert r["margin"]["after_expiry"]["ns"] == -1 * MS, r["margin"]


def test_exclusion_clock_drift_widens_tolerance():
    for drift, want in ((0, 1), (4, 0)):
        h = History(drift_ms=drift)
        h.grant("s1", "a", 1, 0)
        h.grant("s1", "b", 2, 3000)
        h.unit("s1", "a", 1, 2990, 3004)
        expect(h.check(), exclusion=want)


def test_exclusion_paused_units_are_the_fences():
    h = History()
    h.grant("s1", "a", 1, 0)
    h.pause(2000, 6500, pids=[300, 301])
    h.grant("s1", "b", 2, 5000)
    h.unit("s1", "a", 1, 1990, 6510, pid=300)            # paused in it
    h.unit("s1", "a", 1, 6520, 6540, pid=301)            # within the slack
    h.unit("s1", "a", 1, 6599, 6620, pid=300)            # still
    r = h.check()
    expect(r)
    assert r["units"]["paused"] == 3
    assert r["late_writes_refused"] == 0     # accepted: no write was newer
    h.unit("s1", "a", 1, 6600, 6620, pid=300)            # after the slack
    h.unit("s1", "a", 1, 3000, 5100, pid=999)            # not paused
    expect(h.check(), exclusion=2)


def test_exclusion_pause_by_owner():
    """A hold's pause names its owner: every unit its command's group
    does carries it, whatever the process."""
    h = History()
    h.grant("s1", "hold-2-7", 1, 0)
    h.pause(2000, 6500, pids=[10], owner="hold-2-7")
    h.grant("s1", "b", 2, 5000)
    h.unit("s1", "hold-2-7", 1, 6000, 6550, pid=11, write="refused")
    r = h.check()
    expect(r)
    assert r["late_writes_refused"] == 1
    h.unit("s1", "hold-2-8", 1, 6000, 6550, pid=12)      # another owner
    expect(h.check(), exclusion=1)


# ---- H2 fence --------------------------------------------------------------

def test_fence():
    h = History()
    h.write("s1", 3, "a", 10)
    h.write("s1", 4, "b", 20)
    h.write("s1", 3, "a", 45)     # stale, accepted
    h.write("s1", 2, "z", 50)     # older still
    h.write("s1", 4, "b", 60)
    h.write("s2", 1, "c", 70)     # another resource
    r = h.check()
    expect(r, fence=2)
    x = r["violations"]["fence"]
    assert x["worst_ns"] == 30 * MS, x
    ex = x["excerpts"][0]
    assert ex["records"][0]["write"] == "resource-s1.log:3", ex
    assert ex["records"][1]["token"] == 4
    assert "wrote with token 3" in ex["summary"], ex["summary"]


def test_fence_near_misses():
    h = History()
    h.write("s1", 3, "a", 10)
    h.write("s1", 3, "a", 20)     # equal to the last: the same holder
    h.write("s1", 5, "b", 30)
    h.write("s1", 5, "b", 40)
    h.write("s2", 1, "c", 50)     # lower, but another resource
    # A paused holder's late write, refused by the fence: counted, fine.
    h.grant("s1", "a", 3, 0)
    h.grant("s1", "b", 5, 25)
    h.pause(15, 60, pids=[7])
    h.unit("s1", "a", 3, 14, 61, write="refused", pid=7)
    r = h.check()
    expect(r)
    assert r["late_writes_refused"] == 1 and r["units"]["refused"] == 1


# ---- H3 no survivor ---------------------------------------------------------

def test_no_survivor():
    h = History()
    h.grant("s1", "hold-0-3", 1, 0)
    h.hold_kill(1000, "hold-0-3", pid=77)
    u = h.unit("s1", "hold-0-3", 1, 1000, 1150, pid=78)   # 150 ms after
    h.event("survivor", 9000, pid=79, cmdline="holder work --fork")
    r = h.check()
    expect(r, no_survivor=2)
    x = r["violations"]["no_survivor"]
    assert x["worst_ns"] == 150 * MS, x
    assert x["excerpts"][0]["records"][0] is u
    assert "killed" in x["excerpts"][0]["summary"]
    assert "79" in x["excerpts"][1]["summary"]


def test_no_survivor_near_misses():
    h = History()
    h.grant("s1", "hold-0-3", 1, 0)
    h.unit("s1", "hold-0-3", 1, 900, 999)
    h.hold_kill(1000, "hold-0-3")
    h.unit("s1", "hold-0-3", 1, 1000, 1099)   # within the 100 ms
    h.unit("s1", "hold-0-4", 1, 1000, 1500)   # another hold's command
    h.unit("s1", "hold-0-4", 1, 1500, 1600)
    expect(h.check())


# ---- reading a campaign's directory -----------------------------------------

def _write_dir(d, units_extra=()):
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"ttl_ns": TTL_MS * MS, "clock_drift_ns": 20000}, f)
    with open(os.path.join(d, "leased-001.log"), "w") as f:
        f.write(
            'ts=2026-12-04T16:00:00.000Z level=info msg=listening '
            'addr=127.0.0.1:1 tls=0\n'
            'ts=2026-12-04T16:00:00.004Z level=info msg=takeover '
            'identity="" session="s1" owner="keep-9-0" token=1 '
            'expires=2026-12-04T16:00:03.003Z\n'
            'ts=2026-12-04T16:00:01.000Z level=info msg=release '
            'identity="" session="s1" owner="keep-9-0" token=1\n')
    with open(os.path.join(d, "leased-002.log"), "w") as f:
        f.write('ts=2026-12-04T16:00:01.002Z level=info msg=takeover '
                'identity="" session="s1" owner="hold-0-0" token=2 '
                'expires=2026-12-04T16:00:04.001Z\n')
    units = [{"kind": "unit", "session": "s1", "owner": "keep-9-0",
              "token": 1, "pid": 9, "start": at(10), "end": at(30),
              "write": "accepted"}] + list(units_extra)
    with open(os.path.join(d, "units.jsonl"), "w") as f:
        for u in units:
            f.write(json.dumps(u) + "\n")
    with open(os.path.join(d, "resource-s1.log"), "w") as f:
        f.write("1 keep-9-0 9 %d\n2 hold-0-0 10 %d\n" % (at(29), at(1100)))
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        f.write(json.dumps({"kind": "event", "event": "leased_kill",
                            "t": at(500), "t_end": at(700)}) + "\n")


def test_load_directory():
    with tempfile.TemporaryDirectory() as d:
        _write_dir(d)
        h = hc.load(d)
        assert [(g.session, g.owner, g.token, g.t) for g in h["grants"]] == [
            ("s1", "keep-9-0", 1, at(3)), ("s1", "hold-0-0", 2, at(1001))]
        assert h["grants"][1].src == "leased-002.log:1"
        assert [(r.owner, r.token, r.t) for r in h["releases"]] == [
            ("keep-9-0", 1, at(1000))]
        assert [(w.token, w.pid, w.t) for w in h["writes"]] == [
            (1, 9, at(29)), (2, 10, at(1100))]
        r = hc.check(h)
        expect(r)
        assert r["tolerance_ns"] == MS + 20000
        assert r["margin"]["after_release"]["ns"] == 971 * MS
        assert r["events"] == {"leased_kill": 1}
        # A unit of token 1 ending 2 ms after token 2's grant (1001).
        _write_dir(d, [{"kind": "unit", "session": "s1", "owner": "keep-9-0",
                        "token": 1, "pid": 9, "start": at(990),
                        "end": at(1003), "write": "accepted"},
                       {"kind": "unit", "session": "s1", "owner": "x",
                        "token": 9, "pid": 1, "start": at(1),
                        "end": at(2), "write": "accepted"}])
        r = hc.check(hc.load(d))
        expect(r, exclusion=1)
        assert r["warnings"] == ["s1: units with token 9, and no takeover "
                                 "line for it in leased's log"], r["warnings"]


def _run(*args):
    return subprocess.run([PYTHON, CHECKER] + list(args), capture_output=True,
                          text=True, timeout=60)


def test_command_exit_codes():
    with tempfile.TemporaryDirectory() as d:
        _write_dir(d)
        p = _run(d, "--json", os.path.join(d, "r.json"))
        assert p.returncode == 0, p.stdout + p.stderr
        assert "RESULT: consistent" in p.stdout, p.stdout
        with open(os.path.join(d, "r.json")) as f:
            assert json.load(f)["ok"] is True
        with open(os.path.join(d, "resource-s1.log"), "a") as f:
            f.write("1 keep-9-0 9 %d\n" % at(1200))
        p = _run(d)
        assert p.returncode == 1 and "VIOLATED: fence" in p.stdout, p.stdout
        with open(os.path.join(d, "resource-s1.log"), "a") as f:
            f.write("not a write\n")
        p = _run(d)
        assert p.returncode == 2 and "resource-s1.log:4" in p.stderr, \
            p.stderr
        os.unlink(os.path.join(d, "resource-s1.log"))
        with open(os.path.join(d, "units.jsonl"), "a") as f:
            f.write('{"kind": "unit", "session": "s1"}\n')
        p = _run(d)
        assert p.returncode == 2 and "units.jsonl:2" in p.stderr, p.stderr


if __name__ == "__main__":
    cases.main(globals())
