"""leasectl against the real leased: every command, its exit codes, JSON
in and out, --wait, TLS with a token file, and `hold` the way flock(1) is
used: the command runs with the lease in its environment, a second holder
waits or fails, a lost lease stops the command, a daemon restart does not.
And what a newcomer meets: one owner per user and host by default (so
acquire, renew SESSION and release SESSION work from one shell), one
message style with gRPC status names, a quick answer when no daemon
listens, and options before or after the command, as kubectl and etcdctl
take them. hold keeps its lease with liblease's keeper: its renewals are
jittered per process, and its retries are the keeper's.
"""
import json
import os
import pwd
import re
import select
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import certs
import harness
from harness import Leased

HELD, UNAVAILABLE, INVALID, NOT_FOUND, USAGE = 3, 4, 5, 6, 2
DENIED, UNAUTHENTICATED = 8, 9


def environ(env=None):
    """The environment of a leasectl run: ours without LEASE_OWNER (the
    default owner is then USER@HOST), plus env."""
    full = {k: v for k, v in os.environ.items() if k != "LEASE_OWNER"}
    full.update(env or {})
    return full


def ctl(d, *args, stdin=None, url=None, timeout=30, extra=(), env=None):
    """Runs leasectl against d; returns (exit code, stdout, stderr)."""
    cmd = [os.environ["LEASECTL_BIN"], "--url", url or d.addr] + \
        list(extra) + list(args)
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                       timeout=timeout, env=environ(env))
    return p.returncode, p.stdout, p.stderr


def run_ctl(*args, stdin=None, env=None):
    """Runs leasectl with exactly args (no --url of ours); returns (exit
    code, stdout, stderr)."""
    p = subprocess.run([os.environ["LEASECTL_BIN"]] + list(args),
                       input=stdin, capture_output=True, text=True,
                       timeout=30, env=environ(env))
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
        assert rc == HELD and re.fullmatch(
            r"leasectl: acquire: .*held.* \(FAILED_PRECONDITION\)\n", err), err
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


def user_at_host():
    return "%s@%s" % (pwd.getpwuid(os.geteuid()).pw_name,
                      socket.gethostname())


def test_default_owner_is_user_at_host():
    with Leased() as d:
        assert ctl_json(d, "acquire", "s")["owner"] == user_at_host()
        # An empty $LEASE_OWNER counts as unset.
        a = ctl_json(d, "acquire", "t", env={"LEASE_OWNER": ""})
        assert a["owner"] == user_at_host()


def test_acquire_twice_from_one_shell_keeps_the_token():
    with Leased(ttl="30s") as d:
        first = ctl_json(d, "acquire", "job-1")
        second = ctl_json(d, "acquire", "job-1")
        assert first["token"] == second["token"] == 1, (first, second)
        assert second["expiry_ns"] >= first["expiry_ns"]


def test_renew_and_release_by_session_alone():
    with Leased(ttl="30s") as d:
        a = ctl_json(d, "acquire", "job-1")
        r = ctl_json(d, "renew", "job-1")
        assert (r["owner"], r["token"]) == (user_at_host(), a["token"])
        assert r["expiry_ns"] > a["expiry_ns"]
        assert ctl_json(d, "release", "job-1") == {"released": True}
        assert ctl(d, "get", "job-1")[0] == NOT_FOUND
        # Freed: another owner takes it over, with a higher token.
        b = ctl_json(d, "acquire", "job-1", "--owner", "bob")
        assert b["token"] > a["token"], (a, b)
        # No lease at all: renew fails as if lost; release does nothing.
        rc, _, err = ctl(d, "renew", "job-2")
        assert rc == HELD and re.fullmatch(
            r"leasectl: renew: job-2 has no lease \(FAILED_PRECONDITION\)\n",
            err), err
        rc, out, err = ctl(d, "--json", "release", "job-2")
        assert rc == 0 and json.loads(out) == {"released": False}, (out, err)
        assert "nothing to release" in err, err


def test_lease_owner_and_owner_flag_override_the_default():
    with Leased(ttl="30s") as d:
        carol = {"LEASE_OWNER": "carol"}
        a = ctl_json(d, "acquire", "o1", env=carol)
        assert a["owner"] == "carol"
        assert ctl_json(d, "renew", "o1", env=carol)["token"] == a["token"]
        # Not USER@HOST's lease: renewing it without $LEASE_OWNER fails.
        assert ctl(d, "renew", "o1")[0] == HELD
        # --owner wins over $LEASE_OWNER.
        b = ctl_json(d, "acquire", "o2", "--owner", "dave", env=carol)
        assert b["owner"] == "dave"
        assert ctl_json(d, "renew", "o2", "--owner", "dave")["owner"] == \
            "dave"
        assert ctl(d, "release", "o1", env=carol)[0] == 0
        assert ctl(d, "get", "o1")[0] == NOT_FOUND
        # --token still names the lease itself (no lookup), as before.
        assert ctl(d, "renew", "o2", "--owner", "dave", "--token",
                   str(b["token"] + 1))[0] == HELD
        assert ctl_json(d, "renew", "o2", "--token", str(b["token"]),
                        env={"LEASE_OWNER": "dave"})["token"] == b["token"]


def test_renew_and_release_of_a_session_someone_else_holds():
    with Leased(ttl="30s") as d:
        ctl_json(d, "acquire", "s", "--owner", "bob")
        rc, _, err = ctl(d, "renew", "s")
        assert rc == HELD and re.fullmatch(
            r"leasectl: renew: s is held by bob, not .*"
            r" \(FAILED_PRECONDITION\)\n", err), err
        rc, _, err = ctl(d, "release", "s")
        assert rc == 0 and re.fullmatch(
            r"leasectl: release: s is held by bob, .*: nothing to release\n",
            err), err
        assert ctl_json(d, "get", "s")["owner"] == "bob"  # still bob's


