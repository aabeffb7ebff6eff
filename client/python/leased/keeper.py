"""Keeper and Hold: one lease kept for as long as its holder works on the
session, under the deadline rule of liblease's keeper (client/lease.h).

The lease is trusted until its local deadline: the send time of the last
successful renewal (or of the acquire) plus the TTL the service said,
less a margin, on time.monotonic(). The service decided the grant after
that send time, so on its own clock the lease lasts longer, whatever the
two hosts' wall clocks say. Two threads per keeper: the renewer renews at
about a third of the TTL, each call cut short at the deadline (or a
third of the TTL, if sooner), and retries failures every tenth of the
TTL (at most every second); the watchdog sleeps until the deadline and,
if no renewal moved it by then, declares the lease lost there, even
while a renewal call is blocked. Both share one condition variable; the
state below it only changes under it, and lost and stopping only ever
turn true.
"""
import ctypes
import random
import threading
import time

from . import errors

_RETRY_MAX = 1.0  # seconds between failed renewals, at most


def margin_min(ttl):
    """The least margin (seconds) for a TTL: 1 % for the rates of two
    hosts' clocks, and 20 ms for a holder that wakes a little late."""
    return ttl / 100 + 0.020


class Keeper:
    """Acquires session_id for owner through client and keeps it.
    Raises what acquire raises (HeldError: another owner has it), with no
    keeper. ttl: a TTL (seconds) to trust when shorter than the service's
    (longer: InvalidError); with a service that does not say its TTL, the
    TTL trusted (None: estimated from the expiry and this host's clock,
    which assumes the clocks agree). margin: taken off the deadline, the
    longest a piece of work runs after valid() said True (default a tenth
    of the TTL, never less than margin_min()). on_lost(lease, error): the
    lease is lost (HeldError from a renewal, or the deadline came with no
    renewal: the last failure); called once, on a keeper thread, no later
    than the deadline; the keeper will not release it. on_trouble(lease,
    error): a renewal failed, the lease is still trusted; the keeper
    retries."""

    def __init__(self, client, session_id, owner, ttl=None, margin=None,
                 on_lost=None, on_trouble=None):
        self._client = client
        self._on_lost = on_lost
        self._on_trouble = on_trouble
        self._margin_opt = margin
        self._cond = threading.Condition()
        self._lost = False
        self._stopping = False
        self._last_error = errors.UnavailableError("no renewal yet")
        self._ttl_cap = ttl
        sent = time.monotonic()
        lease = client.acquire(session_id, owner)
        try:
            self._ttl_unsaid = self._unsaid_ttl(lease)
            trusted = self._trusted_ttl(lease)
            if margin is not None and margin >= trusted:
                raise errors.InvalidError(
                    "margin %gs is not less than the TTL %gs" %
                    (margin, trusted))
        except errors.LeaseError:
            client.release(lease)
            raise
        with self._cond:
            self._grant(sent, lease)
        self._threads = [threading.Thread(target=f, daemon=True, name=n)
                         for f, n in ((self._renewer, "lease-renewer"),
                                      (self._watchdog, "lease-watchdog"))]
        for t in self._threads:
            t.start()

    def _unsaid_ttl(self, lease):
        """The TTL to trust when the service does not say one (0 when it
        does); InvalidError for a ttl option longer than the service's."""
        ttl = self._ttl_cap
        if lease.ttl_ns > 0:
            if ttl is not None and ttl * 1e9 > lease.ttl_ns:
                raise errors.InvalidError(
                    "ttl %gs is longer than the service's %gs" %
                    (ttl, lease.ttl_ns / 1e9))
            return 0
        if ttl is not None:
            return ttl
        unsaid = (lease.expiry_ns - time.time_ns()) / 1e9
        if unsaid <= 0:
            raise errors.InvalidError(
                "the service does not say its TTL, and the lease came back "
                "expired: are the clocks apart? give ttl")
        return unsaid

    def _trusted_ttl(self, lease):
        if lease.ttl_ns <= 0:
            return self._ttl_unsaid
        said = lease.ttl_ns / 1e9
        cap = self._ttl_cap
        return cap if cap is not None and cap < said else said

    def _grant(self, sent, lease):
        """Takes the grant of a call sent at sent (under the condition):
        its deadline, and the next renewal a third of the TTL after sent,
        less up to a tenth of it at random."""
        self._lease = lease
        self._ttl = self._trusted_ttl(lease)
        margin = max(self._margin_opt or self._ttl / 10,
                     margin_min(self._ttl))
        self._deadline = sent + self._ttl - margin
        self._next_renew = sent + self._ttl / 3 - \
            random.uniform(0, self._ttl / 10)
        self._cond.notify_all()

    def _lose(self, error):
        """Marks the lease lost, once (under the condition, released
        around the callback)."""
        if self._lost:
            return
        self._lost = True
        self._cond.notify_all()
        self._unlocked(self._on_lost, self._lease, error)

    def _unlocked(self, callback, lease, error):
        """Calls callback(lease, error), if any, with the condition
        released (held by the caller, and again on return)."""
        if callback is None:
            return
        self._cond.release()
        try:
            callback(lease, error)
        finally:
            self._cond.acquire()

    def _watchdog(self):
        with self._cond:
            while not self._stopping and not self._lost:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    self._lose(self._last_error)
                else:
                    self._cond.wait(left)

    def _renewer(self):
        with self._cond:
            while not self._stopping and not self._lost:
                now = time.monotonic()
                if now >= self._next_renew:
                    self._renew_once(now)
                else:
                    self._cond.wait(min(self._next_renew,
                                        self._deadline) - now)

    def _renew_once(self, sent):
        """One renewal sent at sent (under the condition, released around
        the call)."""
        cur = self._lease
        until = sent + min(self._deadline - sent, self._ttl / 3)
        self._cond.release()
        try:
            lease, error = self._client.renew(cur, deadline=until), None
        except errors.LeaseError as e:
            lease, error = None, e
        finally:
            self._cond.acquire()
        if self._lost or self._stopping:
            return
        if error is None:
            self._grant(sent, lease)
        elif isinstance(error, errors.HeldError):
            self._lose(error)
        else:
            self._last_error = error
            self._next_renew = time.monotonic() + min(self._ttl / 10,
                                                      _RETRY_MAX)
            self._unlocked(self._on_trouble, cur, error)

    def valid(self):
        """Whether the lease may still be trusted: not lost, and its
        deadline not passed. Act on the session only while this says
        True, in pieces of work shorter than the margin."""
        with self._cond:
            return not self._lost and time.monotonic() < self._deadline

    def deadline(self):
        """The local deadline, in time.monotonic() seconds."""
        with self._cond:
            return self._deadline

    @property
    def lease(self):
        """The lease as last granted (its token is what a fence needs)."""
        with self._cond:
            return self._lease

    @property
    def lost(self):
        with self._cond:
            return self._lost

    def stop(self):
        """Stops renewing and releases the lease unless it was lost.
        Raises what the release raises. Not from a callback; idempotent."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        if not self._lost:
            self._client.release(self._lease)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _raise_in(thread_id, exc_type):
    """Has thread_id raise exc_type at its next Python instruction (or
    clears a pending one, with None). Returns how many threads it set."""
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id),
        ctypes.py_object(exc_type) if exc_type is not None else None)


class Hold:
    """Client.hold(): a context manager holding a lease while its block
    runs, giving the Keeper. When the lease is lost, cancel() is called
    (on a keeper thread, no later than the deadline) if given; otherwise
    LeaseLost is raised in the thread that entered the block, at its next
    Python instruction (a call blocked in C, such as time.sleep or a
    socket read, sees it when it returns: give cancel for those). Leaving
    the block stops the keeper and releases the lease; if it was lost
    meanwhile and the block raised nothing else, LeaseLost is raised
    there."""

    def __init__(self, client, session_id, owner, cancel, options):
        self._args = (client, session_id, owner)
        self._cancel = cancel
        self._options = options
        self._armed = threading.Lock()  # held while an exception may go
        self._thread = None
        self._cause = None
        self.keeper = None

    def __enter__(self):
        self._thread = threading.get_ident()
        self.keeper = Keeper(*self._args, on_lost=self._lost,
                             **self._options)
        return self.keeper

    def _lost(self, lease, error):
        self._cause = error
        if self._cancel is not None:
            self._cancel()
            return
        with self._armed:
            if self._thread is not None:
                _raise_in(self._thread, _LostHere)

    def _disarm(self):
        """No LeaseLost for the block's thread from now on; one pending is
        cleared."""
        with self._armed:
            self._thread, thread = None, self._thread
        if thread is not None:
            _raise_in(thread, None)

    def __exit__(self, exc_type, exc, tb):
        try:
            self._disarm()
        except _LostHere:
            self._disarm()  # it came just now: the one there ever is
        try:
            self.keeper.stop()
        except errors.LeaseError:
            if exc_type is None:
                raise  # else the block's own exception says more
        lost = self._cause is not None  # the keeper's threads are done
        if exc_type is _LostHere or (exc_type is None and lost):
            raise errors.LeaseLost(self._args[1], self._cause) from None
        return False


class _LostHere(errors.LeaseLost):
    """What the keeper raises in the block's thread: a class (the C API
    takes one, not an instance), turned into a LeaseLost with its cause
    when the block is left."""

    def __init__(self, *args):
        Exception.__init__(self, "lease lost")
        self.session_id = None
        self.cause = None
