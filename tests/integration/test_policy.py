"""Who may act as whom, against the real leased: identities (named bearer
tokens, client certificates), the policy file (--policy-file), its
reloads and its errors, PERMISSION_DENIED changing nothing, List showing
each caller only its own sessions, and the audit lines.

Certificates come from a throwaway CA made with openssl for the run
(certs.py): team-a's has a URI and a DNS SAN, team-b's a DNS SAN,
client2's only a common name.
"""
import atexit
import os
import re
import shutil
import signal
import tempfile
import time

import grpc

import certs
import harness
from harness import Leased, status_of

_tmp = tempfile.mkdtemp(prefix="leased-policy-")
atexit.register(shutil.rmtree, _tmp, True)
CERTS = certs.make(os.path.join(_tmp, "certs"))

OK = grpc.StatusCode.OK
DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTH = grpc.StatusCode.UNAUTHENTICATED

TEAM_A_URI = "spiffe://leased.test/team-a"

TOKENS = ("team-a tok-team-a-0123456789\n"
          "team-b tok-team-b-0123456789\n"
          "ops tok-ops-0123456789\n"
          "stranger tok-stranger-0123456789\n")


def token_of(name):
    return "tok-%s-0123456789" % name


def write_policy(text, name="policy"):
    path = os.path.join(_tmp, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)
    return path


def token_file():
    path = os.path.join(_tmp, "tokens")
    harness.write_private(path, TOKENS)
    return path


def mtls_client(d, cert, token=None):
    ch = d.channel(creds=harness.tls_creds(CERTS, cert))
    return harness.Client(ch, timeout=5.0, token=token)


def token_client(d, name):
    return harness.Client(d.channel(), timeout=5.0, token=token_of(name))


def lease(session, owner, token):
    return harness.pb.Lease(session_id=session, owner=owner, token=token)


def snapshot(ops, session):
    """What the admin service says of session: (owner, token, expiry)."""
    got = ops.get(session)
    return got.owner, got.token, got.expiry.seconds, got.expiry.nanos


def denied_reason(fn, *args):
    try:
        fn(*args)
    except grpc.RpcError as e:
        assert e.code() == DENIED, (e.code(), e.details())
        return e.details()
    raise AssertionError("not refused")


def check_two_tenants(d, a, b, ops, id_a, id_b):
    """The two tenants a and b (clients), each on its own prefix and owner
    prefix; ops may read everything through the admin service."""
    # Each does everything with its own sessions and owners.
    la = a.acquire("a/1", "host-a-1")
    lb = b.acquire("b/1", "host-b-1")
    la = a.renew(la)
    lb = b.renew(lb)
    b.release(b.acquire("b/2", "host-b-2"))
    assert b.acquire("b/2", "host-b-3").token == 2
    # Every attempt on the other's sessions or owners is refused, and
    # changes nothing, as the admin service shows.
    before = {s: snapshot(ops, s) for s in ("a/1", "b/1")}
    time.sleep(0.05)  # a renewal that got through would move the expiry
    attempts = [
        (b.acquire, "a/1", "host-b-1"),    # the other's session
        (b.acquire, "a/9", "host-a-1"),    # and its owner
        (b.renew, la),                     # its lease, token and all
        (b.release, la),
        (b.acquire, "b/3", "host-a-1"),    # its own session, their owner
        (a.acquire, "b/1", "host-a-1"),
        (a.renew, lb),
        (a.release, lb),
        (a.acquire, "a/3", "host-b-1"),
    ]
    for fn, *args in attempts:
        reason = denied_reason(fn, *args)
        assert "may not use this" in reason, reason
    assert {s: snapshot(ops, s) for s in ("a/1", "b/1")} == before
    for s in ("a/9", "b/3", "a/3"):
        assert status_of(ops.get, s) == grpc.StatusCode.NOT_FOUND, s
    # Their own leases still work.
    assert a.renew(la).token == la.token
    assert b.renew(lb).token == lb.token
    # The admin service: a may read its own only, b not at all.
    assert a.get("a/1").owner == "host-a-1"
    assert "may not use this session_id" in denied_reason(a.get, "b/1")
    assert [l.session_id for l in a.list("").leases] == ["a/1"]
    assert a.stats().live_leases >= 3
    for fn, *args in [(b.get, "b/1"), (b.list, ""), (b.stats,)]:
        assert "may not call the admin service" in denied_reason(fn, *args)
    assert sorted(l.session_id for l in ops.list("").leases) == \
        ["a/1", "b/1", "b/2"]
    # Audited: the takeovers and the release with their identities, and
    # the refusals (fewer than the limit a second).
    log = d.wait_log(r'msg=denied identity="%s" method=Acquire '
                     r'session="a/3"' % re.escape(id_a)).string
    for line in ['msg=takeover identity="%s" session="a/1" owner="host-a-1" '
                 'token=1' % id_a,
                 'msg=release identity="%s" session="b/2" owner="host-b-2" '
                 'token=1' % id_b,
                 'msg=takeover identity="%s" session="b/2" owner="host-b-3" '
                 'token=2' % id_b,
                 'msg=denied identity="%s" method=Release session="a/1" '
                 'owner="host-a-1" token=1 reason="identity' % id_b]:
        assert line in log, line
    assert log.count("msg=takeover ") == 4, log  # renewals are not audited
    # Counted by identity.
    m = d.metrics()
    denied = {dict(k[1])["identity"]: v for k, v in m.items()
              if k[0] == "leased_permission_denied_total"}
    assert denied[id_a] == 5 and denied[id_b] == 8, denied
    assert m[("leased_requests_total",
              (("code", "PERMISSION_DENIED"), ("method", "Release")))] == 2


