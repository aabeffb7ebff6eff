"""The README's run command (tools/run.sh) builds and starts a working
leased; extra arguments reach the daemon."""
import os
import re
import signal
import subprocess
import tempfile
import time

import grpc

import harness


def test_run_command_starts_a_working_daemon():
    with tempfile.TemporaryDirectory(prefix="leased-run-") as tmp:
        log = open(os.path.join(tmp, "log"), "w+")
        p = subprocess.Popen(
            [os.path.join(harness.ROOT, "tools", "run.sh"), "--listen",
             "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data")],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            addr = None
            while addr is None and time.monotonic() < deadline:
                assert p.poll() is None, open(log.name).read()
                m = re.search(r"msg=listening addr=(\S+)", open(log.name).read())
                addr = m.group(1) if m else None
                time.sleep(0.1)
            assert addr, open(log.name).read()
            c = harness.Client(grpc.insecure_channel(addr))
            assert c.acquire("s", "alice").token == 1
            assert os.path.exists(os.path.join(tmp, "data", "leased.db"))
        finally:
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=30)
        assert rc == 0, open(log.name).read()


harness.main(globals())
