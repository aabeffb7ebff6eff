/* Starting and stopping the real leased binary ($LEASED_BIN) from C
 * tests: a temporary data directory, an ephemeral loopback port. */
#ifndef LEASED_DAEMON_PROC_H
#define LEASED_DAEMON_PROC_H

#include <sys/types.h>

struct daemon_proc {
    pid_t pid;
    char addr[128]; /* HOST:PORT from the `listening` log line */
    char dir[64];   /* temporary; the data directory is dir/data */
    char log[96];   /* dir/leased.log: its stderr */
};

/* Starts leased with --ttl ttl (and the extra arguments, NULL-ended) and
 * waits until it listens. Returns 0, or -1 with a message on stderr.
 * With $LEASED_TEST_POSTGRES set (a conninfo; tests/integration/
 * with_postgres.py sets it), leased keeps its leases there instead. */
int daemon_start(struct daemon_proc *d, const char *ttl, ...);

/* SIGTERM; waits up to 20 s. Returns the exit status (0 = clean), or -1
 * (killed, did not stop, or a sanitizer report in its log). Removes the
 * temporary directory. A sanitizer report in the log (printed to stderr
 * here) also makes the test process exit 1 at its end, even if the test
 * ignores this result: call it after a kill -9 too. */
int daemon_stop(struct daemon_proc *d);

#endif