def test_two_tenants_by_client_certificate():
    policy = write_policy(
        "# tenants by certificate: a URI SAN, a DNS SAN, a common name\n"
        "%s sessions=a/ owners=host-a admin=read\n"
        "team-b.test sessions=b/ owners=host-b\n"
        "client-two sessions=* owners=* admin=read\n" % TEAM_A_URI)
    with Leased(tls=CERTS, ttl="30s",
                args=["--tls-client-ca", CERTS.path("ca.pem"),
                      "--policy-file", policy,
                      "--metrics-listen", "127.0.0.1:0"]) as d:
        check_two_tenants(d, mtls_client(d, "team-a"),
                          mtls_client(d, "team-b"),
                          mtls_client(d, "client2"), TEAM_A_URI,
                          "team-b.test")


def test_two_tenants_by_named_token():
    policy = write_policy("team-a sessions=a/ owners=host-a admin=read\n"
                          "team-b sessions=b/ owners=host-b admin=none\n"
                          "ops sessions=* admin=read\n")
    with Leased(ttl="30s", args=["--auth-token-file", token_file(),
                                 "--policy-file", policy,
                                 "--metrics-listen", "127.0.0.1:0"]) as d:
        ops = token_client(d, "ops")
        check_two_tenants(d, token_client(d, "team-a"),
                          token_client(d, "team-b"), ops, "team-a", "team-b")
        # ops reads all but may act as no owner (no owners= field).
        assert "may not use this owner" in denied_reason(ops.acquire, "c/1",
                                                         "anyone")
        # An identity the policy does not name, with no * rule: nothing.
        stranger = token_client(d, "stranger")
        reason = denied_reason(stranger.acquire, "a/5", "host-a-1")
        assert reason == 'identity "stranger" has no rule in the policy'
        # Wrong credentials stay UNAUTHENTICATED, before any policy.
        wrong = harness.Client(d.channel(), token="tok-nobody-0123456789")
        assert status_of(wrong.acquire, "a/5", "host-a-1") == UNAUTH
        log = d.wait_log(r"msg=unauthenticated peer=\S+ not_logged=0").string
        assert "tok-" not in log  # never a bearer token


