"""README.md's short tour, run exactly as printed: its shell blocks and its
Python and Go programs (the packages installed as the tour says),
against a leased on the tour's own address (127.0.0.1:7443). So that the
address is free whatever else runs here, the daemon and the tour run in
a network namespace of their own (`unshare --net`: pip and go can
download nothing), in a scratch "clone" (proto/, client/python,
client/go and the built leasectl), and the Python program from yet
another directory."""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import time

import harness

TOUR_SCRIPT = r"""
set -euo pipefail
ip link set lo up
"$LEASED_BIN" --data-dir "$TMP/data" 2>"$TMP/leased.log" &
leased=$!
for _ in $(seq 100); do
  grep -q 'msg=listening addr=127.0.0.1:7443' "$TMP/leased.log" && break
  sleep 0.1
done
cd "$TMP/clone"
# (A refusal is part of the tour: its output says how it went.)
(set +e; . "$TMP/shell.sh") >"$TMP/shell.out" 2>&1
. "$TMP/python-setup.sh"
cd "$TMP/elsewhere"
python3 "$TMP/tour.py" >"$TMP/python.out" 2>&1
cd "$TMP/clone"
. "$TMP/go-setup.sh"
cp "$TMP/main.go" build/go/src/tour/main.go
. "$TMP/go-run.sh" >"$TMP/go.out" 2>&1
kill -TERM $leased
wait $leased
"""


def tour_blocks():
    """The fenced blocks of README's "A short tour": (language, text)."""
    readme = open(os.path.join(harness.ROOT, "README.md")).read()
    tour = readme[readme.index("## A short tour"):]
    tour = tour[:tour.index("\n## ", 1)]
    return re.findall(r"^```(\w+)\n(.*?)^```$", tour, re.M | re.S)


def block(blocks, lang, word):
    found = [text for l, text in blocks if l == lang and word in text]
    assert len(found) == 1, "want one %s block with %r in the tour" % (lang, word)
    return found[0]


def test_the_tour_runs_as_printed():
    blocks = tour_blocks()
    with tempfile.TemporaryDirectory(prefix="leased-readme-") as tmp:
        clone = os.path.join(tmp, "clone")
        os.makedirs(os.path.join(clone, "build", "client"))
        os.makedirs(os.path.join(tmp, "elsewhere"))
        shutil.copytree(os.path.join(harness.ROOT, "proto"),
                        os.path.join(clone, "proto"))
        shutil.copytree(os.path.join(harness.ROOT, "client", "go"),
                        os.path.join(clone, "client", "go"))
        shutil.copytree(os.path.join(harness.ROOT, "client", "python"),
                        os.path.join(clone, "client", "python"),
                        ignore=shutil.ignore_patterns(
                            "build", "*.egg-info", "__pycache__"))
        os.symlink(os.environ["LEASECTL_BIN"],
                   os.path.join(clone, "build", "client", "leasectl"))
        for name, text in [
                ("shell.sh", block(blocks, "sh", "leasectl acquire")),
                ("python-setup.sh", block(blocks, "sh", "pip install")),
                ("tour.py", block(blocks, "python", "import leased")),
                ("go-setup.sh", block(blocks, "sh", "GOPATH")),
                ("main.go", block(blocks, "go", "leased/lease")),
                ("go-run.sh", block(blocks, "sh", "go run"))]:
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        env = dict(os.environ, TMP=tmp, LEASED_BIN=harness.leased_bin(),
                   # Debian's python3, with python3-grpcio, as on a user's
                   # machine; no owner from the environment of the tests.
                   PATH="/usr/bin:/bin:/usr/sbin:/sbin:" + os.environ["PATH"])
        # The build's Go cache, which compiled gRPC-Go already (go
        # builds offline either way; a cold cache only takes longer).
        if os.environ.get("LEASED_GO_CACHE"):
            env["GOCACHE"] = os.environ["LEASED_GO_CACHE"]
        env.pop("LEASE_OWNER", None)
        env.pop("PYTHONPATH", None)

        def output(name):
            path = os.path.join(tmp, name)
            return open(path).read() if os.path.exists(path) else ""

        def logs():
            return "\n".join("--- %s\n%s" % (n, output(n)) for n in
                             ("leased.log", "shell.out", "python.out",
                              "go.out"))
        started = time.time()
        try:
            run = subprocess.run(["unshare", "--net", "bash", "-c",
                                  TOUR_SCRIPT], env=env, timeout=90,
                                 stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            raise AssertionError("the tour took over 90 s\n" + logs())
        logs = logs()
        assert run.returncode == 0, run.stderr + logs

        shell = output("shell.out")
        user = "%s@%s" % (subprocess.run(["id", "-un"], capture_output=True,
                                         text=True).stdout.strip(),
                          os.uname().nodename)
        # acquire, again, renew: the default owner, token 1 each time.
        assert len(re.findall(r"^job-1  owner %s  token 1 " % re.escape(user),
                              shell, re.M)) == 3, logs
        assert re.search(r"^leasectl: acquire: .*\(FAILED_PRECONDITION\)$",
                         shell, re.M), logs
        assert re.search(r"^job-1  owner web-2  token 2 ", shell, re.M), logs
        # hold: the command ran with the lease and its deadline (within the
        # 30 s TTL of now, in Unix seconds).
        m = re.search(r"^token 1 until (\d+)$", shell, re.M)
        assert m and started < int(m.group(1)) < time.time() + 30, logs

        # The Python program's tokens: whatever the floor is by then
        # (leased forgets long-released sessions, raising it), web-2's
        # is greater than web-1's.
        m = re.fullmatch(r"web-1 holds s1 with token (\d+)\n"
                         r"web-2 is refused: FAILED_PRECONDITION\n"
                         r"after the release web-2 holds s1 with token (\d+)\n"
                         r"holding s2 with token \d+\n",
                         output("python.out"))
        assert m and int(m.group(2)) > int(m.group(1)) >= 1, logs
        m = re.fullmatch(r"web-1 holds g1 with token (\d+)\n"
                         r"web-2 is refused: lease: held by another owner "
                         r"\(FAILED_PRECONDITION\)\n"
                         r"keeping g2 with token (\d+) valid: true\n",
                         output("go.out"))
        assert m and int(m.group(1)) >= 1 and int(m.group(2)) >= 1, logs
        # The package, its generated messages with it, is in the build
        # directory's venv, nowhere else.
        assert os.listdir(os.path.join(tmp, "elsewhere")) == [], logs
        assert glob.glob(os.path.join(
            clone, "build", "venv", "lib", "python3*", "site-packages",
            "leased", "_gen", "mecatl", "driver", "v1",
            "session_lease_pb2.py")), logs


harness.main(globals())
