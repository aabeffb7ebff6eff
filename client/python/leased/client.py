"""Client: the calls of leased (Mecatl's SessionLeaseService, and Get from
leased's admin API) over gRPC, with failover between the replicas of the
shared mode, TLS, mutual TLS and a bearer token. It does what liblease's
gRPC driver does (client/lease.h, lease_grpc_open), in Python."""
import getpass
import ipaddress
import os
import re
import socket
import time
from dataclasses import dataclass

import grpc

from . import errors
from ._messages import admin_pb, lease_pb, leases_pb

SESSION_MAX = 512  # bytes of UTF-8
OWNER_MAX = 256
TARGETS_MAX = 8
TTL_HEADER = "leased-ttl-ms"
_SERVICE = "/mecatl.driver.v1.SessionLeaseService/"
_ADMIN = "/leased.admin.v1.Admin/"
_LEASES = "/leased.v1.Leases/"
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]{1,4096}")
_TTL_VALUE = re.compile(r"[0-9]{1,12}")
_RETRY_PAUSE = 0.1  # the least a round of retries takes
_WAIT_SLICE = 0.25  # waiting for one target to connect, once all failed
_WAIT_POLL = 0.25  # wait() where the server has no Wait: acquire this often


@dataclass(frozen=True)
class Lease:
    """A lease as granted: token rises on every change of owner; expiry_ns
    is the service's wall clock (ns since the epoch); ttl_ns the lifetime
    the service said it gave the grant, counted from when it decided it
    (0: it did not say). A plain value: keep it, pass it to renew and
    release."""
    session_id: str
    owner: str
    token: int
    expiry_ns: int
    ttl_ns: int = 0


@dataclass(frozen=True)
class LeaseInfo:
    """What Client.get() reads: the session's last lease, and whether it
    is live (held and not expired) now."""
    session_id: str
    owner: str
    token: int
    expiry_ns: int
    live: bool


