"""The edit both negative-control scripts make (python_mutant.py,
go_mutant.py): one piece of a file of a package's copy replaced."""
import sys


def edit(path, old, new):
    """Replaces old, which must occur exactly once in the file at path,
    with new; exits saying so when it does not (the mutant is stale: the
    file changed), or when the two are the same."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.count(old) != 1 or old == new:
        sys.exit("stale mutant: %r occurs %d times in %s" %
                 (old, text.count(old), path))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))