def test_messages_name_the_command_and_the_status():
    with Leased(ttl="30s") as d:
        rc, _, err = ctl(d, "get", "missing")
        assert rc == NOT_FOUND and re.fullmatch(
            r"leasectl: get: .* \(NOT_FOUND\)\n", err), err
        ctl_json(d, "acquire", "busy", "--owner", "bob")
        rc, _, err = ctl(d, "acquire", "busy", "--owner", "alice")
        assert rc == HELD and re.fullmatch(
            r"leasectl: acquire: .* \(FAILED_PRECONDITION\)\n", err), err
        rc, _, err = ctl(d, "acquire", "s", "--owner", "")
        assert rc == INVALID and re.fullmatch(
            r"leasectl: acquire: .* \(INVALID_ARGUMENT\)\n", err), err
        rc, _, err = ctl(d, "acquire", "s", "--bogus")
        assert rc == USAGE and err == (
            "leasectl: acquire: unknown option --bogus\n"
            "Try 'leasectl help acquire'.\n"), err
        rc, _, err = ctl(d, "acquire", "s", "--owner")
        assert rc == USAGE and err.startswith(
            "leasectl: acquire: option --owner needs a value\n"), err
        rc, _, err = ctl(d, "frob")
        assert rc == USAGE and err == (
            "leasectl: unknown command frob\nTry 'leasectl help'.\n"), err
        rc, _, err = ctl(d, "--bogus", "get", "s")
        assert rc == USAGE and err.startswith(
            "leasectl: unknown option --bogus\n"), err
        rc, _, err = ctl(d, "renew", stdin="not json")
        assert rc == USAGE and err.startswith(
            "leasectl: renew: want a lease as JSON on stdin"), err
        rc, _, err = ctl(d, "hold", "h", "--wait", "soon", "--", "true")
        assert rc == USAGE and err.startswith(
            "leasectl: hold: --wait: not a duration of at most 1000h, nor "
            "inf: soon\n"), err
        rc, _, err = ctl(d, "--token-file", "/nonexistent", "stats")
        assert rc == INVALID and err.startswith(
            "leasectl: stats: /nonexistent: "), err


def test_options_after_the_command():
    """leasectl's options (--url, --json, --timeout, …) work after the
    command and its arguments as well as before, mixed with the command's
    own; a command's own option may come before the command too."""
    with Leased(ttl="30s") as d:
        rc, out, err = run_ctl("acquire", "s", "--json", "--url", d.addr,
                               "--owner", "o")
        assert rc == 0, (rc, out, err)
        a = json.loads(out)
        assert (a["session_id"], a["owner"], a["token"]) == ("s", "o", 1)
        rc, out, err = run_ctl("renew", "--url", d.addr, "s", "--owner", "o",
                               "--timeout", "3s", "--json")
        assert rc == 0 and json.loads(out)["token"] == 1, (rc, out, err)
        rc, out, err = run_ctl("--json", "get", "s", "--url=" + d.addr)
        assert rc == 0 and json.loads(out)["owner"] == "o", (rc, out, err)
        rc, out, err = run_ctl("list", "--limit", "1", "--url", d.addr,
                               "--json")
        assert rc == 0 and [json.loads(line)["session_id"]
                            for line in out.splitlines()] == ["s"], out
        rc, out, err = run_ctl("stats", "--url", d.addr, "--json")
        assert rc == 0 and json.loads(out)["takeovers"] == 1, (out, err)
        rc, out, err = run_ctl("health", "--json", "--url", d.addr)
        assert rc == 0 and json.loads(out) == {"status": "SERVING"}, out
        rc, out, err = run_ctl("release", "s", "--owner", "o", "--url",
                               d.addr, "--json")
        assert rc == 0 and json.loads(out) == {"released": True}, (out, err)
        # A command's option before the command.
        rc, out, err = run_ctl("--owner", "p", "--url", d.addr, "acquire",
                               "t", "--json")
        assert rc == 0 and json.loads(out)["owner"] == "p", (rc, out, err)
        # Checked the same wherever it stands.
        rc, _, err = run_ctl("get", "s", "--url", d.addr, "--timeout", "0s")
        assert rc == USAGE and err == (
            "leasectl: get: --timeout: not a duration from 1ms to 1000h: "
            "0s\nTry 'leasectl help get'.\n"), err
        # After --, words are arguments: a session named --json.
        rc, out, err = run_ctl("get", "--url", d.addr, "--", "--json")
        assert rc == NOT_FOUND and out == "", (rc, out, err)
        # $LEASED_URL still gives the default, and --url after the
        # command still wins over it.
        rc, out, err = run_ctl("get", "t", "--json",
                               env={"LEASED_URL": d.addr})
        assert rc == 0 and json.loads(out)["owner"] == "p", (rc, out, err)
        rc, _, err = run_ctl("get", "t", "--url", "127.0.0.1:1",
                             env={"LEASED_URL": d.addr})
        assert rc == UNAVAILABLE, (rc, err)


def test_a_command_refuses_the_options_of_others():
    with Leased() as d:
        rc, _, err = ctl(d, "get", "s", "--owner", "o")
        assert rc == USAGE and err == (
            "leasectl: get: get takes no --owner\n"
            "Try 'leasectl help get'.\n"), err
        rc, _, err = ctl(d, "--limit", "3", "acquire", "s")
        assert rc == USAGE and err.startswith(
            "leasectl: acquire: acquire takes no --limit\n"), err
        rc, _, err = ctl(d, "stats", "--grace", "1s")
        assert rc == USAGE and err.startswith(
            "leasectl: stats: stats takes no --grace\n"), err
        # Nothing was done.
        assert ctl(d, "get", "s")[0] == NOT_FOUND


def test_no_daemon_fails_fast():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    url = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()  # nothing listens there now
    for args in [("acquire", "job-1"), ("renew", "job-1"), ("get", "job-1"),
                 ("hold", "job-1", "--", "true")]:
        # At once, not after the 20 s --timeout (a bound far from both:
        # a sanitizer build takes a second to start leasectl).
        start = time.monotonic()
        rc, _, err = ctl(None, *args, url=url, extra=("--timeout", "20s"))
        took = time.monotonic() - start
        assert rc == UNAVAILABLE and took < 10, (args, rc, took, err)
        assert re.fullmatch(r"leasectl: %s: cannot connect to %s: .*"
                            r"connection refused.*\(UNAVAILABLE\)\n"
                            % (args[0], re.escape(url)),
                            err, re.IGNORECASE), err


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


def test_revoke_ends_any_holders_lease():
    with Leased(ttl="30s") as d:
        held = ctl_json(d, "acquire", "orders/42", "--owner", "web-1")
        rc, out, err = ctl(d, "revoke", "orders/42", "--token", "2")
        assert (rc, out) == (HELD, "") and err == \
            "leasectl: revoke: the lease's token is 1, not 2 " \
            "(FAILED_PRECONDITION)\n", err
        rc, out, err = ctl(d, "revoke", "orders/42", "--token", "1")
        assert (rc, out, err) == \
            (0, "revoked orders/42: owner web-1, token 1\n", ""), err
        rc, _, err = ctl(d, "renew", "orders/42", "--owner", "web-1",
                         "--token", str(held["token"]))
        assert rc == HELD, err  # the holder learns at its next renewal
        rc, _, err = ctl(d, "revoke", "orders/42")
        assert rc == NOT_FOUND and "no lease (NOT_FOUND)" in err, err
        again = ctl_json(d, "acquire", "orders/42", "--owner", "web-2")
        assert again["token"] == 2
        assert ctl_json(d, "revoke", "orders/42") == {
            "revoked": True, "session_id": "orders/42", "owner": "web-2",
            "token": 2}
        rc, _, err = ctl(d, "revoke")
        assert rc == USAGE and "missing SESSION" in err, err
        rc, _, err = ctl(d, "revoke", "orders/42", "--owner", "x")
        assert rc == USAGE, err  # an operator acts as no owner


