/*
 * leasectl's parts: the connection and output every command shares
 * (leasectl.c), and `hold` (hold.c).
 */
#ifndef LEASECTL_H
#define LEASECTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "lease.h"

/* Exit codes (docs/leasectl.1). */
enum {
    EXIT_OK = 0,
    EXIT_FAILED = 1,      /* anything else */
    EXIT_USAGE = 2,
    EXIT_HELD = 3,        /* held by another owner, or ownership lost */
    EXIT_UNAVAILABLE = 4, /* unavailable, or no answer in time */
    EXIT_INVALID = 5,     /* refused as invalid */
    EXIT_NOT_FOUND = 6,   /* get: no lease */
    EXIT_UNSUPPORTED = 7, /* the server does not serve leases */
};

struct ctl {
    struct lease_client *client; /* the lease calls, through liblease */
    struct conn conn;            /* admin and health calls */
    bool json;
    const char *url;
    const char *cmd;                /* the command, for messages */
    struct lease_grpc_options opts; /* what client was opened with */
};

/* The exit code of a liblease error. */
int ctl_exit_of(int lease_err);

/* Reports a failed lease call on stderr, "leasectl: WHAT: reason
 * (STATUS_NAME)"; returns its exit code. */
int ctl_fail(int lease_err, const char *what);

/* Reports bad usage of command cmd (NULL: of leasectl itself) on stderr,
 * "leasectl: CMD: why", then help; returns EXIT_USAGE. */
int ctl_usage(const char *cmd, const char *help, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same for what getopt_long (opterr 0, optstring starting with ":")
 * returned instead of an option of ours: '?' or ':'. */
int ctl_bad_option(const char *cmd, const char *help, int opt, char **argv);

/* Before a command's first call: when nothing listens at the URL (every
 * target refuses, within a second), says so on stderr and returns
 * EXIT_UNAVAILABLE, rather than have liblease wait out its timeout for a
 * daemon to come back; EXIT_OK otherwise. */
int ctl_reach(struct ctl *c);

/* The owner to act as (docs/leasectl.1): flag (--owner) if not NULL,
 * else $LEASE_OWNER if set and not empty, else USER@HOST, made unique to
 * this run with unique (hold's): USER@HOST/PID-NONCE. Returns flag, the
 * environment's string, or buf (len bytes) filled. */
const char *ctl_owner(const char *flag, bool unique, char *buf, size_t len);

/* Prints a lease, as text or JSON. */
void ctl_print_lease(const struct ctl *c, const struct lease *l);

/* Acquire, and with wait_ns > 0 keep trying while the lease is held,
 * until it is free or wait_ns has passed. *sent_ns (may be NULL) gets the
 * monotonic time the last try was sent. */
int ctl_acquire(struct ctl *c, const char *session, const char *owner,
                int64_t wait_ns, struct lease *out, int64_t *sent_ns);

int64_t ctl_mono_ns(void);
int64_t ctl_wall_ns(void);

/* `leasectl hold SESSION [--owner O] [--wait D] [--grace D] [--ttl D] --
 * CMD ARGS…`: argv[0] is "hold". Returns the exit code. */
int ctl_hold(struct ctl *c, int argc, char **argv);

#endif
