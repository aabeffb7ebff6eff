"""leased's Python client: Client (acquire, renew, release, get, with
failover, TLS and a bearer token), Keeper (a lease kept under the deadline
rule) and Client.hold() (a block of work that stops when the lease is
lost). See docs/client.md."""
from .client import Client, Lease, LeaseInfo, default_owner
from .errors import (DeadlineError, DeniedError, HeldError, InvalidError,
                     LeaseError, LeaseLost, UnauthenticatedError,
                     UnavailableError, UnsupportedError)
from .keeper import Hold, Keeper, margin_min

__all__ = [
    "Client", "Lease", "LeaseInfo", "default_owner", "Keeper", "Hold",
    "margin_min", "LeaseError", "HeldError", "UnsupportedError",
    "UnavailableError", "InvalidError", "DeadlineError", "DeniedError",
    "UnauthenticatedError", "LeaseLost",
]
