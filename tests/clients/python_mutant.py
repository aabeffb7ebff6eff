"""A negative control of the Python package's tests: runs one case of
test_python_client.py against a deliberately broken copy of the package,
and passes only if the case fails.

    python_mutant.py LIB FILE OLD NEW CASE

LIB is the built package's directory (its leased/ inside); OLD, which
must occur exactly once in leased/FILE (else the mutant is stale: this
fails), is replaced with NEW in the copy."""
import os
import shutil
import subprocess
import sys
import tempfile

from mutant_edit import edit

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    lib, name, old, new, case = sys.argv[1:6]
    with tempfile.TemporaryDirectory(prefix="leased-py-mutant-") as tmp:
        copy = os.path.join(tmp, "lib")
        shutil.copytree(lib, copy)
        edit(os.path.join(copy, "leased", name), old, new)
        run = subprocess.run(
            [sys.executable, os.path.join(HERE, "test_python_client.py"),
             case], env=dict(os.environ, LEASED_PYTHON_LIB=copy),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout[-3000:])
    if run.returncode == 0:
        sys.exit("NOT CAUGHT: %s with %r -> %r passed %s" %
                 (name, old, new, case))
    if "FAIL %s" % case not in run.stdout:
        sys.exit("%s did not run against the mutant: not a catch" % case)
    print("caught: %s failed against the mutant" % case)


main()
