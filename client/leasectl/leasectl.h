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
    struct lease_grpc_options opts; /* what client was opened with */
};

/* The exit code of a liblease error. */
int ctl_exit_of(int lease_err);

/* Reports a failed call on stderr ("leasectl: WHAT: reason"); returns its
 * exit code. */
int ctl_fail(int lease_err, const char *what);

/* Prints a lease, as text or JSON. */
void ctl_print_lease(const struct ctl *c, const struct lease *l);

/* An owner id as Mecatl makes them: <hostname>-<pid>-<nonce>. */
void ctl_default_owner(char *out, size_t len);

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