def test_revoke_needs_admin_write_on_the_session():
    policy = write_policy("team-a sessions=a/ owners=host-a admin=read\n"
                          "team-b sessions=b/ admin=write\n"
                          "ops sessions=* admin=write\n")
    with Leased(ttl="30s", args=["--auth-token-file", token_file(),
                                 "--policy-file", policy]) as d:
        a = token_client(d, "team-a")
        la = a.acquire("a/1", "host-a-1")
        assert denied_reason(a.revoke, "a/1") == \
            'identity "team-a" may not revoke (admin=write)'
        assert denied_reason(token_client(d, "team-b").revoke, "a/1") == \
            'identity "team-b" may not use this session_id'
        assert a.renew(la).token == la.token  # the refusals changed nothing
        ops = token_client(d, "ops")
        assert ops.revoke("a/1").owner == "host-a-1"
        assert status_of(a.renew, la) == grpc.StatusCode.FAILED_PRECONDITION
        d.wait_log(r'msg=revoke identity="ops" session="a/1" '
                   r'owner="host-a-1" token=1')
        d.wait_log(r'msg=denied identity="team-a" method=Revoke '
                   r'session="a/1" owner="" token=0 reason="identity')


def test_snapshot_needs_every_session():
    """A snapshot holds every tenant's leases: admin=read on some
    prefixes is not enough, sessions=* is."""
    policy = write_policy("team-a sessions=a/ owners=host-a admin=write\n"
                          "ops sessions=* admin=read\n")
    with Leased(ttl="30s", args=["--auth-token-file", token_file(),
                                 "--policy-file", policy]) as d:
        a = token_client(d, "team-a")
        a.acquire("a/1", "host-a-1")
        assert denied_reason(a.snapshot) == \
            'identity "team-a" may not snapshot (sessions=*)'
        ops = token_client(d, "ops")
        if d.postgres is None:
            assert ops.snapshot().startswith(b"SQLite format 3\0")
        else:
            assert status_of(ops.snapshot) == \
                grpc.StatusCode.FAILED_PRECONDITION


def test_identity_of_certificates_and_tokens_in_the_audit():
    """A URI SAN before a DNS SAN before the common name; a bearer token's
    name before the certificate's identity; without either, the empty
    identity, which only a * rule covers."""
    certificates = [("team-a", TEAM_A_URI), ("client1", "client-one.test"),
                    ("client2", "client-two")]
    with Leased(tls=CERTS, ttl="30s",
                args=["--tls-client-ca", CERTS.path("ca.pem")]) as d:
        for n, (cert, identity) in enumerate(certificates):
            c = mtls_client(d, cert)
            c.release(c.acquire("id/%d" % n, "o"))
            d.wait_log(r'msg=takeover identity="%s" session="id/%d" '
                       r'owner="o" token=1' % (re.escape(identity), n))
            d.wait_log(r'msg=release identity="%s" session="id/%d" '
                       r'owner="o" token=1' % (re.escape(identity), n))
    with Leased(tls=CERTS, ttl="30s",
                args=["--tls-client-ca", CERTS.path("ca.pem"),
                      "--auth-token-file", token_file()]) as d:
        c = mtls_client(d, "team-a", token=token_of("ops"))
        c.acquire("id/t", "o")
        d.wait_log(r'msg=takeover identity="ops" session="id/t"')
    policy = write_policy("* sessions=pub/ owners=*\n")
    with Leased(ttl="30s", args=["--policy-file", policy]) as d:
        c = d.client()
        c.acquire("pub/1", "o")
        d.wait_log(r'msg=takeover identity="" session="pub/1" owner="o" '
                   r'token=1')
        assert denied_reason(c.acquire, "priv/1", "o") == \
            "a caller without an identity may not use this session_id"


