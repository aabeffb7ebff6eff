"""The errors of leased's Python client: one class per outcome, mapped
from the gRPC status exactly as liblease maps it (client/lease.h)."""
import grpc


class LeaseError(Exception):
    """A call failed. code is the gRPC status (None when no call was
    made), details the server's (or gRPC's) reason."""

    def __init__(self, details, code=None):
        super().__init__("%s (%s)" % (details, code.name) if code else details)
        self.code = code
        self.details = details


class HeldError(LeaseError):
    """Acquire: another owner holds a live lease. Renew: ownership is lost
    (expired and taken over, or released). Stop the work; do not
    release."""


class UnsupportedError(LeaseError):
    """The service does not serve leases (UNIMPLEMENTED): switch leasing
    off; retrying will not help."""


class UnavailableError(LeaseError):
    """A transient failure (storage, overload, shutdown, network): keep a
    lease you hold until its deadline and retry."""


class InvalidError(LeaseError):
    """A bad argument: empty or over-long id or owner, a bad target or
    option. Retrying the same call will not help."""


class DeadlineError(LeaseError):
    """No answer in time: the call may or may not have taken effect.
    Never read it as "not held"."""


class DeniedError(LeaseError):
    """The server's policy does not let this caller use this session,
    owner or call (PERMISSION_DENIED). Nothing changed."""


class UnauthenticatedError(LeaseError):
    """No credentials, or wrong ones (UNAUTHENTICATED). Nothing changed:
    fix the bearer token or the client certificate."""


class GoneError(LeaseError):
    """Client.watch(): the changes after the revision asked for are no
    longer kept (OUT_OF_RANGE: leased keeps its last --watch-history
    changes). Read the leases again and watch from 0."""


class LeaseLost(Exception):
    """Raised by Client.hold() in the thread that holds the lease when
    the lease is lost (see keeper.py). cause is the error that lost it."""

    def __init__(self, session_id, cause):
        super().__init__("lease of %r lost: %s" % (session_id, cause))
        self.session_id = session_id
        self.cause = cause


_BY_CODE = {
    grpc.StatusCode.FAILED_PRECONDITION: HeldError,
    grpc.StatusCode.UNIMPLEMENTED: UnsupportedError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineError,
    grpc.StatusCode.PERMISSION_DENIED: DeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def from_status(code, details):
    """The error for a call that ended with status code (not OK)."""
    return _BY_CODE.get(code, UnavailableError)(details or code.name, code)
