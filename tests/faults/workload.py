"""One worker of the fault campaign: a lease owner recording every call.

    workload.py --addr ADDR --owner NAME --ttl SECONDS --seconds N
                --seed N --out FILE [--hot N] [--cold N]

The worker behaves like a server that drives sessions: it acquires one of
a few hot sessions (or now and then a cold one), or waits for a hot one
in leased's line (leased.v1.Leases/Wait, --waits of the time, for up to
two TTLs), renews it while it uses it, and lets it go in one of three
ways: a release, walking away without
one (a holder that died), or losing it (FAILED_PRECONDITION). Now and then
it also sends what a confused or stale client would: a release or renewal
with a token it no longer holds, and a re-acquire of what it holds.

It makes one call at a time and writes one JSON line per call, flushed at
once (see checker.py for the format), from when it opens FILE (the
runner's sign that it is ready) until N seconds have passed or it gets
SIGTERM, which ends it after the call in progress: `inv` and `ret` on CLOCK_MONOTONIC,
`result` ok / fail (a definite refusal) / unknown (anything else: the
call may have taken effect). It checks nothing itself.
"""
import argparse
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
import harness  # noqa: E402  (generates the protobuf modules)

import grpc  # noqa: E402

pb = harness.pb
DEFINITE = {grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.INVALID_ARGUMENT}
# After UNAVAILABLE, a new channel at most this often (seconds). A channel
# of Debian's grpcio 1.51 that kept failing while leased was down takes
# seconds to connect again once it is back, whatever its backoff
# settings: most of a short campaign.
RECONNECT_EVERY = 0.1


def stubs(channel):
    """The lease calls on channel, by op name."""
    svc = harness.SERVICE
    return {
        "acquire": channel.unary_unary(svc + "Acquire",
                                       pb.AcquireRequest.SerializeToString,
                                       pb.LeaseResponse.FromString),
        "renew": channel.unary_unary(svc + "Renew",
                                     pb.RenewRequest.SerializeToString,
                                     pb.LeaseResponse.FromString),
        "release": channel.unary_unary(svc + "Release",
                                       pb.ReleaseRequest.SerializeToString,
                                       pb.ReleaseResponse.FromString),
        "wait": channel.unary_unary(
            harness.LEASES + "Wait",
            harness.leases_pb.WaitRequest.SerializeToString,
            harness.leases_pb.WaitResponse.FromString),
    }


def timed_call(calls, op, session, owner, token, deadline):
    """One call through stubs(): the history record of it (checker.py's
    format) and its gRPC status code."""
    if op == "acquire":
        req = pb.AcquireRequest(session_id=session, owner=owner)
    elif op == "wait":
        req = harness.leases_pb.WaitRequest(session_id=session, owner=owner)
    else:
        lease = pb.Lease(session_id=session, owner=owner, token=token)
        req = (pb.RenewRequest if op == "renew"
               else pb.ReleaseRequest)(lease=lease)
    inv = time.monotonic()
    rtoken = None
    try:
        reply = calls[op](req, timeout=deadline)
        code = grpc.StatusCode.OK
        if op != "release":
            rtoken = reply.lease.token
    except grpc.RpcError as e:
        code = e.code()
    ret = time.monotonic()
    result = ("ok" if code == grpc.StatusCode.OK
              else "fail" if code in DEFINITE else "unknown")
    return {"type": "op", "proc": owner, "op": op, "session": session,
            "owner": owner, "token": token, "inv": inv, "ret": ret,
            "result": result, "code": code.name, "rtoken": rtoken}, code


class Worker:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.ttl = args.ttl
        self.deadline = min(0.5, args.ttl / 2)
        self.channel = None
        self.reconnected = 0.0
        self.connect()
        self.hot = ["hot-%d" % i for i in range(args.hot)]
        self.cold = ["cold-%d" % i for i in range(args.cold)]
        self.held = None   # (session, token, safe deadline)
        self.stale = []    # (session, token) it held once
        self.out = open(args.out, "a", buffering=1)  # ready

    def connect(self):
        if self.channel is not None:
            self.channel.close()
        self.reconnected = time.monotonic()
        self.channel = grpc.insecure_channel(self.args.addr)
        self.calls = stubs(self.channel)

    def call(self, op, session, token=None):
        """One call, recorded; returns (result, reply token)."""
        rec, code = timed_call(self.calls, op, session, self.args.owner,
                               token, 2 * self.ttl if op == "wait"
                               else self.deadline)
        if (code == grpc.StatusCode.UNAVAILABLE and
                rec["ret"] - self.reconnected > RECONNECT_EVERY):
            self.connect()
        self.out.write(json.dumps(rec) + "\n")
        return rec["result"], rec["rtoken"], rec["inv"]

    def pause(self, lo, hi):
        time.sleep(self.ttl * self.rng.uniform(lo, hi))

    def forget(self):
        if self.held is not None:
            self.stale = (self.stale + [self.held[:2]])[-4:]
        self.held = None

    def step_free(self):
        if self.stale and self.rng.random() < self.args.stale:
            # A stale client: what it sends must change nothing.
            session, token = self.rng.choice(self.stale)
            self.call(self.rng.choice(["release", "renew"]), session, token)
            return
        pool = self.hot if self.rng.random() < 0.85 else self.cold
        session = self.rng.choice(pool)
        op = "wait" if pool is self.hot and \
            self.rng.random() < self.args.waits else "acquire"
        result, token, inv = self.call(op, session)
        if result == "ok":
            self.held = (session, token, inv + self.ttl)
        else:
            self.pause(0.0, 0.3)

    def step_held(self):
        session, token, safe_until = self.held
        r = self.rng.random()
        if r < 0.10:
            self.call("release", session, token)
            self.forget()
            self.pause(0.0, 0.2)
            return
        if r < 0.16:  # walks away, as a holder that died would
            self.forget()
            return
        if r < 0.22:  # re-acquires what it holds: keeps the token
            result, got, inv = self.call("acquire", session)
            if result == "ok":
                if got != token:
                    self.forget()
                self.held = (session, got, inv + self.ttl)
            return
        self.pause(0.15, 0.4)  # works, then renews before TTL/2
        result, _, inv = self.call("renew", session, token)
        if result == "ok":
            self.held = (session, token, inv + self.ttl)
        elif result == "fail" or time.monotonic() >= safe_until:
            self.forget()  # lost, or no longer sure to hold it

    def run(self):
        end = time.monotonic() + self.args.seconds
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        while time.monotonic() < end and not stop:
            if self.held is None:
                self.step_free()
            else:
                self.step_held()
        if self.held is not None:
            self.call("release", *self.held[:2])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--ttl", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--hot", type=int, default=2)
    p.add_argument("--cold", type=int, default=20)
    p.add_argument("--stale", type=float, default=0.15,
                   help="how often a free worker sends a stale call")
    p.add_argument("--waits", type=float, default=0.3,
                   help="how often a free worker waits for a hot session")
    Worker(p.parse_args()).run()


if __name__ == "__main__":
    main()