def test_identities_a_policy_cannot_name_get_the_star_rule():
    """A certificate identity with a quote, or longer than 256 bytes,
    is logged changed (the quote a space, the end cut) and matches no
    rule of its own, however close a rule's identity comes."""
    cut = certs.LONG_URI[:256]
    policy = write_policy("team'q sessions=* owners=*\n"
                          "%s sessions=* owners=*\n"
                          "* sessions=pub/ owners=*\n" % cut)
    with Leased(tls=CERTS, ttl="30s",
                args=["--tls-client-ca", CERTS.path("ca.pem"),
                      "--policy-file", policy]) as d:
        for cert, logged in [("quote", "team q"),
                             ("long", certs.LONG_URI[:252] + " ...")]:
            c = mtls_client(d, cert)
            reason = denied_reason(c.acquire, "priv/1", "o")
            assert "may not use this session_id" in reason, reason
            c.acquire("pub/" + cert, "o")
            d.wait_log(r'msg=takeover identity="%s" session="pub/%s"'
                       % (re.escape(logged), cert))


def test_list_pages_show_only_the_callers_sessions():
    """Through every page, whether the asked prefix narrows to one of the
    caller's or rows must be filtered out of pages."""
    policy = write_policy("team-a sessions=t/a/,t/c/ owners=* admin=read\n"
                          "team-b sessions=t/b/ owners=* admin=read\n"
                          "ops sessions=* owners=* admin=read\n")
    with Leased(ttl="30s", args=["--auth-token-file", token_file(),
                                 "--policy-file", policy]) as d:
        ops = token_client(d, "ops")
        for i in range(30):
            for t in "abc":
                ops.acquire("t/%s/%02d" % (t, i), "o")

        def listing(c, prefix, page_size):
            got, token, pages = [], "", 0
            while True:
                page = c.list(prefix, page_size=page_size, page_token=token)
                assert len(page.leases) <= page_size
                got += [l.session_id for l in page.leases]
                pages += 1
                token = page.next_page_token
                if not token:
                    return got, pages

        want_a = sorted("t/%s/%02d" % (t, i) for t in "ac" for i in range(30))
        want_b = ["t/b/%02d" % i for i in range(30)]
        for size in (7, 100):
            assert listing(token_client(d, "team-a"), "t/", size)[0] == want_a
            got, pages = listing(token_client(d, "team-b"), "", size)
            assert got == want_b
            if size == 7:
                assert pages == 5  # narrowed to t/b/: no page left empty
            assert listing(token_client(d, "team-a"), "t/c/1", size)[0] == \
                ["t/c/%02d" % i for i in range(10, 20)]
            assert listing(token_client(d, "team-b"), "t/a/", size)[0] == []
        assert len(listing(ops, "", 50)[0]) == 90


def test_sighup_applies_a_new_policy_and_keeps_the_old_on_error():
    path = write_policy("team-a sessions=a/ owners=*\n", "reloaded")
    with Leased(ttl="30s", args=["--auth-token-file", token_file(),
                                 "--policy-file", path]) as d:
        a, b = token_client(d, "team-a"), token_client(d, "team-b")
        assert status_of(a.acquire, "a/1", "o") == OK
        assert status_of(b.acquire, "b/1", "o") == DENIED
        write_policy("team-a sessions=a/ owners=*\n"
                     "team-b sessions=b/ owners=*\n", "reloaded")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r"msg=reloaded what=policy rules=2")
        assert status_of(b.acquire, "b/1", "o") == OK
        # A broken file: refused, named by file and line, the old kept.
        write_policy("team-a sessions=a/ owners=*\n"
                     "team-b sessions=b/,,c/ owners=*\n", "reloaded")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r'msg=reload_failed what=policy reason="%s: line 2: '
                   r'sessions=: an empty prefix' % re.escape(path))
        assert status_of(b.acquire, "b/2", "o") == OK
        assert status_of(b.acquire, "c/1", "o") == DENIED
        # One that others may write is refused too.
        write_policy("team-b sessions=* owners=*\n", "reloaded")
        os.chmod(path, 0o666)
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r'msg=reload_failed what=policy reason="[^"]*mode 666 '
                   r'lets group or others write it')
        assert status_of(b.acquire, "c/1", "o") == DENIED
        assert status_of(a.acquire, "a/2", "o") == OK
        # Narrowing takes effect for new calls, on leases already held.
        write_policy("team-b sessions=b/ owners=*\n", "reloaded")
        os.chmod(path, 0o644)
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r"msg=reloaded what=policy rules=1")
        assert status_of(a.renew, lease("a/1", "o", 1)) == DENIED