def test_exit_codes_for_usage_invalid_unavailable():
    with Leased() as d:
        assert ctl(d, "bogus")[0] == USAGE
        assert ctl(d, "acquire")[0] == USAGE
        assert ctl(d, "renew", "s")[0] == HELD  # no lease of ours
        assert ctl(d, "renew", "s", "--token", "x")[0] == USAGE
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


def test_usage_errors_are_short_and_help_is_not_an_error():
    """Bad usage is the one line that says what is wrong and one that says
    where the help is (as git and kubectl do), on stderr, exit 2; asking
    for help or the version is no error: it goes to stdout, exit 0."""
    bad = [
        (("hold", "h"), "hold: missing -- CMD", "hold"),
        (("acquire",), "acquire: missing SESSION", "acquire"),
        (("get", "s", "t"), "get: unexpected argument t", "get"),
        (("list", "--limit", "0"), "list: --limit: not a number above 0: 0",
         "list"),
        (("get", "s", "--tls-cert", "c.pem"),
         "get: --tls-cert and --tls-key go together", "get"),
        (("get", "s", "--tls-cert", "c.pem", "--tls-key", "c.key"),
         "get: --tls-cert needs --tls-ca (TLS)", "get"),
        (("acquire", "s", "--wait", "1001h"),
         "acquire: --wait: not a duration of at most 1000h, nor inf: 1001h",
         "acquire"),
        ((), "missing COMMAND", None),
        (("help", "frob"), "unknown command frob", None),
    ]
    for args, why, cmd in bad:
        rc, out, err = run_ctl(*args)
        hint = "Try 'leasectl help%s'.\n" % (" " + cmd if cmd else "")
        assert (rc, out, err) == (USAGE, "", "leasectl: %s\n%s" % (why, hint)), \
            (args, rc, out, err)
    usage = run_ctl("--help")[1]
    assert usage.startswith("Usage: leasectl [OPTIONS] COMMAND"), usage
    hold_help = run_ctl("hold", "--help")[1]
    assert hold_help.startswith("Usage: leasectl hold SESSION"), hold_help
    for args, want in [(("-h",), usage), (("help",), usage),
                       (("help", "hold"), hold_help),
                       (("hold", "-h"), hold_help),
                       (("help", "--url", "x", "hold"), hold_help)]:
        assert run_ctl(*args) == (0, want, ""), args
    rc, out, err = run_ctl("--version")
    assert rc == 0 and re.fullmatch(r"leasectl \d+\.\d+\.\d+\n", out) and \
        err == "", (rc, out, err)


def free_url():
    """A loopback address where nothing listens."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    url = "127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    return url


class NoLeaseServer:
    """A gRPC server that serves no lease service (UNIMPLEMENTED to every
    call), as another service on the URL would. A context manager; .addr
    is where it listens."""

    def __init__(self):
        import concurrent.futures
        self.server = harness.grpc.server(
            concurrent.futures.ThreadPoolExecutor(2))
        self.addr = "127.0.0.1:%d" % self.server.add_insecure_port(
            "127.0.0.1:0")

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(0)


def man_exit_codes():
    """The man page's EXIT STATUS table: {code: its text}."""
    with open(os.path.join(harness.ROOT, "docs", "leasectl.1")) as f:
        man = f.read()
    section = man.split(".SH EXIT STATUS\n", 1)[1].split("\n.SH ", 1)[0]
    entries = re.findall(r"\.TP\n\.B (\d+)\n(.*?)(?=\n\.TP\n|\n\.PP\n|$)",
                         section, re.S)
    return {int(code): text for code, text in entries}


def test_every_exit_code_of_the_man_page_for_real():
    """Each exit code the man page lists, and --help's Exit line, against a
    real case: the real leased (with a token and a policy where they
    matter) and real calls. A code documented but not produced, or
    produced but not documented, fails."""
    with tempfile.TemporaryDirectory() as tmp:
        def private(name, text):
            path = os.path.join(tmp, name)
            harness.write_private(path, text)
            return path
        right = ["--token-file", private("right", "right-token\n")]
        wrong = ["--token-file", private("wrong", "not-the-token\n")]
        # gRPC's limit on metadata: a token over it is RESOURCE_EXHAUSTED.
        huge = ["--token-file", private("huge", "t" * 3000 + "\n")]
        # The harness's token file has the token alone on line 2.
        policy = private("policy", "token-2 sessions=mine/ owners=* "
                                   "admin=read\n")
        with Leased(ttl="30s", token="right-token",
                    args=["--policy-file", policy,
                          "--max-metadata-size", "1024"]) as d, \
                NoLeaseServer() as other:
            assert ctl(d, "acquire", "mine/held", "--owner", "a",
                       extra=right)[0] == 0
            cases = {
                0: lambda: ctl(d, "get", "mine/held", extra=right),
                1: lambda: ctl(d, "get", "mine/held", extra=huge),
                2: lambda: ctl(d, "get", extra=right),
                3: lambda: ctl(d, "acquire", "mine/held", "--owner", "b",
                               extra=right),
                4: lambda: ctl(None, "get", "s", url=free_url()),
                5: lambda: ctl(d, "get", "mine/" + "x" * 508, extra=right),
                6: lambda: ctl(d, "get", "mine/none", extra=right),
                7: lambda: ctl(None, "acquire", "s", url=other.addr),
                8: lambda: ctl(d, "acquire", "theirs", "--owner", "a",
                               extra=right),
                9: lambda: ctl(d, "acquire", "mine/x", "--owner", "a",
                               extra=wrong),
                10: lambda: ctl(d, "watch", "mine/held", "--after", "99",
                                extra=right),
            }
            documented = man_exit_codes()
            assert sorted(documented) == sorted(cases), documented
            usage = run_ctl("--help")[1]
            line = re.search(r"Exit: (.*?)\.\n", usage, re.S).group(1)
            assert [int(n) for n in re.findall(r"(\d+)\s", line)] == \
                sorted(cases), line
            for code, case in sorted(cases.items()):
                rc, out, err = case()
                assert rc == code, (code, documented[code], rc, out, err)
            # The over-long session id: the daemon's reason names the limit.
            err = cases[5]()[2]
            assert err == "leasectl: get: session_id: longer than the " \
                "limit of 512 bytes (INVALID_ARGUMENT)\n", err


