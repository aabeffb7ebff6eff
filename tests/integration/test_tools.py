"""The README's run command (tools/run.sh) builds leased and leasectl and
starts a working leased; extra arguments reach the daemon; a build that
breaks says why."""
import os
import re
import shutil
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
            assert "run: leasectl is build/client/leasectl" in \
                open(log.name).read()
            assert os.access(os.path.join(harness.ROOT, "build", "client",
                                          "leasectl"), os.X_OK)
            c = harness.Client(grpc.insecure_channel(addr))
            assert c.acquire("s", "alice").token == 1
            assert os.path.exists(os.path.join(tmp, "data", "leased.db"))
        finally:
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=30)
        assert rc == 0, open(log.name).read()


def test_run_command_shows_compile_errors():
    """A copy of the sources with one file broken: tools/run.sh fails and
    shows the compiler's error (its output once went to /dev/null)."""
    with tempfile.TemporaryDirectory(prefix="leased-run-") as tmp:
        files = subprocess.run(["git", "-C", harness.ROOT, "ls-files", "-co",
                                "--exclude-standard"], check=True,
                               capture_output=True, text=True).stdout.split()
        for f in files:
            if f.startswith("tests/") or not os.path.isfile(
                    os.path.join(harness.ROOT, f)):
                continue
            os.makedirs(os.path.join(tmp, os.path.dirname(f)), exist_ok=True)
            shutil.copy2(os.path.join(harness.ROOT, f), os.path.join(tmp, f))
        with open(os.path.join(tmp, "daemon", "engine", "duration.c"), "a") as f:
            f.write("#error broken on purpose\n")
        run = subprocess.run([os.path.join(tmp, "tools", "run.sh")],
                             capture_output=True, text=True, timeout=300)
        out = run.stdout + run.stderr
        assert run.returncode != 0, out
        assert re.search(r"duration\.c:\d+:\d+: error: #error broken on purpose",
                         out), out
        assert not os.path.exists(os.path.join(tmp, "build", "daemon", "leased"))


harness.main(globals())
