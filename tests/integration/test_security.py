"""Security of the real leased: TLS, mutual TLS, bearer tokens, reloads on
SIGHUP, the plaintext rule, unix socket modes.

Certificates are made with openssl for each run (certs.py): a CA, a server
certificate, two clients, and a foreign CA with its own client.
"""
import atexit
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile

import grpc

import certs
import harness
from harness import Leased, expect_code, status_of

_tmp = tempfile.mkdtemp(prefix="leased-certs-")
atexit.register(shutil.rmtree, _tmp, True)
CERTS = certs.make(_tmp)

OK = grpc.StatusCode.OK
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def acquire_status(client, session="s", owner="o"):
    return status_of(client.acquire, session, owner)


def tls_client(d, client=None, ca="ca.pem", token=None):
    """A client over a new TLS channel, with the given client certificate
    (or none), trusting the given CA file."""
    ch = d.channel(creds=harness.tls_creds(CERTS, client, ca))
    return harness.Client(ch, timeout=3.0, token=token)


def mtls_args():
    return ["--tls-client-ca", CERTS.path("ca.pem")]


# --- TLS -------------------------------------------------------------------

def test_tls_serves_the_lease_service():
    with Leased(tls=CERTS) as d:
        assert re.search(r"msg=listening addr=127\.0\.0\.1:\d+ tls=1",
                         d.log_text())
        c = tls_client(d)
        lease = c.acquire("tls-session", "alice")
        assert lease.token == 1 and lease.owner == "alice"
        assert c.renew(lease).token == 1


def test_plaintext_client_to_tls_port_fails():
    with Leased(tls=CERTS) as d:
        c = harness.Client(d.channel(plain=True), timeout=2.0)
        assert acquire_status(c) == UNAVAILABLE
        # The daemon is still serving TLS clients.
        assert acquire_status(tls_client(d)) == OK


def test_garbage_and_http1_on_the_tls_port_keep_it_serving():
    with Leased(tls=CERTS) as d:
        c = tls_client(d)
        lease = c.acquire("g", "alice")
        host, port = d.addr.rsplit(":", 1)
        for junk in [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                     b"\x16\x03\x01\x00\x05hello" + b"\xff" * 512,
                     b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]:
            s = socket.create_connection((host, int(port)), timeout=5)
            try:
                s.sendall(junk)
                try:
                    s.recv(1024)
                except (socket.timeout, ConnectionError):
                    pass
            finally:
                s.close()
        assert c.renew(lease).token == lease.token
        assert acquire_status(tls_client(d), "g2") == OK
        assert d.proc.poll() is None


def test_client_not_trusting_the_server_fails():
    with Leased(tls=CERTS) as d:
        c = tls_client(d, ca="foreign-ca.pem")
        assert acquire_status(c) == UNAVAILABLE


def test_tls_below_1_2_refused():
    with Leased(tls=CERTS) as d:
        def handshake(version):
            """openssl's report of a handshake at exactly that version,
            with its own floor lowered (SECLEVEL=0)."""
            return subprocess.run(
                ["openssl", "s_client", "-connect", d.addr, version,
                 "-cipher", "DEFAULT@SECLEVEL=0", "-CAfile",
                 CERTS.path("ca.pem")],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, timeout=10).stdout
        # The control: the probe does complete handshakes it may.
        out = handshake("-tls1_2")
        assert "Cipher is (NONE)" not in out and \
            "Verify return code: 0 (ok)" in out, out
        for old in ("-tls1_1", "-tls1"):
            out = handshake(old)
            assert "no peer certificate available" in out, out
            assert "Cipher is (NONE)" in out, out


def test_mismatched_key_refused_at_start():
    rc, log = Leased(args=["--tls-cert", CERTS.path("server.pem"),
                           "--tls-key", CERTS.path("client1.key")]).run_to_exit()
    assert rc == 1
    assert "does not match the certificate" in log