def test_tls_on_one_side_only_says_which():
    """Plaintext to a TLS port, and TLS to a plaintext one: one line that
    says what is probably wrong, and no gRPC log line before it unless
    GRPC_VERBOSITY asks for them."""
    with tempfile.TemporaryDirectory() as tmp:
        c = certs.make(os.path.join(tmp, "certs"))
        ca = ["--tls-ca", c.path("ca.pem")]
        with Leased(tls=c) as tls, Leased() as plain:
            rc, out, err = ctl(tls, "get", "s")
            assert rc == UNAVAILABLE and re.fullmatch(
                r"leasectl: get: cannot connect to %s: .*: the server "
                r"probably speaks TLS: give --tls-ca FILE \(UNAVAILABLE\)\n"
                % re.escape(tls.addr), err), err
            rc, out, err = ctl(plain, "acquire", "s", extra=ca)
            assert rc == UNAVAILABLE and re.fullmatch(
                r"leasectl: acquire: cannot connect to %s: .*: the server "
                r"probably speaks plaintext: leave out --tls-ca "
                r"\(UNAVAILABLE\)\n" % re.escape(plain.addr), err), err
            # Asked for, gRPC's own lines come too.
            rc, out, err = ctl(plain, "get", "s", extra=ca,
                               env={"GRPC_VERBOSITY": "error"})
            assert rc == UNAVAILABLE and "Handshake failed" in err, err
            assert err.splitlines()[-1].endswith(
                "leave out --tls-ca (UNAVAILABLE)"), err
            # Both sides agreeing still works.
            assert ctl(tls, "acquire", "s", "--owner", "o", extra=ca)[0] == 0


def test_a_non_loopback_url_names_the_option_to_give():
    rc, out, err = ctl(None, "get", "s", url="127.0.0.1:7443,10.1.2.3:7443")
    assert (rc, out) == (INVALID, ""), (rc, out, err)
    assert err == ("leasectl: get: 10.1.2.3:7443 is not a loopback "
                   "address: plaintext is allowed only on loopback or a "
                   "unix socket: give --tls-ca FILE for TLS "
                   "(INVALID_ARGUMENT)\n"), err


def test_timeout_is_the_limit_of_the_whole_command():
    """Against a hung daemon (SIGSTOP: the kernel accepts connections,
    nothing answers), --timeout bounds the whole command, connecting
    included (it took the check's second and the call's timeout, and
    more, before); exit 4. With --wait, the wait comes on top."""
    with Leased(ttl="30s") as d:
        d.proc.send_signal(signal.SIGSTOP)
        try:
            for args, limit in [(("get", "s"), 2.0),
                                (("acquire", "s", "--owner", "o"), 2.0),
                                (("renew", "s", "--owner", "o"), 2.0),
                                (("hold", "s", "--", "true"), 2.0),
                                (("acquire", "s", "--wait", "1s"), 3.0)]:
                start = time.monotonic()
                rc, out, err = ctl(d, *args, extra=("--timeout", "2s"))
                took = time.monotonic() - start
                assert rc == UNAVAILABLE, (args, rc, err)
                assert took < limit + 1.5, (args, took, err)
                # With --wait, the call that waits may see gRPC give up
                # on the connection first (it waits longer than the
                # others); then the reason says so.
                assert re.fullmatch(r"leasectl: %s: no answer within "
                                    r"--timeout 2s.* \(DEADLINE_EXCEEDED\)\n"
                                    % args[0], err) or \
                    ("--wait" in args and err.endswith(
                        "timed out before receiving SETTINGS frame "
                        "(UNAVAILABLE)\n")), (args, err)
        finally:
            d.proc.send_signal(signal.SIGCONT)


def test_get_in_the_restart_quarantine_says_what_holds():
    """After a restart, a lease whose holder vanished with the old daemon
    still counts until the quarantine ends, though its stored expiry has
    passed: get and list say it is live, until when, and why (they said
    "expires" with a time in the past), and --json gives live_until."""
    ttl = 8  # the four leasectl runs below fit in it under a sanitizer
    with Leased(ttl="%ds" % ttl) as d:
        a = ctl_json(d, "acquire", "q", "--owner", "alice")
        assert d.stop() == 0
        while time.time_ns() <= a["expiry_ns"]:  # its expiry passes
            time.sleep(0.05)
        before = time.time_ns()
        d.start()
        after = time.time_ns()
        # What it says holds: another owner is refused meanwhile (asked
        # first, well inside the quarantine however slow the build).
        assert ctl(d, "acquire", "q", "--owner", "bob")[0] == HELD
        rc, out, err = ctl(d, "get", "q")
        m = re.fullmatch(r"q  owner alice  token 1  live until (\S+) "
                         r"\(in ([0-9.]+)s\): restart quarantine; expiry "
                         r"(\S+) \(([0-9.]+)s ago\)\n", out)
        assert rc == 0 and m, (rc, out, err)
        assert 0 < float(m.group(2)) <= ttl, out
        rc, listed, err = ctl(d, "list")
        assert rc == 0 and re.fullmatch(
            r"q  owner alice  token 1  live until .*: restart quarantine; "
            r"expiry .* ago\)\n", listed), (listed, err)
        asked = time.time_ns()
        g = ctl_json(d, "get", "q")
        assert g["live"] and g["expiry_ns"] == a["expiry_ns"] < asked, g
        # The quarantine's end: a TTL after the start, on this clock.
        slack = 500 * 10**6
        assert before + ttl * 10**9 - slack < g["live_until_ns"] < \
            after + ttl * 10**9 + slack, (before, after, g)
        # Live when asked: its end had not come (however long the answer
        # took to arrive).
        assert g["live_until_ns"] > asked, g


def test_names_with_control_characters_are_shown_escaped():
    """A session id or owner may hold control characters: text output
    shows them escaped (one line per lease, no escape sequence reaches the
    terminal), in messages too; JSON escapes them its own way, and its
    strings read back as they were."""
    session, owner = "esc\x1b[31mRED", "nl\nsecond\u009b\\"
    with Leased(ttl="30s") as d:
        rc, out, err = ctl(d, "acquire", session, "--owner", owner)
        line = ("esc\\x1b[31mRED  owner nl\\nsecond\\u009b\\\\  token 1  "
                "expires ")
        assert rc == 0 and out.startswith(line), (out, err)
        assert out.count("\n") == 1 and "\x1b" not in out, out
        for args in (("get", session), ("list",)):
            rc, out, err = ctl(d, *args)
            assert rc == 0 and out.startswith(line) and \
                out.count("\n") == 1 and "\x1b" not in out, (args, out)
        rc, _, err = ctl(d, "renew", session, "--owner", "me")
        assert rc == HELD and err == (
            "leasectl: renew: esc\\x1b[31mRED is held by "
            "nl\\nsecond\\u009b\\\\, not me (FAILED_PRECONDITION)\n"), err
        rc, out, err = ctl(d, "--json", "get", session)
        assert rc == 0 and out.count("\n") == 1 and "\x1b" not in out and \
            "\u009b" not in out, out
        g = json.loads(out)
        assert (g["session_id"], g["owner"]) == (session, owner), g
        # Read back from JSON on stdin, it is the same lease.
        assert ctl(d, "release", stdin=out)[0] == 0
        assert ctl(d, "get", session)[0] == NOT_FOUND