def default_owner():
    """user@host/pid-nonce, as leasectl names a holder: unique per
    process and call."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "uid%d" % os.geteuid()
    return "%s@%s/%d-%s" % (user, socket.gethostname() or "localhost",
                            os.getpid(), os.urandom(4).hex())


def _check(what, value, limit):
    if not isinstance(value, str):
        raise errors.InvalidError("%s: not a str" % what)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise errors.InvalidError("%s: not valid UTF-8" % what) from None
    if size == 0:
        raise errors.InvalidError("%s: empty" % what)
    if size > limit:
        raise errors.InvalidError(
            "%s: longer than the limit of %d bytes" % (what, limit))
    if "\0" in value:
        raise errors.InvalidError("%s: contains a NUL byte" % what)


def _plaintext_ok(target):
    """Whether target (HOST:PORT or unix:/PATH) may be reached without
    TLS: loopback and unix sockets only. InvalidError if malformed."""
    if target.startswith("unix:"):
        if len(target) == 5:
            raise errors.InvalidError("target %s: no socket path" % target)
        return True
    host, colon, port = target.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise errors.InvalidError(
            "target %s: want HOST:PORT or unix:/PATH" % target)
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise errors.InvalidError("target %s: bad IPv6 address" % target)
        host = host[1:-1]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise errors.InvalidError("%s %s: %s" % (what, path, e.strerror))


class _Target:
    """One address and its channel, with the channel's last known state
    (gRPC's Python API tells it through a subscription only)."""

    def __init__(self, address, credentials, options):
        self.address = address
        if credentials is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            self.channel = grpc.secure_channel(address, credentials,
                                               options=options)
        self.ready = False
        self.channel.subscribe(self._state, try_to_connect=False)

    def _state(self, state):
        self.ready = state == grpc.ChannelConnectivity.READY

    def close(self):
        self.channel.unsubscribe(self._state)
        self.channel.close()


class Client:
    """A client of leased. targets: "HOST:PORT", "unix:/PATH", or several
    (a list, or separated by commas) tried in turn: a call that finds one
    unavailable (not reachable, draining), or not connected and silent
    for its share of the timeout, goes to the next, and the client stays
    with the one that answered. Plaintext only to loopback or a unix
    socket; otherwise give ca (a PEM file of the CAs that signed the
    server's certificate), and cert and key for mutual TLS. server_name:
    the name to check the server's certificate against, when not the
    target's host. token: a bearer token sent with every call. timeout:
    seconds each call may take. Safe to use from many threads; close()
    when done (or use it as a context manager)."""

    def __init__(self, targets, ca=None, cert=None, key=None,
                 server_name=None, token=None, timeout=5.0):
        if isinstance(targets, str):
            targets = targets.split(",")
        targets = list(targets)
        if not 1 <= len(targets) <= TARGETS_MAX:
            raise errors.InvalidError(
                "targets: 1 to %d addresses" % TARGETS_MAX)
        if (cert is None) != (key is None) or (cert and ca is None):
            raise errors.InvalidError(
                "cert and key: both or neither, and only with ca")
        if token is not None and not _TOKEN.fullmatch(token):
            raise errors.InvalidError(
                "token: 1..4096 characters of A-Z a-z 0-9 -._~+/=")
        if not timeout > 0:
            raise errors.InvalidError("timeout: must be positive")
        for t in targets:
            if not _plaintext_ok(t) and ca is None:
                raise errors.InvalidError(
                    "target %s: not a loopback address: plaintext is "
                    "allowed only on loopback or a unix socket (give ca "
                    "for TLS)" % t)
        credentials = None
        if ca is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(ca, "ca"),
                private_key=_read(key, "key") if key else None,
                certificate_chain=_read(cert, "cert") if cert else None)
        # Reconnect soon after a server comes back (gRPC would otherwise
        # back off for up to two minutes, and a holder's renewals fail
        # meanwhile), and give up a connection attempt after a call's
        # time rather than gRPC's 20 s.
        options = [("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000),
                   ("grpc.dns_min_time_between_resolutions_ms", 1000),
                   ("grpc.min_reconnect_backoff_ms",
                    max(1000, int(timeout * 1000)))]
        if server_name is not None:
            options.append(("grpc.ssl_target_name_override", server_name))
        self.timeout = timeout
        self._metadata = (("authorization", "Bearer " + token),) \
            if token is not None else None
        self._targets = [_Target(t, credentials, options) for t in targets]
        self._current = 0  # the target that answered last
        self._rpcs = {}  # path -> a callable per target

    def close(self):
        for t in self._targets:
            t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def acquire(self, session_id, owner):
        """Takes session_id for owner and returns the Lease: a takeover
        gets a token greater than any the session had; the same owner
        re-acquiring a live lease keeps its token, with a later expiry.
        HeldError: another owner holds it."""
        _check("session_id", session_id, SESSION_MAX)
        _check("owner", owner, OWNER_MAX)
        reply, ttl_ns = self._call(
            "Acquire", lease_pb.AcquireRequest(session_id=session_id,
                                               owner=owner),
            lease_pb.LeaseResponse, None)
        return self._lease(reply, ttl_ns)

    def wait(self, session_id, owner, deadline=None):
        """As acquire, but while another owner holds the lease, waits for
        it until deadline (time.monotonic() seconds; None: no end), then
        HeldError. Against leased the call waits in the session's line
        (leased.v1.Leases/Wait: first come first served, granted the
        moment the lease ends); against a server without it, acquire is
        tried every 250 ms. A wait that ends at the deadline is settled
        by one more acquire (a grant made as the call ended is never left
        unknown). As liblease's lease_wait."""
        _check("session_id", session_id, SESSION_MAX)
        _check("owner", owner, OWNER_MAX)
        request = lease_pb.AcquireRequest(session_id=session_id, owner=owner)
        try:
            reply, ttl_ns = self._call_long("Wait", request, deadline)
            return self._lease(reply, ttl_ns)
        except errors.UnsupportedError:
            pass
        except (errors.DeadlineError, errors.UnavailableError):
            # Neither comes before the deadline (gRPC's timer may fire a
            # moment early): settled by one acquire.
            if deadline is None:
                raise
            return self.acquire(session_id, owner)
        while True:
            try:
                return self.acquire(session_id, owner)
            except errors.HeldError:
                left = (deadline - time.monotonic() if deadline is not None
                        else _WAIT_POLL)
                if left <= 0:
                    raise
                time.sleep(min(left, _WAIT_POLL))

    def renew(self, lease, deadline=None):
        """Extends lease (same owner and token): the same token, a later
        expiry; this also reclaims an expired lease nobody took over.
        HeldError: ownership is lost. deadline (time.monotonic()
        seconds): give up then, with DeadlineError, if it comes before
        the client's timeout."""
        reply, ttl_ns = self._call(
            "Renew", lease_pb.RenewRequest(lease=self._wire(lease)),
            lease_pb.LeaseResponse, deadline)
        return self._lease(reply, ttl_ns)

    def release(self, lease):
        """Frees lease if owner and token still match; otherwise does
        nothing and still succeeds (release is idempotent)."""
        self._call("Release", lease_pb.ReleaseRequest(lease=self._wire(lease)),
                   lease_pb.ReleaseResponse, None)

    def get(self, session_id):
        """The session's last lease as a LeaseInfo, or None for a session
        never seen (leased's admin API: the caller needs its permission
        when leased has a policy)."""
        _check("session_id", session_id, SESSION_MAX)
        try:
            reply, _ = self._call("Get", admin_pb.GetRequest(
                session_id=session_id), admin_pb.GetResponse, None,
                path=_ADMIN)
        except errors.UnavailableError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        if not reply.HasField("lease"):
            return None
        w = reply.lease
        return LeaseInfo(w.session_id, w.owner, w.token,
                         w.expiry.seconds * 10**9 + w.expiry.nanos, w.live)

    def watch(self, session_id=None, prefix=None, after=0, deadline=None):
        """The changes of session_id's lease, or of the lease of every
        session whose id starts with prefix ("": every session; give one
        of the two), after revision after (0: from now on), as a Watch
        (watch.py): iterate it for Events, close() it when done (or use
        it in a with). deadline: time.monotonic() seconds, None: no end.
        As liblease's lease_watch."""
        if (session_id is None) == (prefix is None):
            raise errors.InvalidError("watch: session_id or prefix, one")
        if session_id is not None:
            _check("session_id", session_id, SESSION_MAX)
        elif prefix != "":
            _check("prefix", prefix, SESSION_MAX)
        if not isinstance(after, int) or not 0 <= after < 2**64:
            raise errors.InvalidError("after: a revision, 0 or more")
        from .watch import Watch
        return Watch(self, leases_pb.WatchRequest(
            session_id=session_id or "", prefix=prefix or "",
            after_revision=after), deadline)

    def keep(self, session_id, owner=None, **options):
        """Acquires session_id and keeps it: a Keeper (keeper.py)."""
        from .keeper import Keeper
        return Keeper(self, session_id, owner or default_owner(), **options)

    def hold(self, session_id, owner=None, cancel=None, **options):
        """A context manager that holds session_id while its block runs
        (keeper.py, Hold)."""
        from .keeper import Hold
        return Hold(self, session_id, owner or default_owner(), cancel,
                    options)

    @staticmethod
    def _wire(lease):
        _check("session_id", lease.session_id, SESSION_MAX)
        _check("owner", lease.owner, OWNER_MAX)
        w = lease_pb.Lease(session_id=lease.session_id, owner=lease.owner,
                           token=lease.token)
        w.expiry.seconds, w.expiry.nanos = divmod(lease.expiry_ns, 10**9)
        return w

    @staticmethod
    def _lease(reply, ttl_ns):
        if not reply.HasField("lease") or not reply.lease.HasField("expiry"):
            raise errors.UnavailableError("reply without a lease")
        return Client._lease_of(reply.lease, ttl_ns)

    @staticmethod
    def _lease_of(w, ttl_ns=0):
        """The Lease of a wire lease (either service's: the same fields)."""
        return Lease(w.session_id, w.owner, w.token,
                     w.expiry.seconds * 10**9 + w.expiry.nanos, ttl_ns)

    def _call(self, method, request, reply, deadline, path=_SERVICE):
        """One call with failover (as liblease's conn_call): first every
        target in turn, failing fast; then, while all are unavailable,
        rounds that wait a while for each to connect, until the deadline.
        Returns the reply and the TTL leased said (ns; 0 if none)."""
        end = time.monotonic() + self.timeout
        if deadline is not None and deadline < end:
            end = deadline
        rpc = self._rpc(path + method, request, reply)
        n = len(self._targets)
        first = self._current
        why = None
        for k in range(n):
            t = (first + k) % n
            share = n > 1 and not self._targets[t].ready
            slice_ = self.timeout / (n if share else 1)
            code, result = self._try(rpc[t], request, end, slice_, False)
            if code is None or (code != grpc.StatusCode.UNAVAILABLE and not (
                    share and code == grpc.StatusCode.DEADLINE_EXCEEDED)):
                return self._settle(t, code, result)
            why = why or result
        round_start = time.monotonic()
        while round_start < end:
            for k in range(n):
                if time.monotonic() >= end:
                    break
                t = (first + k) % n
                code, result = self._try(rpc[t], request, end, _WAIT_SLICE,
                                         True)
                if code not in (grpc.StatusCode.UNAVAILABLE,
                                grpc.StatusCode.DEADLINE_EXCEEDED):
                    return self._settle(t, code, result)
            pause = min(round_start + _RETRY_PAUSE, end) - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            round_start = time.monotonic()
        raise errors.from_status(grpc.StatusCode.UNAVAILABLE, why)

    def _rpc(self, path, request, reply, stream=False):
        """The callable of path on each target (made once): unary, or
        with stream server-streaming."""
        rpc = self._rpcs.get(path)
        if rpc is None:
            rpc = [(t.channel.unary_stream if stream else
                    t.channel.unary_unary)(
                path, request_serializer=type(request).SerializeToString,
                response_deserializer=reply.FromString)
                for t in self._targets]
            self._rpcs[path] = rpc
        return rpc

    def _call_long(self, method, request, deadline):
        """A call of leased's own service that may last until deadline
        (None: no end), past the timeout: a target that answers
        UNAVAILABLE hands over to the next; when all did, rounds at most
        ten a second until the deadline (as liblease's conn_call_long).
        Wait's messages are Acquire's, field for field."""
        rpc = self._rpc(_LEASES + method, request, lease_pb.LeaseResponse)
        end = deadline if deadline is not None else float("inf")
        n = len(self._targets)
        first = self._current
        why = None
        while True:
            round_start = time.monotonic()
            for k in range(n):
                t = (first + k) % n
                code, result = self._try(rpc[t], request, end, end, False)
                if code != grpc.StatusCode.UNAVAILABLE:
                    return self._settle(t, code, result)
                why = why or result
            if time.monotonic() >= end:
                raise errors.from_status(grpc.StatusCode.UNAVAILABLE, why)
            pause = min(round_start + _RETRY_PAUSE, end) - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    def _try(self, rpc, request, end, slice_, wait_for_ready):
        """(None, (reply, ttl_ns)) or (status code, details)."""
        timeout = min(slice_, end - time.monotonic())
        if timeout <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed"
        if timeout == float("inf"):  # a wait with no end
            timeout = None
        try:
            response, call = rpc.with_call(request, timeout=timeout,
                                           metadata=self._metadata,
                                           wait_for_ready=wait_for_ready)
        except grpc.RpcError as e:
            return e.code(), e.details()
        ttl_ns = 0
        for key, value in call.initial_metadata() or ():
            if key == TTL_HEADER and _TTL_VALUE.fullmatch(value) and \
                    int(value) > 0:
                ttl_ns = int(value) * 10**6
        return None, (response, ttl_ns)

    def _settle(self, t, code, result):
        self._current = t
        if code is not None:
            raise errors.from_status(code, result)
        return result
