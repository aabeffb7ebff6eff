"""The README's run command (tools/run.sh) builds leased and leasectl and
starts a working leased; extra arguments reach the daemon; a build that
breaks says why."""
import os
import re
import shutil
import signal
import socket
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
        with open(os.path.join(tmp, "core", "duration.c"), "a") as f:
            f.write("#error broken on purpose\n")
        run = subprocess.run([os.path.join(tmp, "tools", "run.sh")],
                             capture_output=True, text=True, timeout=300)
        out = run.stdout + run.stderr
        assert run.returncode != 0, out
        assert re.search(r"duration\.c:\d+:\d+: error: #error broken on purpose",
                         out), out
        assert not os.path.exists(os.path.join(tmp, "build", "daemon", "leased"))


def test_npm_out_of_reach_fails_only_the_node_cases_saying_why():
    """tests/run.sh installs the Node client's packages with
    tests/interop/node/install.sh before it builds: with the registry out
    of reach that says why in one line, soon, and each Node case fails
    with the reason; no build target runs npm."""
    node_dir = os.path.join(harness.ROOT, "tests", "interop", "node")
    with tempfile.TemporaryDirectory(prefix="leased-npm-") as tmp:
        for f in ("package.json", "package-lock.json", "conformance.js",
                  "install.sh"):
            shutil.copy2(os.path.join(node_dir, f), tmp)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        registry = "http://127.0.0.1:%d/" % s.getsockname()[1]
        s.close()  # nothing listens there
        start = time.monotonic()
        run = subprocess.run([os.path.join(tmp, "install.sh")],
                             env=dict(os.environ, npm_config_registry=registry),
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 1, run
        assert re.fullmatch(r"npm ci failed: .*ECONNREFUSED.* \(registry %s\)\n"
                            % re.escape(registry), run.stdout), run
        assert time.monotonic() - start < 60
        assert not os.path.exists(os.path.join(tmp, "node_modules"))
        listed = subprocess.run(["node", "conformance.js", "--list"], cwd=tmp,
                                capture_output=True, text=True, timeout=30)
        cases = listed.stdout.split()
        assert listed.returncode == 0 and len(cases) == 12, listed
        case = subprocess.run(["node", "conformance.js", cases[0]], cwd=tmp,
                              capture_output=True, text=True, timeout=30)
        assert case.returncode == 1 and "not installed" in case.stdout and \
            "install.sh" in case.stdout, case
    build = os.path.dirname(os.path.dirname(harness.leased_bin()))
    targets = subprocess.run(["meson", "introspect", "--targets", build],
                             capture_output=True, text=True, check=True).stdout
    assert "npm" not in targets and "node_modules" not in targets


harness.main(globals())
