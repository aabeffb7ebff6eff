"""The test-case runner of the Python test files (no dependencies).

A test file defines functions named `test_*` and ends with
`cases.main(globals())`: `python3 FILE` runs every case, `python3 FILE
CASE` runs one, `python3 FILE --list` lists them (meson registers one test
per case from that list). A case passes when it returns; any exception
fails it. `after(name)`, if given, runs after each case and returns a list
of further reasons to fail it (texts), e.g. what a daemon it started left
behind. `strip` drops the `test_` prefix from the listed names.
"""
import sys
import time
import traceback


def main(namespace, after=None, strip=False):
    cases = {(k[5:] if strip else k): v for k, v in namespace.items()
             if k.startswith("test_") and callable(v)}
    if sys.argv[1:] == ["--list"]:
        print("\n".join(sorted(cases)))
        return
    names = sys.argv[1:] or sorted(cases)
    failed = 0
    for name in names:
        if name not in cases:
            print("no such case: %s" % name)
            failed += 1
            continue
        start = time.monotonic()
        error = None
        try:
            cases[name]()
        except Exception:
            error = traceback.format_exc()
        reports = after(name) if after is not None else []
        if error is None and not reports:
            print("ok   %s (%.2fs)" % (name, time.monotonic() - start))
            continue
        failed += 1
        print("FAIL %s" % name)
        if error is not None:
            print(error, end="", file=sys.stderr)
        for r in reports:
            print(r, file=sys.stderr)
    sys.exit(1 if failed else 0)