def test_man_page_covers_every_command_and_option():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "docs", "leasectl.1")) as f:
        man = f.read().replace("\\-", "-")
    usage = subprocess.run([os.environ["LEASECTL_BIN"], "--help"],
                           capture_output=True, text=True).stdout
    commands = ["acquire", "renew", "release", "get", "list", "stats",
                "revoke", "snapshot", "health", "hold", "watch"]
    for word in commands + [
            "--url", "--tls-ca", "--tls-cert", "--tls-key",
            "--tls-server-name", "--token-file", "--timeout", "--json",
            "--wait", "--grace", "--ttl", "--limit", "--owner", "--token",
            "--prefix", "--after", "LEASE_OWNER"]:
        assert word in usage, word
        assert word in man, word
    # The usage texts come from leasectl's table of options: whatever
    # option they show, the man page has too.
    for cmd in commands:
        p = subprocess.run([os.environ["LEASECTL_BIN"], cmd, "--help"],
                           capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.startswith(
            "Usage: leasectl %s" % cmd), p.stdout
        usage += p.stdout
    shown = set(re.findall(r"--[a-z][a-z-]*", usage))
    for option in shown:
        assert re.search(r"(?<![a-z-])%s(?![a-z-])" % option, man), option
    if os.path.exists("/usr/bin/groff"):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z",
                            os.path.join(here, "..", "..", "docs",
                                         "leasectl.1")],
                           capture_output=True, text=True)
        assert p.returncode == 0 and p.stderr == "", p.stderr


def test_wait_until_free():
    # A TTL that outlasts two leasectl runs on a loaded machine.
    with Leased(ttl="2s") as d:
        time.sleep(2.1)  # past the restart quarantine
        ctl_json(d, "acquire", "w", "--owner", "alice")
        assert ctl(d, "acquire", "w", "--owner", "bob")[0] == HELD
        start = time.monotonic()
        b = ctl_json(d, "acquire", "w", "--owner", "bob", "--wait", "20s")
        # Soon after alice's lease ran out, not at the end of --wait.
        assert b["token"] == 2 and time.monotonic() - start < 10


def test_wait_inf_waits_as_long_as_it_takes():
    """--wait inf: no limit. bob's acquire, started while alice holds the
    lease, returns once her lease has run out, with the next token."""
    with Leased(ttl="2s") as d:
        a = ctl_json(d, "acquire", "w", "--owner", "alice")
        b = ctl_json(d, "acquire", "w", "--owner", "bob", "--wait", "inf")
        assert b["token"] == a["token"] + 1, (a, b)
        # Granted after alice's expiry: bob's lease lasts a TTL from then.
        assert b["expiry_ns"] - 2 * 10**9 >= a["expiry_ns"], (a, b)
        rc, out, err = ctl(d, "hold", "w", "--owner", "carol", "--wait",
                           "inf", "--", "sh", "-c", 'echo "$LEASE_TOKEN"')
        assert (rc, out) == (0, "%d\n" % (b["token"] + 1)), (rc, out, err)


def test_tls_and_token_file():
    with tempfile.TemporaryDirectory() as tmp:
        c = certs.make(os.path.join(tmp, "certs"))
        tokens = os.path.join(tmp, "tokens")
        harness.write_private(tokens, "# for leasectl\nctl-token\n")
        with Leased(tls=c, token="ctl-token", ttl="30s") as d:
            tls = ["--tls-ca", c.path("ca.pem")]
            assert ctl(d, "stats", extra=tls)[0] == UNAUTHENTICATED
            a = ctl_json(d, "acquire", "t", "--owner", "o",
                         extra=tls + ["--token-file", tokens])
            assert a["token"] == 1
            assert ctl(d, "health", extra=tls)[0] == 0  # needs no token
            # The same options after the command.
            rc, out, err = ctl(d, "acquire", "t2", "--owner", "o",
                               "--tls-ca", c.path("ca.pem"), "--json",
                               "--token-file", tokens)
            assert rc == 0 and json.loads(out)["token"] == 1, (rc, out, err)


def test_refused_credentials_and_policy_have_exit_codes_of_their_own():
    """No bearer token, or a wrong one: exit 9 (UNAUTHENTICATED), for lease
    and admin calls alike, and nothing changes; a call the policy refuses
    (PERMISSION_DENIED): exit 8. Neither is folded into "unavailable" (4),
    which a caller would retry."""
    with tempfile.TemporaryDirectory() as tmp:
        wrong = os.path.join(tmp, "wrong")
        harness.write_private(wrong, "not-the-token\n")
        right = os.path.join(tmp, "right")
        harness.write_private(right, "right-token\n")
        policy = os.path.join(tmp, "policy")
        # The harness's token file has the token alone on line 2.
        harness.write_private(policy, "token-2 sessions=mine/ owners=*\n")
        with Leased(token="right-token",
                    args=["--policy-file", policy]) as d:
            for extra in ([], ["--token-file", wrong]):
                for args in (("acquire", "s", "--owner", "o"), ("stats",)):
                    rc, _, err = ctl(d, *args, extra=extra)
                    assert rc == UNAUTHENTICATED, (args, extra, rc, err)
                    assert err.rstrip().endswith("(UNAUTHENTICATED)"), err
            token = ["--token-file", right]
            rc, _, err = ctl(d, "acquire", "s", "--owner", "o", extra=token)
            assert rc == DENIED, (rc, err)
            assert err == ('leasectl: acquire: identity "token-2" may not '
                           'use this session_id (PERMISSION_DENIED)\n'), err
            rc, _, err = ctl(d, "stats", extra=token)
            assert rc == DENIED, (rc, err)
            assert ctl(d, "acquire", "mine/1", "--owner", "o",
                       extra=token)[0] == 0
            d.wait_log(r'msg=takeover identity="token-2" session="mine/1"')
            assert "msg=takeover" not in d.log_text().replace(
                'msg=takeover identity="token-2" session="mine/1"', "")


def hold(d, *args, env=None, **kw):
    return subprocess.Popen(
        [os.environ["LEASECTL_BIN"], "--url", d.addr, "hold"] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environ(env), **kw)


def test_hold_runs_the_command_with_the_lease_and_releases():
    with Leased(ttl="2s") as d, tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "env")
        done = os.path.join(tmp, "done")
        # The command runs until the test has checked what it holds.
        p = hold(d, "h1", "--owner", "holder", "--", "sh", "-c",
                 'echo "$LEASE_SESSION $LEASE_OWNER $LEASE_TOKEN" > %s; '
                 'while [ ! -e %s ]; do sleep 0.05; done; exit 7'
                 % (out, done))
        d.wait_file(out)  # the command runs: the lease is held
        assert ctl(d, "acquire", "h1", "--owner", "other")[0] == HELD
        assert ctl(d, "hold", "h1", "--", "true")[0] == HELD  # no --wait
        open(done, "w").close()
        assert p.wait(timeout=20) == 7  # the command's status
        with open(out) as f:
            assert f.read().split() == ["h1", "holder", "1"]
        # Released at the end: the next owner gets it at once.
        assert ctl_json(d, "acquire", "h1", "--owner", "other")["token"] == 2


