"""A negative control of the Go package's tests: runs one of them against
a deliberately broken copy of client/go, and passes only if it fails.

    go_mutant.py TEST FILE OLD NEW [FILE OLD NEW ...]

Each OLD must occur exactly once in client/go/FILE (else the mutant is
stale: this fails) and is replaced with NEW in the copy, which
go_test.sh compiles (GO_SRC) and runs."""
import os
import shutil
import subprocess
import sys
import tempfile

from mutant_edit import edit

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "client", "go")


def main():
    test, edits = sys.argv[1], sys.argv[2:]
    if not edits or len(edits) % 3:
        sys.exit("usage: go_mutant.py TEST FILE OLD NEW [FILE OLD NEW ...]")
    with tempfile.TemporaryDirectory(prefix="leased-go-mutant-") as tmp:
        copy = os.path.join(tmp, "lease")
        shutil.copytree(SRC, copy)
        for name, old, new in zip(edits[::3], edits[1::3], edits[2::3]):
            edit(os.path.join(copy, name), old, new)
        run = subprocess.run(
            ["sh", os.path.join(HERE, "go_test.sh"), test],
            env=dict(os.environ, GO_SRC=copy), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
    print(run.stdout[-3000:])
    if run.returncode == 0:
        sys.exit("NOT CAUGHT: %s passed against the mutant" % test)
    if "--- FAIL: %s " % test not in run.stdout:
        sys.exit("%s did not run against the mutant (it does not "
                 "compile?): not a catch" % test)
    print("caught: %s failed against the mutant" % test)


main()
