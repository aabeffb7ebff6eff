"""leasectl against the real leased: every command, its exit codes, JSON
in and out, --wait, TLS with a token file, and `hold` the way flock(1) is
used: the command runs with the lease in its environment, a second holder
waits or fails, a lost lease stops the command, a daemon restart does not.
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import certs
import harness
from harness import Leased

HELD, UNAVAILABLE, INVALID, NOT_FOUND, USAGE = 3, 4, 5, 6, 2


def ctl(d, *args, stdin=None, url=None, timeout=30, extra=()):
    """Runs leasectl against d; returns (exit code, stdout, stderr)."""
    cmd = [os.environ["LEASECTL_BIN"], "--url", url or d.addr] + \
        list(extra) + list(args)
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def ctl_json(d, *args, **kw):
    rc, out, err = ctl(d, "--json", *args, **kw)
    assert rc == 0, (args, rc, out, err)
    return json.loads(out) if out.strip() else None


def test_acquire_renew_release_get():
    with Leased(ttl="30s") as d:
        a = ctl_json(d, "acquire", "s1", "--owner", "alice")
        assert (a["session_id"], a["owner"], a["token"]) == ("s1", "alice", 1)
        rc, _, err = ctl(d, "acquire", "s1", "--owner", "bob")
        assert rc == HELD and "held" in err
        # renew and release take the JSON lease on stdin, or flags.
        r = ctl_json(d, "renew", stdin=json.dumps(a))
        assert r["token"] == 1 and r["expiry_ns"] > a["expiry_ns"]
        r2 = ctl_json(d, "renew", "s1", "--owner", "alice", "--token", "1")
        assert r2["expiry_ns"] >= r["expiry_ns"]
        g = ctl_json(d, "get", "s1")
        assert (g["owner"], g["token"], g["live"]) == ("alice", 1, True)
        rc, out, _ = ctl(d, "get", "s1")
        assert rc == 0 and "owner alice" in out and "token 1" in out
        assert ctl(d, "release", stdin=json.dumps(a))[0] == 0
        assert ctl(d, "get", "s1")[0] == NOT_FOUND
        # Renewing a released lease: lost.
        assert ctl(d, "renew", stdin=json.dumps(a))[0] == HELD
        # Someone else gets a higher token.
        assert ctl_json(d, "acquire", "s1", "--owner", "bob")["token"] == 2


def test_default_owner_looks_like_mecatls():
    with Leased() as d:
        owner = ctl_json(d, "acquire", "s")["owner"]
        host, pid, nonce = owner.rsplit("-", 2)
        assert host == socket.gethostname() and pid.isdigit() and \
            len(nonce) == 8, owner


def test_list_stats_health():
    with Leased(ttl="30s") as d:
        for i in range(5):
            ctl_json(d, "acquire", "app/%d" % i, "--owner", "o")
        ctl_json(d, "acquire", "zzz", "--owner", "o")
        rc, out, _ = ctl(d, "--json", "list", "app/")
        rows = [json.loads(line) for line in out.splitlines()]
        assert rc == 0 and [r["session_id"] for r in rows] == \
            ["app/%d" % i for i in range(5)]
        rc, out, _ = ctl(d, "list", "--limit", "2")
        assert rc == 0 and len(out.splitlines()) == 2
        st = ctl_json(d, "stats")
        assert st["takeovers"] == 6 and st["storage_state"] == "ok"
        rc, out, _ = ctl(d, "health")
        assert rc == 0 and out.strip() == "SERVING"


def test_exit_codes_for_usage_invalid_unavailable():
    with Leased() as d:
        assert ctl(d, "bogus")[0] == USAGE
        assert ctl(d, "acquire")[0] == USAGE
        assert ctl(d, "renew", "s")[0] == USAGE  # flags incomplete
        assert ctl(d, "renew", stdin="not json")[0] == USAGE
        assert ctl(d, "acquire", "s", "--owner", "")[0] == INVALID
        rc, out, _ = ctl(d, "acquire", "--help")
        assert rc == 0 and "Usage: leasectl acquire" in out
        rc, out, _ = ctl(d, "--help")
        assert rc == 0 and "hold SESSION" in out
    rc, _, err = ctl(None, "--timeout", "1s", "acquire", "x",
                     url="127.0.0.1:1")
    assert rc == UNAVAILABLE, err
    assert ctl(None, "get", "x", url="10.1.2.3:7443")[0] == INVALID


def test_man_page_covers_every_command_and_option():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "docs", "leasectl.1")) as f:
        man = f.read().replace("\\-", "-")
    usage = subprocess.run([os.environ["LEASECTL_BIN"], "--help"],
                           capture_output=True, text=True).stdout
    for word in ["acquire", "renew", "release", "get", "list", "stats",
                 "health", "hold", "--url", "--tls-ca", "--tls-cert",
                 "--tls-key", "--tls-server-name", "--token-file",
                 "--timeout", "--json", "--wait", "--grace", "--ttl",
                 "--limit", "--owner", "--token"]:
        assert word in usage, word
        assert word in man, word
    if os.path.exists("/usr/bin/groff"):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z",
                            os.path.join(here, "..", "..", "docs",
                                         "leasectl.1")],
                           capture_output=True, text=True)
        assert p.returncode == 0 and p.stderr == "", p.stderr


def test_wait_until_free():
    with Leased(ttl="600ms") as d:
        time.sleep(0.7)
        ctl_json(d, "acquire", "w", "--owner", "alice")
        assert ctl(d, "acquire", "w", "--owner", "bob")[0] == HELD
        start = time.monotonic()
        b = ctl_json(d, "acquire", "w", "--owner", "bob", "--wait", "5s")
        assert b["token"] == 2 and time.monotonic() - start < 3


def test_tls_and_token_file():
    with tempfile.TemporaryDirectory() as tmp:
        c = certs.make(os.path.join(tmp, "certs"))
        tokens = os.path.join(tmp, "tokens")
        harness.write_private(tokens, "# for leasectl\nctl-token\n")
        with Leased(tls=c, token="ctl-token") as d:
            tls = ["--tls-ca", c.path("ca.pem")]
            assert ctl(d, "stats", extra=tls)[0] == UNAVAILABLE  # no token
            a = ctl_json(d, "acquire", "t", "--owner", "o",
                         extra=tls + ["--token-file", tokens])
            assert a["token"] == 1
            assert ctl(d, "health", extra=tls)[0] == 0  # needs no token


def hold(d, *args, **kw):
    return subprocess.Popen(
        [os.environ["LEASECTL_BIN"], "--url", d.addr, "hold"] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_hold_runs_the_command_with_the_lease_and_releases():
    with Leased(ttl="2s") as d, tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "env")
        p = hold(d, "h1", "--owner", "holder", "--", "sh", "-c",
                 'echo "$LEASE_SESSION $LEASE_OWNER $LEASE_TOKEN" > %s; '
                 'sleep 1.5; exit 7' % out)
        time.sleep(0.5)
        assert ctl(d, "acquire", "h1", "--owner", "other")[0] == HELD
        assert ctl(d, "hold", "h1", "--", "true")[0] == HELD  # no --wait
        assert p.wait(timeout=20) == 7  # the command's status
        with open(out) as f:
            assert f.read().split() == ["h1", "holder", "1"]
        # Released at the end: the next owner gets it at once.
        assert ctl_json(d, "acquire", "h1", "--owner", "other")["token"] == 2


def test_hold_keeps_renewing_and_a_second_holder_waits():
    with Leased(ttl="600ms") as d:
        time.sleep(0.7)
        first = hold(d, "h2", "--owner", "a", "--", "sleep", "2")
        time.sleep(0.3)
        start = time.monotonic()
        rc, _, err = ctl(d, "hold", "h2", "--owner", "b", "--wait", "10s",
                         "--", "true")
        took = time.monotonic() - start
        assert first.wait(timeout=10) == 0
        # It held on for ~2 s across several TTLs (renewals worked), then
        # the second holder ran.
        assert rc == 0 and took > 1.2, (rc, took, err)


def test_hold_stops_the_command_when_the_lease_is_lost():
    with Leased(ttl="1s") as d:
        time.sleep(1.1)
        p = hold(d, "h3", "--owner", "a", "--grace", "1s", "--", "sleep",
                 "60")
        time.sleep(0.3)
        p.send_signal(signal.SIGSTOP)  # leasectl cannot renew now
        time.sleep(1.5)
        taken = ctl_json(d, "acquire", "h3", "--owner", "b")
        assert taken["token"] == 2
        p.send_signal(signal.SIGCONT)
        rc = p.wait(timeout=15)
        assert rc == 128 + signal.SIGTERM, (rc, p.stderr.read())
        assert "lost" in p.stderr.read()
        # It did not release b's lease on the way out.
        assert ctl_json(d, "get", "h3")["owner"] == "b"


# A command that notes when it is told to stop (CLOCK_MONOTONIC, shared
# with the test), then dies of that SIGTERM.
STOPPED_AT = """
import os, signal, sys, time
def stop(*_):
    with open(sys.argv[1], "w") as f:
        f.write(repr(time.monotonic()))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(60)