def test_hold_default_owner_is_unique_and_renew_inside_acts_as_holder():
    with Leased(ttl="30s") as d, tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "env")
        ctl_bin = os.environ["LEASECTL_BIN"]
        # Inside, a plain `leasectl renew SESSION` renews the held lease.
        p = hold(d, "h6", "--", "sh", "-c",
                 'echo "$LEASE_OWNER" > %s.new; mv %s.new %s; sleep 2; '
                 '"%s" --url %s renew h6' % (out, out, out, ctl_bin, d.addr))
        d.wait_file(out)  # it holds the lease now
        # The same user, from the same shell: excluded, as with flock(1).
        rc, _, err = ctl(d, "hold", "h6", "--", "true")
        assert rc == HELD, (rc, err)
        assert p.wait(timeout=20) == 0, p.stderr.read()
        with open(out) as f:
            owner = f.read().strip()
        assert re.fullmatch(re.escape(user_at_host()) + r"/\d+-[0-9a-f]{8}",
                            owner), owner
        # $LEASE_OWNER names hold's owner too.
        rc, _, err = ctl(d, "hold", "h7", "--", "sh", "-c",
                         'test "$LEASE_OWNER" = erin',
                         env={"LEASE_OWNER": "erin"})
        assert rc == 0, (rc, err)


def test_hold_keeps_renewing_and_a_second_holder_waits():
    # 2 s: a renewal on a loaded machine may be late by hundreds of
    # milliseconds without losing the lease.
    with Leased(ttl="2s") as d:
        time.sleep(2.1)  # past the restart quarantine
        started = os.path.join(d.data_dir, "started")
        first = hold(d, "h2", "--owner", "a", "--", "sh", "-c",
                     'touch "$1"; exec sleep 6', "sh", started)
        d.wait_file(started)  # a holds it
        start = time.monotonic()
        rc, _, err = ctl(d, "hold", "h2", "--owner", "b", "--wait", "15s",
                         "--", "true")
        took = time.monotonic() - start
        assert first.wait(timeout=15) == 0, first.stderr.read()
        # It held on for ~6 s across several TTLs (renewals worked), then
        # the second holder ran.
        assert rc == 0 and took > 4.0, (rc, took, err)


def test_hold_stops_the_command_when_the_lease_is_lost():
    # 2 s: hold's acquire is answered with most of the lease left, however
    # slow the machine.
    with Leased(ttl="2s") as d:
        time.sleep(2.1)  # past the restart quarantine
        # Stopped once its command runs, that is once it holds the lease
        # (not after a fixed wait: a loaded machine starts it later).
        started = os.path.join(d.data_dir, "started")
        p = hold(d, "h3", "--owner", "a", "--grace", "1s", "--", "sh", "-c",
                 'touch "$1"; exec sleep 60', "sh", started)
        d.wait_file(started)
        p.send_signal(signal.SIGSTOP)  # leasectl cannot renew now
        time.sleep(3)  # a TTL, and a second for a renewal in flight
        taken = ctl_json(d, "acquire", "h3", "--owner", "b")
        assert taken["token"] == 2
        p.send_signal(signal.SIGCONT)
        rc = p.wait(timeout=15)
        assert rc == 128 + signal.SIGTERM, (rc, p.stderr.read())
        assert "lost" in p.stderr.read()
        # It did not release b's lease on the way out.
        assert ctl_json(d, "get", "h3")["owner"] == "b"


# A command that says it runs (a file, argv[2]), notes when it is told to
# stop (CLOCK_MONOTONIC, shared with the test), then dies of that SIGTERM.
# The signal is blocked and waited for, not handled: Python runs a handler
# between bytecodes, so one that comes just before a sleep starts would
# wait for the sleep to end.
STOPPED_AT = """
import os, signal, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
open(sys.argv[2], "w").close()
signal.sigwait({signal.SIGTERM})
with open(sys.argv[1], "w") as f:
    f.write(repr(time.monotonic()))
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
os.kill(os.getpid(), signal.SIGTERM)
"""


def test_hold_stops_the_command_when_the_service_stays_away():
    with Leased(ttl="2s") as d, tempfile.TemporaryDirectory() as tmp:
        stopped = os.path.join(tmp, "stopped")
        ready = os.path.join(tmp, "ready")
        time.sleep(2.1)
        p = hold(d, "h5", "--owner", "a", "--grace", "1s", "--",
                 "/usr/bin/python3", "-c", STOPPED_AT, stopped, ready)
        d.wait_file(ready)  # the lease is held (however slow the machine)
        time.sleep(0.5)
        d.stop()  # and it does not come back
        start = time.monotonic()
        rc = p.wait(timeout=15)
        err = p.stderr.read()
        assert rc == 128 + signal.SIGTERM, (rc, err)
        assert "no renewal of h5 in time: stopping the command" in err, err
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
            started = os.path.join(tmp, "started")
            p = hold(d, "h4", "--owner", "a", "--", "sh", "-c",
                     'touch "$1"; exec sleep 5', "sh", started)
            d.wait_file(started)  # the lease is held
            time.sleep(0.3)
            assert d.stop() == 0
            time.sleep(0.5)  # renewals fail meanwhile (unavailable)
            d.start()
            rc = p.wait(timeout=20)
            err = p.stderr.read()
            assert rc == 0, (rc, err, d.log_text())
            assert ctl(d, "get", "h4")[0] == NOT_FOUND  # released


def renewal_intervals(d, sessions, count, timeout=20.0):
    """Watches the leases of sessions (the admin service's Get) until each
    has been renewed count times after its acquire; returns, per session,
    the count intervals in seconds between its grants as the daemon made
    them (successive expiries). Two grants closer than 100 ms are one:
    hold's own acquire, then its keeper's."""
    c = d.client()
    expiries = {s: [] for s in sessions}
    deadline = time.monotonic() + timeout
    while any(len(e) <= count for e in expiries.values()):
        assert time.monotonic() < deadline, expiries
        for s in sessions:
            try:
                lease = c.get(s)
            except harness.grpc.RpcError:
                continue  # not acquired yet
            ns = lease.expiry.seconds * 10**9 + lease.expiry.nanos
            e = expiries[s]
            if e and ns - e[-1] < 100 * 10**6:
                e[-1] = ns
            elif not e or ns != e[-1]:
                e.append(ns)
        time.sleep(0.01)
    return {s: [(b - a) / 1e9 for a, b in zip(e, e[1:])][:count]
            for s, e in expiries.items()}