def test_tls_flags_must_come_together():
    for args in (["--tls-cert", CERTS.path("server.pem")],
                 ["--tls-client-ca", CERTS.path("ca.pem")]):
        p = subprocess.run([harness.leased_bin()] + args,
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, (args, p.returncode)
        assert "--tls-" in p.stderr


# --- mutual TLS -------------------------------------------------------------

def test_mtls_requires_a_client_certificate():
    with Leased(tls=CERTS, args=mtls_args()) as d:
        assert acquire_status(tls_client(d, client=None)) == UNAVAILABLE
        assert "identity=" not in d.log_text()


def test_mtls_refuses_a_foreign_ca_client():
    with Leased(tls=CERTS, args=mtls_args()) as d:
        assert acquire_status(tls_client(d, client="foreign")) == UNAVAILABLE
        assert "foreign.test" not in d.log_text()


def test_mtls_accepts_a_valid_client_and_logs_its_identity():
    with Leased(tls=CERTS, args=mtls_args()) as d:
        c1 = tls_client(d, client="client1")
        lease = c1.acquire("mtls", "alice")
        c1.renew(lease)
        c1.renew(lease)
        d.wait_log(r'msg=connection peer=ipv4:127\.0\.0\.1:\d+ '
                   r'identity="client-one\.test"')
        # Once per connection, not per call (the audit line of the
        # takeover names it too).
        assert len(re.findall(r'msg=connection [^\n]*'
                              r'identity="client-one\.test"',
                              d.log_text())) == 1
        # A certificate without SANs is known by its common name.
        assert acquire_status(tls_client(d, client="client2"), "m2") == OK
        d.wait_log(r'identity="client-two"')


# --- reloading certificates -------------------------------------------------

def copy_server_cert(tmp, name="server"):
    """Copies a server certificate and key into tmp (as cert.pem and
    key.pem, the names leased is given); returns their paths."""
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    shutil.copy(CERTS.path(name + ".pem"), cert)
    shutil.copy(CERTS.path(name + ".key"), key)
    return cert, key


def test_sighup_rotates_the_server_certificate_without_dropping():
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = copy_server_cert(tmp)
        with Leased(args=["--tls-cert", cert, "--tls-key", key]) as d:
            old = tls_client(d)
            lease = old.acquire("rotate", "alice")
            copy_server_cert(tmp, "server2")
            d.proc.send_signal(signal.SIGHUP)
            d.wait_log(r"msg=reloaded what=tls")
            # New connections get the new certificate...
            assert acquire_status(tls_client(d, ca="foreign-ca.pem"),
                                  "r2") == OK
            assert acquire_status(tls_client(d), "r3") == UNAVAILABLE
            # ...and the connection made before keeps working.
            assert old.renew(lease).token == lease.token
            assert d.proc.poll() is None


def test_sighup_with_a_broken_certificate_keeps_the_old_one():
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = copy_server_cert(tmp)
        with Leased(args=["--tls-cert", cert, "--tls-key", key]) as d:
            with open(cert, "w") as f:
                f.write("-----BEGIN CERTIFICATE-----\nnonsense\n")
            d.proc.send_signal(signal.SIGHUP)
            d.wait_log(r'msg=reload_failed what=tls reason="[^"]*cert\.pem')
            assert acquire_status(tls_client(d), "still") == OK


# --- the plaintext rule ----------------------------------------------------

def test_non_loopback_plaintext_refused():
    # Refused before anything is bound.
    p = subprocess.run([harness.leased_bin(), "--listen", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2
    assert "--tls-cert" in p.stderr and "--insecure" in p.stderr


# --- bearer tokens ---------------------------------------------------------

def test_bearer_token_missing_wrong_right():
    with Leased(token="s3cret-token") as d:
        ch = d.channel()
        assert acquire_status(harness.Client(ch), "t") == UNAUTH
        assert acquire_status(harness.Client(ch, token="wrong"), "t") == UNAUTH
        assert acquire_status(harness.Client(ch, token="s3cret-toke"),
                              "t") == UNAUTH
        assert acquire_status(harness.Client(ch, token="s3cret-token2"),
                              "t") == UNAUTH
        # The unauthenticated calls changed nothing: a first takeover
        # still gets token 1.
        lease = harness.Client(ch, token="s3cret-token").acquire("t", "bob")
        assert lease.token == 1 and lease.owner == "bob"


def test_bearer_scheme_is_case_insensitive_and_needs_a_space():
    with Leased(token="tok") as d:
        call = d.channel().unary_unary(harness.SERVICE + "Acquire")
        body = harness.pb.AcquireRequest(session_id="x",
                                         owner="o").SerializeToString()

        def code(value):
            try:
                call(body, timeout=3, metadata=(("authorization", value),))
                return OK
            except grpc.RpcError as e:
                return e.code()
        assert code("bearer tok") == OK
        assert code("BEARER  tok") == OK
        assert code("Bearertok") == UNAUTH
        assert code("Basic tok") == UNAUTH
        assert code("tok") == UNAUTH


def test_unauthenticated_before_unimplemented_and_bad_input():
    with Leased(token="tok") as d:
        anon = harness.Client(d.channel())
        expect_code(UNAUTH, anon.raw, "/some.Other/Method", b"")
        expect_code(UNAUTH, anon.raw, "Acquire", b"\xff\xff")
        authed = harness.Client(d.channel(), token="tok")
        expect_code(grpc.StatusCode.UNIMPLEMENTED, authed.raw,
                    "/some.Other/Method", b"")
        expect_code(grpc.StatusCode.INVALID_ARGUMENT, authed.raw, "Acquire",
                    b"\xff\xff")


def test_token_file_reload_on_sighup():
    with Leased(token="old-token") as d:
        ch = d.channel()
        old, new = (harness.Client(ch, token="old-token"),
                    harness.Client(ch, token="new-token"))
        lease = old.acquire("reload", "alice")
        harness.write_private(d.token_file, "new-token\n# comment\n")
        pid = d.proc.pid
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r"msg=reloaded what=tokens count=1")
        assert status_of(old.renew, lease) == UNAUTH
        assert new.renew(lease).token == lease.token
        assert d.proc.pid == pid and d.proc.poll() is None


def test_broken_token_file_on_reload_keeps_the_old_tokens():
    with Leased(token="kept") as d:
        c = harness.Client(d.channel(), token="kept")
        assert acquire_status(c, "k1") == OK
        os.chmod(d.token_file, 0o644)
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r'msg=reload_failed what=tokens reason="[^"]*mode 644')
        assert acquire_status(c, "k2") == OK
        harness.write_private(d.token_file, "bad token with spaces\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r'reason="[^"]*line 1: want TOKEN, or NAME and TOKEN')
        assert acquire_status(c, "k3") == OK


def test_named_tokens_and_tokens_alone_in_one_file():
    """`NAME TOKEN` lines and the older token-only lines work side by side;
    a name given twice refuses the start, naming the line and not the
    token."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tokens")
        harness.write_private(path, "# teams\nbilling\ttok-billing-1\n"
                                    "ops@example.org tok-ops-1\nlegacy-tok\n")
        with Leased(args=["--auth-token-file", path]) as d:
            ch = d.channel()
            for tok in ("tok-billing-1", "tok-ops-1", "legacy-tok"):
                assert acquire_status(harness.Client(ch, token=tok),
                                      "n-" + tok) == OK, tok
            for tok in ("billing", "ops@example.org", "tok-billing-1 x"):
                assert acquire_status(harness.Client(ch, token=tok),
                                      "n-x") == UNAUTH, tok
        harness.write_private(path, "billing tok-a-123456\n"
                                    "billing tok-b-123456\n")
        rc, log = Leased(args=["--auth-token-file", path]).run_to_exit()
        assert rc == 1, log
        assert "line 2: the same name as an earlier line" in log, log
        assert "tok-a-123456" not in log and "tok-b-123456" not in log


def test_group_or_world_readable_token_file_refused():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tokens")
        for mode in (0o644, 0o640, 0o604):
            harness.write_private(path, "tok\n", mode)
            rc, log = Leased(args=["--auth-token-file", path]).run_to_exit()
            assert rc == 1, oct(mode)
            assert "chmod 600" in log


def test_tokens_are_never_logged():
    secret = "never-log-me-123"
    with Leased(token=secret, args=["--log-level", "debug"]) as d:
        c = harness.Client(d.channel(), token=secret)
        lease = c.acquire("nolog", "alice")
        c.renew(lease)
        acquire_status(harness.Client(d.channel(), token=secret + "x"))
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log(r"msg=reloaded what=tokens")
        d.stop()
        text = d.log_text()
        assert "msg=unauthenticated" in text  # debug logging was on
        assert "never-log-me" not in text


def test_token_and_tls_together():
    with Leased(tls=CERTS, token="both") as d:
        assert acquire_status(tls_client(d, token="both"), "b") == OK
        assert acquire_status(tls_client(d, token="nope"), "b") == UNAUTH


# --- unix sockets ----------------------------------------------------------

def test_unix_socket_mode_is_configurable():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        path = os.path.join(tmp, "leased.sock")
        with Leased(listen="unix:" + path, args=["--socket-mode", "600"]):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        path2 = os.path.join(tmp, "default.sock")
        with Leased(listen="unix:" + path2) as d:
            assert stat.S_IMODE(os.stat(path2).st_mode) == 0o660
            c = harness.Client(d.channel())
            assert acquire_status(c, "u") == OK


def test_unix_socket_in_a_directory_others_can_write_refused():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)  # no sticky bit: anyone could swap the socket
        rc, log = Leased(listen="unix:" + os.path.join(tmp, "s.sock")) \
            .run_to_exit()
        assert rc == 1
        assert "writable by group or others" in log


def test_bad_socket_mode_refused():
    for mode in ("999", "0400", "abc", "1777"):
        p = subprocess.run([harness.leased_bin(), "--socket-mode", mode],
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, mode
        assert "--socket-mode" in p.stderr


harness.main(globals())