"""


def test_hold_stops_the_command_when_the_service_stays_away():
    with Leased(ttl="2s") as d, tempfile.TemporaryDirectory() as tmp:
        stopped = os.path.join(tmp, "stopped")
        time.sleep(2.1)
        p = hold(d, "h5", "--owner", "a", "--grace", "1s", "--",
                 "/usr/bin/python3", "-c", STOPPED_AT, stopped)
        time.sleep(0.5)
        d.stop()  # and it does not come back
        start = time.monotonic()
        rc = p.wait(timeout=15)
        err = p.stderr.read()
        assert rc == 128 + signal.SIGTERM, (rc, err)
        assert "before its deadline" in err, err
        # The command was told to stop before the lease could have run out
        # (2 s after the last renewal, at most ~0.7 s before the stop);
        # leasectl's own exit after that is not part of the promise.
        with open(stopped) as f:
            took = float(f.read()) - start
        assert took < 2.0, took


def test_hold_survives_a_daemon_restart():
    with tempfile.TemporaryDirectory() as tmp:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        s.close()
        d = Leased(ttl="5s", listen=addr,
                   data_dir=os.path.join(tmp, "data"))
        with d:
            p = hold(d, "h4", "--owner", "a", "--", "sleep", "5")
            time.sleep(0.8)
            assert d.stop() == 0
            time.sleep(0.5)  # renewals fail meanwhile (unavailable)
            d.start()
            rc = p.wait(timeout=20)
            err = p.stderr.read()
            assert rc == 0, (rc, err, d.log_text())
            assert ctl(d, "get", "h4")[0] == NOT_FOUND  # released


harness.main(globals())
