"""docs/operations.md's operator's tour, run exactly as printed, against a
leased on the tour's own address (127.0.0.1:7443) in a network namespace
of its own (`unshare --net`, as test_readme.py runs README's tour), from
a scratch "clone" holding the built leasectl."""
import os
import re
import subprocess
import tempfile

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
bash -euo pipefail "$TMP/tour.sh" >"$TMP/tour.out" 2>&1
kill -TERM $leased
wait $leased
"""


def tour_block():
    """The one sh block of "An operator's tour"."""
    text = open(os.path.join(harness.ROOT, "docs", "operations.md")).read()
    tour = text[text.index("## An operator's tour"):]
    tour = tour[:tour.index("\n## ", 1)]
    blocks = re.findall(r"^```sh\n(.*?)^```$", tour, re.M | re.S)
    assert len(blocks) == 1, blocks
    return blocks[0]


def test_the_operators_tour_runs_as_printed():
    with tempfile.TemporaryDirectory(prefix="leased-tour-") as tmp:
        clone = os.path.join(tmp, "clone")
        os.makedirs(os.path.join(clone, "build", "client"))
        os.symlink(os.environ["LEASECTL_BIN"],
                   os.path.join(clone, "build", "client", "leasectl"))
        with open(os.path.join(tmp, "tour.sh"), "w") as f:
            f.write(tour_block())
        env = dict(os.environ, TMP=tmp, LEASED_BIN=harness.leased_bin())
        for name in ("LEASE_OWNER", "LEASED_URL", "LEASED_TOKEN_FILE"):
            env.pop(name, None)

        def output(name):
            path = os.path.join(tmp, name)
            return open(path).read() if os.path.exists(path) else ""

        run = subprocess.run(["unshare", "--net", "bash", "-c", TOUR_SCRIPT],
                             env=env, timeout=90, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True)
        logs = "".join("--- %s\n%s" % (n, output(n))
                       for n in ("leased.log", "tour.out"))
        assert run.returncode == 0, run.stderr + logs
        out = output("tour.out")
        lines = out.splitlines()
        assert lines[0] == "SERVING", logs
        assert re.search(r"^token high-water +0$", out, re.M), logs
        assert re.search(r"^token high-water +2$", out, re.M), logs
        for session, owner, token in [("orders/42", "web-1", 1),
                                      ("orders/43", "web-1", 1),
                                      ("orders/42", "web-2", 2)]:
            assert re.search(r"^%s  owner %s  token %d  expires " %
                             (session, owner, token), out, re.M), logs
        assert "revoked orders/42: owner web-1, token 1" in lines, logs
        # list: both, in order; get: web-1's, live.
        assert len(re.findall(r"^orders/4[23]  owner web-1  token 1 ", out,
                              re.M)) == 5, logs
        m = re.search(r"^saved leased-backup.db: (\d+) bytes$", out, re.M)
        backup = os.path.join(clone, "leased-backup.db")
        assert m and os.path.getsize(backup) == int(m.group(1)), logs
        with open(backup, "rb") as f:
            assert f.read(16) == b"SQLite format 3\0", logs
        audit = output("leased.log")
        assert 'msg=revoke identity="" session="orders/42" owner="web-1" ' \
               'token=1' in audit, logs


harness.main(globals())
