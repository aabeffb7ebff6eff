"""The messages of the three services leased's client calls, generated from
proto/ by protoc when the package is built (setup.py), never kept in the
source tree."""
try:
    from ._gen.leased.admin.v1 import admin_pb2 as admin_pb
    from ._gen.leased.v1 import leases_pb2 as leases_pb
    from ._gen.mecatl.driver.v1 import session_lease_pb2 as lease_pb
except ImportError as e:  # pragma: no cover - a source tree, not a build
    raise ImportError(
        "leased's generated messages are missing: install the package "
        "(pip install ./client/python) or use the build tree's copy "
        "(build/client/python/lib); see docs/client.md") from e

__all__ = ["admin_pb", "lease_pb", "leases_pb"]
