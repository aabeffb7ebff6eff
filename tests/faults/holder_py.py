#!/usr/bin/python3
"""holder_py: `holder keep` (tests/faults/holder.c) with the Python
package's keeper (client/python) in place of liblease's, so that the
holders' fault campaign (tests/faults/holders) checks the Python holder
the same way: the same flags, the same units file, the same fence (the
file lease_fence_enter keeps: one line of 20 decimal digits, rewritten
in place under flock) and resource log.

    holder_py.py keep --url U --session S[,S2...] --units FILE
                      --fence-dir D --for MS [--retry-ms N]
                      [--timeout-ms N] [--hold-ms LO,HI] [--rest-ms N]
                      [--prefix P] [--no-fence]

The package comes from $LEASED_PYTHON_LIB. With LEASED_FAULTS=
"broken=py_keeper_uncapped" (the campaign's negative control) the
keeper has the deadline rule broken: no watchdog, valid() true until a
renewal comes back refused, and renewals not cut short at the deadline.

Exit: 0, 1 when something else than the lease failed, 2 on bad usage.
"""
import argparse
import fcntl
import json
import os
import random
import sys
import time

sys.path.insert(0, os.environ.get("LEASED_PYTHON_LIB", ""))
import leased  # noqa: E402

UNIT_MS = (5, 20)
TOKEN_DIGITS = 20


class Uncapped(leased.Keeper):
    """The negative control's keeper: no watchdog, and valid() true until
    a renewal comes back refused."""

    def _watchdog(self):
        pass

    def valid(self):
        with self._cond:
            return not self._lost


class UncappedClient:
    """The negative control's client: renewals not cut short at the
    keeper's deadline, only by the client's own timeout."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def renew(self, lease, deadline=None):
        return self._client.renew(lease)


class Refused(Exception):
    pass


def fence_enter(path, token):
    """lease_fence_enter: the open, locked fence file, or Refused when a
    greater token wrote before."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, TOKEN_DIGITS + 2, 0)
        if text and (len(text) != TOKEN_DIGITS + 1 or not
                     text[:TOKEN_DIGITS].isdigit()):
            raise OSError("%s: not a fence file" % path)
        high = int(text[:TOKEN_DIGITS]) if text else 0
        if token < high:
            raise Refused()
        if token > high:
            os.pwrite(fd, b"%020d\n" % token, 0)
            os.fdatasync(fd)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_resource(fence_dir, session, owner, token):
    line = "%d %s %d %d\n" % (token, owner, os.getpid(), time.time_ns())
    fd = os.open(os.path.join(fence_dir, "resource-%s.log" % session),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def unit(o, units_fd, session, owner, token):
    """One unit of work, recorded; True if its write was accepted."""
    t0 = time.time_ns()
    time.sleep(random.randint(*UNIT_MS) / 1000)  # the work
    accepted = True
    if o.no_fence:
        write_resource(o.fence_dir, session, owner, token)
    else:
        try:
            fd = fence_enter(os.path.join(o.fence_dir, "fence-" + session),
                             token)
        except Refused:
            accepted = False
        else:
            try:
                write_resource(o.fence_dir, session, owner, token)
            finally:
                os.close(fd)  # lets the lock go
    t1 = time.time_ns()
    os.write(units_fd, (json.dumps({
        "kind": "unit", "session": session, "owner": owner, "token": token,
        "pid": os.getpid(), "start": t0, "end": t1,
        "write": "accepted" if accepted else "refused"}) + "\n").encode())
    return accepted


def keep(o):
    broken = os.environ.get("LEASED_FAULTS") == "broken=py_keeper_uncapped"
    keeper = Uncapped if broken else leased.Keeper
    client = leased.Client(o.url, timeout=o.timeout_ms / 1000)
    units_fd = os.open(o.units, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    hold_lo, hold_hi = (int(x) for x in o.hold_ms.split(","))
    sessions = o.session.split(",")
    end = time.monotonic() + o.for_ms / 1000
    attempts = held = lost = units = 0
    while time.monotonic() < end:
        session = random.choice(sessions)
        owner = "%s-%d-%d" % (o.prefix, os.getpid(), attempts)
        attempts += 1
        try:
            k = keeper(UncappedClient(client) if broken else client,
                       session, owner)
        except (leased.HeldError, leased.UnavailableError,
                leased.DeadlineError):
            time.sleep(o.retry_ms / 1000)
            continue
        held += 1
        until = min(end, time.monotonic() + random.randint(hold_lo, hold_hi)
                    / 1000)
        while time.monotonic() < until and k.valid():
            if not unit(o, units_fd, session, owner, k.lease.token):
                break
            units += 1
        if not k.valid():
            lost += 1
        try:
            k.stop()
        except leased.LeaseError:
            pass  # the release may fail as calls do; the lease runs out
        time.sleep(o.rest_ms / 1000)
    print("holder_py: keep: %d attempts, %d held, %d lost, %d units" %
          (attempts, held, lost, units), file=sys.stderr)
    client.close()
    return 0


def main():
    p = argparse.ArgumentParser(prog="holder_py.py")
    p.add_argument("command", choices=["keep"])
    p.add_argument("--url", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--units", required=True)
    p.add_argument("--fence-dir", required=True)
    p.add_argument("--for", dest="for_ms", type=int, required=True)
    p.add_argument("--retry-ms", type=int, default=20)
    p.add_argument("--timeout-ms", type=int, default=1000)
    p.add_argument("--hold-ms", default="500,3000")
    p.add_argument("--rest-ms", type=int, default=0)
    p.add_argument("--prefix", default="pykeep")
    p.add_argument("--no-fence", action="store_true")
    o = p.parse_args()
    try:
        return keep(o)
    except OSError as e:
        print("holder_py: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
