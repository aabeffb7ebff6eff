"""leased's Python client: Client (acquire, renew, release, get, wait
and watch, with failover, TLS and a bearer token), Keeper (a lease kept
under the deadline rule) and Client.hold() (a block of work that stops
when the lease is lost). See docs/client.md."""
from .client import Client, Lease, LeaseInfo, default_owner
from .errors import (DeadlineError, DeniedError, GoneError, HeldError,
                     InvalidError, LeaseError, LeaseLost,
                     UnauthenticatedError, UnavailableError, UnsupportedError)
from .keeper import Hold, Keeper, margin_min
from .watch import EXPIRED, GRANTED, RELEASED, REVOKED, Event, Watch

__all__ = [
    "Client", "Lease", "LeaseInfo", "default_owner", "Keeper", "Hold",
    "margin_min", "LeaseError", "HeldError", "UnsupportedError",
    "UnavailableError", "InvalidError", "DeadlineError", "DeniedError",
    "UnauthenticatedError", "GoneError", "LeaseLost", "Watch", "Event",
    "GRANTED", "RELEASED", "EXPIRED", "REVOKED",
]
