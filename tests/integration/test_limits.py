"""gRPC limits of the real leased: what its HTTP/2 settings announce, idle
and aged connections closed, too many pings, oversized headers, idle
connections by the thousand.

A few cases speak raw HTTP/2 over a socket (frame = 9-byte header +
payload) to see exactly what leased sends.
"""
import socket
import struct
import time

import grpc

import harness
from harness import Leased, status_of

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_SIZE = 0x3, 0x6
ENHANCE_YOUR_CALM = 0xb


def frame(ftype, payload=b"", flags=0, stream=0):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


class RawH2:
    """A bare HTTP/2 client connection: sends the preface and an empty
    SETTINGS, then reads frames."""

    def __init__(self, addr):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.buf = b""
        self.sock.sendall(PREFACE + frame(SETTINGS))

    def send(self, data):
        self.sock.sendall(data)

    def next_frame(self, timeout):
        """(type, flags, payload), or None once the server closed."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 9:
                n = struct.unpack(">I", b"\0" + self.buf[:3])[0]
                if len(self.buf) >= 9 + n:
                    f = (self.buf[3], self.buf[4], self.buf[9:9 + n])
                    self.buf = self.buf[9 + n:]
                    return f
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data

    def wait_for(self, ftype, timeout):
        """The first frame of ftype within timeout (AssertionError if the
        connection closes or time runs out first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            f = self.next_frame(max(0.05, deadline - time.monotonic()))
            if f is None:
                raise AssertionError("closed before a frame of type %d" % ftype)
            if f[0] == ftype:
                return f
        raise AssertionError("no frame of type %d in %ss" % (ftype, timeout))

    def close(self):
        self.sock.close()


def server_settings(addr):
    h = RawH2(addr)
    try:
        _, flags, payload = h.wait_for(SETTINGS, 5)
        assert not flags & 1, "the first SETTINGS must not be an ACK"
        return {struct.unpack(">H", payload[i:i + 2])[0]:
                struct.unpack(">I", payload[i + 2:i + 6])[0]
                for i in range(0, len(payload), 6)}
    finally:
        h.close()


def test_settings_announce_the_limits():
    with Leased() as d:
        s = server_settings(d.addr)
        assert s.get(MAX_CONCURRENT_STREAMS) == 1024, s
        assert s.get(MAX_HEADER_LIST_SIZE) == 16384, s
    with Leased(args=["--max-streams", "7", "--max-metadata-size",
                      "4096"]) as d:
        s = server_settings(d.addr)
        assert s.get(MAX_CONCURRENT_STREAMS) == 7, s
        assert s.get(MAX_HEADER_LIST_SIZE) == 4096, s


def test_idle_connection_is_closed():
    with Leased(args=["--max-connection-idle", "1s"]) as d:
        h = RawH2(d.addr)
        start = time.monotonic()
        h.wait_for(GOAWAY, 10)
        assert time.monotonic() - start > 0.5
        h.close()
        # A client that comes back simply connects again.
        assert d.client().acquire("after-idle", "alice").token == 1


def test_old_connection_is_closed():
    with Leased(args=["--max-connection-age", "1s"]) as d:
        c = d.client()
        lease = c.acquire("aged", "alice")
        h = RawH2(d.addr)
        h.wait_for(GOAWAY, 10)
        h.close()
        assert c.renew(lease).token == lease.token


def test_too_many_pings_get_goaway():
    with Leased(args=["--keepalive-min-time", "10s",
                      "--max-ping-strikes", "1"]) as d:
        h = RawH2(d.addr)
        h.wait_for(SETTINGS, 5)
        for i in range(4):
            h.send(frame(PING, struct.pack(">Q", i)))
        _, _, payload = h.wait_for(GOAWAY, 10)
        assert struct.unpack(">I", payload[4:8])[0] == ENHANCE_YOUR_CALM
        h.close()
        assert d.client().acquire("calm", "alice").token == 1


def test_handshake_timeout_closes_silent_connections():
    with Leased(args=["--handshake-timeout", "1s"]) as d:
        host, port = d.addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=10)
        start = time.monotonic()
        try:
            while s.recv(1024):  # leased may greet first; then it closes
                pass
        except ConnectionResetError:
            pass
        took = time.monotonic() - start
        s.close()
        assert 0.5 < took < 8, took


def test_oversized_metadata_refused_and_serving_continues():
    with Leased(args=["--max-metadata-size", "4096"]) as d:
        # Its own connection: leased may close the one that sent too much.
        big = harness.Client(d.channel(options=[("leased.test.big", 1)]))
        big.metadata = (("x-padding", "p" * 8000),)
        code = status_of(big.acquire, "meta", "alice")
        assert code not in (grpc.StatusCode.OK,
                            grpc.StatusCode.DEADLINE_EXCEEDED), code
        # Nothing was stored, and other connections are served.
        assert d.client().acquire("meta", "bob").token == 1
        small = harness.Client(d.channel())
        small.metadata = (("x-padding", "p" * 1000),)
        assert small.acquire("meta2", "carol").token == 1


def test_a_thousand_idle_connections_do_not_stop_a_client():
    with Leased() as d:
        host, port = d.addr.rsplit(":", 1)
        idle = []
        try:
            for i in range(1000):
                s = socket.create_connection((host, int(port)), timeout=5)
                if i % 2:  # half get as far as HTTP/2, then idle
                    s.sendall(PREFACE + frame(SETTINGS))
                idle.append(s)
            # The client comes once leased has answered every idle
            # connection that spoke HTTP/2 (its SETTINGS): what is timed
            # below is a call among them, not how fast a slow build
            # accepts a thousand connections.
            for s in idle[1::2]:
                s.settimeout(60)
                assert s.recv(1), "closed before its SETTINGS"
            c = harness.Client(d.channel(), timeout=5)
            start = time.monotonic()
            lease = c.acquire("busy", "alice")
            assert c.renew(lease).token == 1
            assert time.monotonic() - start < 5
        finally:
            for s in idle:
                s.close()
        assert d.proc.poll() is None


def test_fd_limit_raised_to_the_hard_limit():
    with Leased() as d:
        m = d.wait_log(r"msg=fd_limit nofile=(\d+)")
        with open("/proc/%d/limits" % d.proc.pid) as f:
            line = [x for x in f if x.startswith("Max open files")][0]
        soft, hard = line.split()[3:5]
        assert soft == hard == m.group(1), line


harness.main(globals())
