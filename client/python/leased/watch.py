"""Watch: the changes of one session's lease, or of every session under a
prefix, as leased tells them (leased.v1.Leases/Watch), with the failover
of liblease's lease_watch (client/lease.h), in Python."""
import threading
import time
from dataclasses import dataclass

import grpc

from . import errors
from ._messages import leases_pb
from .client import _RETRY_PAUSE

GRANTED = "granted"    # a new holder, with a new token
RELEASED = "released"  # its holder let go
EXPIRED = "expired"    # it ran out without a renewal
REVOKED = "revoked"    # an operator ended it
_KINDS = {1: GRANTED, 2: RELEASED, 3: EXPIRED, 4: REVOKED}
_PATH = "/leased.v1.Leases/Watch"


@dataclass(frozen=True)
class Event:
    """A change of a lease: revision rises with every change leased
    stores; kind is GRANTED, RELEASED, EXPIRED or REVOKED; lease is the
    new lease (GRANTED, its expiry as granted) or the one that ended (a
    Lease whose ttl_ns is 0)."""
    revision: int
    kind: str
    lease: object


class Watch:
    """An iterator of the Events after a revision, in revision order,
    each once leased stored it (Client.watch() makes it). revision is the
    last revision the stream covered, changes of other sessions included:
    a later watch from it misses nothing and repeats nothing. A target
    that goes away or drains is watched again at the next (or the same,
    back) from revision, until the deadline. The iteration ends after
    close() (from any thread), and raises GoneError when what followed
    revision is no longer kept (read the leases again, watch from 0),
    UnsupportedError from a server without Watch, DeadlineError at the
    deadline, UnavailableError when no target answered by then."""

    def __init__(self, client, request, deadline):
        self._client = client
        self._request = request
        self._end = deadline if deadline is not None else float("inf")
        self.revision = request.after_revision
        self._lock = threading.Lock()
        self._call = None
        self._closed = False
        self._events = self._run()

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._events)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Ends the watch: the iteration stops (at once, if it waits)."""
        with self._lock:
            self._closed = True
            call = self._call
        if call is not None:
            call.cancel()

    def _run(self):
        c = self._client
        rpc = c._rpc(_PATH, self._request, leases_pb.WatchResponse,
                     stream=True)
        n = len(rpc)
        first = c._current
        why = None
        while not self._closed:
            round_start = time.monotonic()
            for k in range(n):
                t = (first + k) % n
                received = []
                code, details = yield from self._stream(rpc[t], received)
                if self._closed:
                    return
                if code != grpc.StatusCode.UNAVAILABLE:
                    c._current = t
                    if code is None:  # ended by leased with OK
                        return
                    raise errors.from_status(code, details)
                if received:  # it served a while: its reason is news
                    c._current = t
                    why = details
                    round_start = time.monotonic()
                why = why or details
            if time.monotonic() >= self._end:
                raise errors.from_status(grpc.StatusCode.UNAVAILABLE, why)
            pause = (min(round_start + _RETRY_PAUSE, self._end) -
                     time.monotonic())
            if pause > 0:
                time.sleep(pause)

    def _stream(self, rpc, received):
        """Yields the events of one stream of one target, from revision;
        returns its status (None: OK) and details. received gets an item
        per message."""
        timeout = self._end - time.monotonic()
        if timeout <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed"
        self._request.after_revision = self.revision
        with self._lock:
            if self._closed:
                return None, None
            self._call = rpc(self._request,
                             timeout=None if timeout == float("inf")
                             else timeout,
                             metadata=self._client._metadata)
        try:
            for m in self._call:
                received.append(True)
                for e in m.events:
                    ev = self._event(e)
                    self.revision = e.revision
                    yield ev
                if m.compact_revision == 0:
                    self.revision = m.revision
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.OUT_OF_RANGE:
                raise errors.GoneError(e.details(), e.code()) from None
            return e.code(), e.details()
        finally:  # also when the caller leaves the iteration
            with self._lock:
                call, self._call = self._call, None
            call.cancel()
        return None, None

    def _event(self, e):
        w = e.lease
        kind = _KINDS.get(e.kind)
        if kind is None or not w.HasField("expiry"):
            raise errors.UnavailableError("an event leased does not send")
        return Event(e.revision, kind, self._client._lease_of(w))