def test_hold_renewals_are_jittered_per_process():
    """Two holds started together each renew at a third of the TTL less a
    random part of a tenth, drawn from a generator seeded per process:
    their intervals differ. Had the keeper drawn its jitter unseeded (as
    rand() is), both would draw the same parts and renew in step; the
    intervals would then differ only by the noise of the calls (a few ms
    each), not by a third of the tenth on average."""
    ttl = 2.0
    with Leased(ttl="2s") as d:
        holds = [hold(d, s, "--owner", s, "--", "sleep", "30")
                 for s in ("j1", "j2")]
        try:
            # The first interval runs from the acquire, which the keeper
            # counts from its send time: a slow first call shortens it;
            # the second follows a renewal still slow under a sanitizer.
            got = {s: v[2:] for s, v in
                   renewal_intervals(d, ["j1", "j2"], 12).items()}
        finally:
            for p in holds:
                p.send_signal(signal.SIGTERM)  # passed on to sleep
            rcs = [p.wait(timeout=10) for p in holds]
        assert rcs == [128 + signal.SIGTERM] * 2, rcs
        for s, intervals in got.items():
            # The keeper's policy: renewals a third of the TTL apart less
            # up to a tenth. One interval also carries the difference of
            # two calls' delays (a tenth of a second and more under a
            # sanitizer); the mean of ten only a tenth of the difference
            # between the first call's and the last's.
            mean = sum(intervals) / len(intervals)
            assert ttl / 3 - ttl / 10 - 0.1 < mean < ttl / 3 + 0.1, (s, got)
        apart = sum(abs(a - b) for a, b in zip(got["j1"], got["j2"]))
        # Uniform parts of ttl/10 drawn apart: 10 * ttl/30 apart on
        # average; under 0.4 * ttl/10 by chance far less than once in
        # 10^5 runs.
        assert apart > 0.4 * ttl / 10, (apart, got)


def stderr_lines(p):
    """Reads p's stderr on a thread; returns the list it fills with
    (time.monotonic(), line) as lines come, and the thread."""
    lines = []

    def read():
        for line in p.stderr:
            lines.append((time.monotonic(), line))
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return lines, t


def test_hold_retries_as_the_keeper_does():
    """When renewals fail (here the daemon stops accepting hold's token,
    so each fails at once), hold retries every tenth of the TTL (the
    keeper's policy, at most every second), and stops the command
    --grace (a tenth of the TTL by default) before the local deadline."""
    ttl = 3.0
    with tempfile.TemporaryDirectory() as tmp, \
            Leased(ttl="3s", token="first") as d:
        tokens = os.path.join(tmp, "tokens")
        harness.write_private(tokens, "first\n")
        ready = os.path.join(tmp, "ready")
        p = subprocess.Popen(
            [os.environ["LEASECTL_BIN"], "hold", "r1", "--owner", "a",
             "--url", d.addr, "--token-file", tokens, "--",
             "sh", "-c", ": > %s; exec sleep 30" % ready],
            stderr=subprocess.PIPE, text=True, env=environ())
        lines, reader = stderr_lines(p)
        d.wait_file(ready)
        harness.write_private(d.token_file, "second\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r"msg=reloaded what=tokens count=1")
        rc = p.wait(timeout=15)
        reader.join(timeout=5)
        err = "".join(line for _, line in lines)
        assert rc == 128 + signal.SIGTERM, (rc, err)
        assert "no renewal of r1 in time: stopping the command" in err, err
        tries = [t for t, line in lines
                 if line.startswith("leasectl: hold: renew: ")]
        gaps = [b - a for a, b in zip(tries, tries[1:])]
        # From the first failure (within a third of the TTL of the last
        # success) to SIGTERM (0.99 TTL less the grace, 0.3 s, after it):
        # 1.67 s or more, a retry every 0.3 s, so four or more retries
        # while each takes under 0.1 s (at a TTL of 2 s: 1.1 s, every
        # 0.2 s, and calls of 80 ms left three); hold's own policy of old
        # retried every 0.5 s.
        assert len(tries) >= 4, err
        assert ttl / 20 < statistics.median(gaps) < ttl / 10 + 0.15, gaps


# A command that ignores SIGTERM, and says when it runs.
IGNORES_TERM = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def test_hold_kills_the_command_after_grace_when_a_renewal_is_refused():
    """A renewal refused (the lease was released behind hold's back) is a
    loss at once: the message, SIGTERM, and SIGKILL after --grace for a
    command that ignores SIGTERM; hold neither releases nor takes the
    lease again."""
    with Leased(ttl="3s") as d, tempfile.TemporaryDirectory() as tmp:
        ready = os.path.join(tmp, "ready")
        p = hold(d, "r2", "--owner", "a", "--grace", "500ms", "--",
                 "/usr/bin/python3", "-c", IGNORES_TERM, ready)
        d.wait_file(ready)
        # From before the release: the refusal may come before a slow
        # leasectl release has exited.
        start = time.monotonic()
        assert ctl(d, "release", "r2", "--owner", "a", "--token", "1")[0] == 0
        rc = p.wait(timeout=15)
        took = time.monotonic() - start
        err = p.stderr.read()
        assert rc == 128 + signal.SIGKILL, (rc, err)
        assert err == "leasectl: hold: the lease of r2 was lost " \
            "(FAILED_PRECONDITION)\n", err
        # The release, the next renewal (within a third of the TTL), then
        # the grace.
        assert 0.5 <= took < 1.0 + 0.5 + 3.0, took
        assert ctl(d, "get", "r2")[0] == NOT_FOUND


# A command that writes the name of the signal it gets to a file, and
# exits 42 (the signals waited for, as in STOPPED_AT).
NOTES_SIGNAL = """
import signal, sys
sigs = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
open(sys.argv[2], "w").close()
sig = signal.sigwait(sigs)
with open(sys.argv[1], "w") as f:
    f.write(signal.Signals(sig).name)
sys.exit(42)
"""


def test_hold_passes_signals_on_to_the_command():
    with Leased(ttl="30s") as d, tempfile.TemporaryDirectory() as tmp:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            noted = os.path.join(tmp, "noted-%d" % sig)
            ready = os.path.join(tmp, "ready-%d" % sig)
            session = "sig-%d" % sig
            p = hold(d, session, "--", "/usr/bin/python3", "-c",
                     NOTES_SIGNAL, noted, ready)
            d.wait_file(ready)
            p.send_signal(sig)
            try:
                rc = p.wait(timeout=45)
            except subprocess.TimeoutExpired:
                p.kill()
                # Which half hung: passing the signal on, or the release?
                raise AssertionError((sig.name, os.path.exists(noted),
                                      p.communicate()[1]))
            assert rc == 42, p.stderr.read()
            with open(noted) as f:
                assert f.read() == sig.name
            # Not lost: released on the way out.
            assert ctl(d, "get", session)[0] == NOT_FOUND


def test_hold_signalled_before_the_command_runs():
    """While hold waits for the lease (--wait), a signal does what it
    would to any program: SIGTERM ends leasectl and the command never
    runs; SIGHUP, ignored as under nohup, stays ignored, and the command
    runs once the lease is free."""
    with Leased(ttl="30s") as d, tempfile.TemporaryDirectory() as tmp:
        other = ctl_json(d, "acquire", "busy", "--owner", "other")
        ran = os.path.join(tmp, "ran")
        p = hold(d, "busy", "--wait", "60s", "--", "/usr/bin/touch", ran)
        time.sleep(1)  # in its wait (before it, the same must happen)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == -signal.SIGTERM, p.stderr.read()
        assert not os.path.exists(ran)

        p = hold(d, "busy", "--wait", "60s", "--", "/usr/bin/touch", ran,
                 preexec_fn=lambda: signal.signal(signal.SIGHUP,
                                                  signal.SIG_IGN))
        time.sleep(1)
        p.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert p.poll() is None, p.stderr.read()
        assert ctl(d, "release", "busy", "--owner", "other", "--token",
                   str(other["token"]))[0] == 0
        assert p.wait(timeout=30) == 0, p.stderr.read()
        assert os.path.exists(ran)


def test_hold_leaves_what_follows_dashdash_to_the_command():
    """leasectl's options and hold's may come around SESSION; after --,
    every word is CMD's, options of leasectl's or not."""
    with Leased(ttl="30s") as d, tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "args")
        rc, _, err = run_ctl(
            "--owner", "o", "hold", "h9", "--url", d.addr, "--json",
            "--wait", "1s", "--",
            "sh", "-c", 'printf "%%s\\n" "$LEASE_OWNER" "$@" > %s' % out,
            "sh", "--json", "--url", "elsewhere", "--owner", "x", "--help",
            "--", "-z")
        assert rc == 0, (rc, err)
        with open(out) as f:
            assert f.read().splitlines() == [
                "o", "--json", "--url", "elsewhere", "--owner", "x",
                "--help", "--", "-z"]
        assert ctl(d, "get", "h9")[0] == NOT_FOUND  # released


