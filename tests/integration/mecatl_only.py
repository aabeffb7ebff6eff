"""A server of Mecatl's contract alone, in front of a real leased: it
passes the calls of mecatl.driver.v1.SessionLeaseService through to
leased, bytes and answers as they are, and answers UNIMPLEMENTED to every
other call (leased's own services, such as leased.v1.Leases/Wait), as a
server that knows only Mecatl's contract does. The clients' fallbacks
(asking again where Wait is not served) are tested against it.

As a module: `with MecatlOnly(target) as addr: ...`. As a script (for the
Go tests): `mecatl_only.py TARGET` prints "listening ADDR" and serves
until its standard input closes.
"""
import sys
from concurrent import futures

import grpc

MECATL = "/mecatl.driver.v1.SessionLeaseService/"


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, channel):
        self.channel = channel

    def service(self, details):
        if not details.method.startswith(MECATL):
            return None  # UNIMPLEMENTED
        call = self.channel.unary_unary(details.method)

        def forward(request, context):
            try:
                reply, answer = call.with_call(
                    request, timeout=context.time_remaining(),
                    metadata=context.invocation_metadata())
            except grpc.RpcError as e:
                context.abort(e.code(), e.details())
            # leased's TTL of a grant (leased-ttl-ms) goes with it.
            context.send_initial_metadata(answer.initial_metadata() or ())
            return reply
        return grpc.unary_unary_rpc_method_handler(forward)


class MecatlOnly:
    """The front, on a loopback port of its own; entered, its address."""

    def __init__(self, target):
        self.target = target

    def __enter__(self):
        self.channel = grpc.insecure_channel(self.target)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((_Forward(self.channel),))
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        return "127.0.0.1:%d" % port

    def __exit__(self, *exc):
        self.server.stop(None)
        self.channel.close()


if __name__ == "__main__":
    with MecatlOnly(sys.argv[1]) as addr:
        print("listening", addr, flush=True)
        sys.stdin.read()
