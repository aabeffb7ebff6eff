"""Runs a command with a PostgreSQL server of its own (pg.py) and an empty
database on it, whose libpq conninfo is in $LEASED_TEST_POSTGRES; the
server is stopped when the command ends. Exits with the command's status.

    with_postgres.py COMMAND [ARG...]

The C tests use it: tests/daemon_proc.c starts leased with --postgres
$LEASED_TEST_POSTGRES when it is set.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: with_postgres.py COMMAND [ARG...]")
    server = pg.Postgres()
    server.start()
    server.psql("CREATE DATABASE leases")
    env = dict(os.environ, LEASED_TEST_POSTGRES=server.conninfo(
        dbname="leases"))
    try:
        rc = subprocess.call(sys.argv[1:], env=env)
    finally:
        server.stop()
    sys.exit(rc)


if __name__ == "__main__":
    main()