class QuietServer:
    """A server of Mecatl's protocol other than leased: the same rules (in
    memory, one TTL), but no TTL said with its grants. A context manager;
    .addr is where it listens."""

    def __init__(self, ttl):
        import concurrent.futures
        pb = harness.pb
        self.ttl = ttl
        self.leases = {}  # session: [owner, token, expiry (wall s)]
        self.lock = threading.Lock()
        rpc = harness.grpc.unary_unary_rpc_method_handler
        handler = harness.grpc.method_handlers_generic_handler(
            "mecatl.driver.v1.SessionLeaseService", {
                "Acquire": rpc(self.acquire, pb.AcquireRequest.FromString,
                               pb.LeaseResponse.SerializeToString),
                "Renew": rpc(self.renew, pb.RenewRequest.FromString,
                             pb.LeaseResponse.SerializeToString),
                "Release": rpc(self.release, pb.ReleaseRequest.FromString,
                               pb.ReleaseResponse.SerializeToString)})
        self.server = harness.grpc.server(
            concurrent.futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers((handler,))
        self.addr = "127.0.0.1:%d" % self.server.add_insecure_port(
            "127.0.0.1:0")

    def reply(self, session):
        owner, token, expiry = self.leases[session]
        lease = harness.pb.Lease(session_id=session, owner=owner,
                                 token=token)
        lease.expiry.FromNanoseconds(int(expiry * 1e9))
        return harness.pb.LeaseResponse(lease=lease)

    def acquire(self, req, ctx):
        with self.lock:
            now = time.time()
            owner, token, expiry = self.leases.get(req.session_id,
                                                   ["", 0, 0])
            if owner not in ("", req.owner) and expiry > now:
                ctx.abort(harness.grpc.StatusCode.FAILED_PRECONDITION,
                          "held")
            if owner != req.owner or expiry <= now:
                token += 1
            self.leases[req.session_id] = [req.owner, token, now + self.ttl]
            return self.reply(req.session_id)

    def renew(self, req, ctx):
        with self.lock:
            l = self.leases.get(req.lease.session_id)
            if l is None or l[:2] != [req.lease.owner, req.lease.token]:
                ctx.abort(harness.grpc.StatusCode.FAILED_PRECONDITION,
                          "lost")
            l[2] = time.time() + self.ttl
            return self.reply(req.lease.session_id)

    def release(self, req, ctx):
        with self.lock:
            l = self.leases.get(req.lease.session_id)
            if l is not None and l[:2] == [req.lease.owner, req.lease.token]:
                l[0] = ""
            return harness.pb.ReleaseResponse()

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(0)


def test_hold_through_a_server_that_says_no_ttl():
    """A server other than leased says no TTL: hold trusts the expiry less
    this host's clock, and says so; with --ttl it trusts that, quietly.
    Either way the command runs with the lease and it is released."""
    with QuietServer(ttl=5.0) as q:
        rc, _, err = run_ctl("--url", q.addr, "hold", "q1", "--", "sh", "-c",
                             'test "$LEASE_TOKEN" = 1')
        assert rc == 0, (rc, err)
        m = re.search(r"the service does not say its TTL: trusting "
                      r"([0-9.]+)s, its expiry less this host's clock", err)
        assert m and 4.5 < float(m.group(1)) <= 5.0, err
        assert err.count("does not say its TTL") == 1, err
        assert q.leases["q1"][0] == ""  # released
        rc, _, err = run_ctl("--url", q.addr, "hold", "q1", "--ttl", "2s",
                             "--", "sh", "-c", 'test "$LEASE_TOKEN" = 2')
        assert rc == 0 and err == "", (rc, err)


def test_hold_gives_the_command_the_terminal():
    """Run from a terminal's foreground, hold hands the terminal to its
    command's process group, so that the command reads it as it would
    without hold (in a group of its own without the terminal, reading it
    would stop the command with SIGTTIN, and hold would hang)."""
    import pty
    with Leased(ttl="30s") as d:
        pid, fd = pty.fork()
        if pid == 0:  # a new session, the terminal its own
            try:
                os.execve(os.environ["LEASECTL_BIN"],
                          ["leasectl", "--url", d.addr, "hold", "tty", "--",
                           "sh", "-c", 'read line; echo "got:$line"'],
                          environ())
            finally:
                os._exit(127)
        try:
            os.write(fd, b"hello\n")
            out = b""
            deadline = time.monotonic() + 20
            while b"got:hello" not in out:
                left = deadline - time.monotonic()
                assert left > 0, out
                if not select.select([fd], [], [], left)[0]:
                    continue
                try:
                    out += os.read(fd, 1024)
                except OSError:  # EIO: the terminal's last process left
                    break
            assert b"got:hello" in out, out
            _, status = os.waitpid(pid, 0)
            pid = 0
            assert os.waitstatus_to_exitcode(status) == 0, (status, out)
        finally:
            if pid:  # hold, killed, takes its command's group along
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.close(fd)


harness.main(globals())
