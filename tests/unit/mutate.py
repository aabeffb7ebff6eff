#!/usr/bin/python3
"""Writes a broken copy of a C file, for a negative control.

    mutate.py IN OUT OLD NEW

Replaces OLD with NEW in IN, written to OUT. OLD must occur on exactly
one line of IN, once: otherwise (an edit of IN moved or changed the line)
it fails, so that a mutant can never silently become the original file,
or break something else than the line it names. OUT starts with a line
saying what was changed."""
import sys


def main():
    src, dst, old, new = sys.argv[1:5]
    with open(src, encoding='utf-8') as f:
        lines = f.read().split('\n')
    hits = [i for i, line in enumerate(lines) if old in line]
    if len(hits) != 1 or lines[hits[0]].count(old) != 1:
        sys.exit(f'mutate.py: "{old}" is on {len(hits)} lines of {src}, '
                 'not exactly once on one: update the mutant in '
                 'tests/meson.build')
    i = hits[0]
    lines[i] = lines[i].replace(old, new)
    if old == new:
        sys.exit('mutate.py: the mutant is the original')
    with open(dst, 'w', encoding='utf-8') as f:
        f.write(f'/* MUTANT of {src}, line {i + 1}: "{old}" -> "{new}" */\n'
                f'#line 1 "{src}"\n')
        f.write('\n'.join(lines))


main()