def refused_start(policy_text=None, path=None):
    if path is None:
        path = write_policy(policy_text, "start")
    rc, log = Leased(args=["--policy-file", path]).run_to_exit()
    assert rc != 0, log
    return log


def test_bad_policy_files_refuse_the_start():
    path = os.path.join(_tmp, "start")
    cases = [
        ("", "%s: no rule in the file" % path),
        ("# nothing but comments\n\n", "%s: no rule in the file" % path),
        ("ok sessions=a/\nbad sessions=a/ owner=x\n",
         "%s: line 2: unknown field (want sessions=, owners= or admin=): "
         "owner" % path),
        ("a sessions=a/\n\n\nb admin=all\n",
         "%s: line 4: admin= wants none, read or write" % path),
        ('a sessions=""\n', "%s: line 1: sessions=: an empty prefix" % path),
        ("a sessions=a/\na owners=x\n",
         "%s: line 2: a second rule for the same identity" % path),
        ("#" * (1024 * 1024 + 1), "%s: larger than 1048576 bytes" % path),
    ]
    for text, want in cases:
        log = refused_start(text)
        assert "msg=startup_failed" in log and want in log, (want, log)
    log = refused_start(path=os.path.join(_tmp, "missing"))
    assert "No such file or directory" in log, log
    # An empty --policy-file is the flag's own error.
    rc, log = Leased(args=["--policy-file", ""]).run_to_exit()
    assert rc == 2 and "--policy-file" in log, log


def test_without_a_policy_every_caller_may_do_everything():
    with Leased(ttl="30s", args=["--auth-token-file", token_file(),
                                 "--metrics-listen", "127.0.0.1:0"]) as d:
        a, b = token_client(d, "team-a"), token_client(d, "team-b")
        la = a.acquire("a/1", "host-a")
        b.release(la)  # knowing the owner and token is enough
        assert b.acquire("a/1", "host-b").token == 2
        assert [l.session_id for l in b.list("").leases] == ["a/1"]
        assert not any(k[0] == "leased_permission_denied_total"
                       for k in d.metrics())
        d.wait_log(r'msg=release identity="team-b" session="a/1" '
                   r'owner="host-a" token=1')


def test_refusals_are_audited_at_a_bounded_rate():
    """A flood of refused calls writes at most 20 lines a second, and the
    lines account for every refusal (not_logged)."""
    policy = write_policy("team-a sessions=a/ owners=*\n")
    with Leased(args=["--auth-token-file", token_file(),
                      "--policy-file", policy]) as d:
        b = token_client(d, "team-b")
        wrong = harness.Client(d.channel(), token="tok-wrong-0123456789")
        n = 300
        start = time.monotonic()
        for i in range(n):
            assert status_of(b.acquire, "a/%d" % i, "o") == DENIED
            assert status_of(wrong.acquire, "a/%d" % i, "o") == UNAUTH
        elapsed = time.monotonic() - start
        time.sleep(1.1)  # a new second: the next line says what was held
        assert status_of(b.acquire, "a/last", "o") == DENIED
        assert status_of(wrong.acquire, "a/last", "o") == UNAUTH
        # Each line is written before its call's answer goes out.
        log = d.log_text()
        assert re.search(r'msg=denied [^\n]*session="a/last"', log)
        for msg in ("denied", "unauthenticated"):
            lines = re.findall(r"msg=%s .*not_logged=(\d+)" % msg, log)
            assert len(lines) <= 20 * (elapsed + 2) + 20, (msg, len(lines))
            assert len(lines) < n
            assert len(lines) + sum(int(x) for x in lines) == n + 1, msg


if __name__ == "__main__":
    harness.main(globals())
