"""The fault campaign's watcher: follows every change leased tells
(leased.v1.Leases/Watch of every session) through its deaths, as a
client that resumes would, and records each event.

    watcher.py --addr ADDR --out FILE

Its first line is where it started ({"type": "start", "revision": R}),
written once leased answered (the runner's sign that it is ready); then
one line per event ({"type": "event", "revision", "kind", "session",
"owner", "token"}), flushed at once. Whenever its stream ends (leased
died, drained, or anything else) it asks again, on a new channel, for
the changes after the last revision it got, until SIGTERM. It checks
nothing itself: watch_checker.py does.
"""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
import harness  # noqa: E402  (generates the protobuf modules)

import grpc  # noqa: E402

import watch_checker  # noqa: E402  (the kinds' names it reads)

pb = harness.leases_pb
RETRY = 0.05  # between a stream's end and the next one (seconds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--addr", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    out = None
    after = 0
    while not stop:
        channel = grpc.insecure_channel(args.addr)
        watch = channel.unary_stream(harness.LEASES + "Watch",
                                     pb.WatchRequest.SerializeToString,
                                     pb.WatchResponse.FromString)
        try:
            for m in watch(pb.WatchRequest(prefix="", after_revision=after)):
                if out is None:
                    out = open(args.out, "a", buffering=1)
                    out.write(json.dumps({"type": "start",
                                          "revision": m.revision}) + "\n")
                for e in m.events:
                    out.write(json.dumps({
                        "type": "event", "revision": e.revision,
                        "kind": watch_checker.KINDS.get(e.kind, str(e.kind)),
                        "session": e.lease.session_id,
                        "owner": e.lease.owner,
                        "token": e.lease.token}) + "\n")
                if m.compact_revision == 0:
                    after = m.revision
                if stop:
                    break
        except grpc.RpcError:
            pass
        channel.close()
        time.sleep(RETRY)


if __name__ == "__main__":
    main()
