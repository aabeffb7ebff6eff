/* Helpers shared by liblease's backends; not installed. */
#ifndef LEASE_CLIENT_H
#define LEASE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "lease.h"

/* Sets the calling thread's lease_errmsg() and returns err. */
int client_fail(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Fills *out (strings copied and NUL-terminated). Returns LEASE_OK, or
 * LEASE_EUNAVAILABLE when a string is over its limit (a broken server). */
int client_fill(struct lease *out, const char *session_id, size_t session_len,
                const char *owner, size_t owner_len, uint64_t token,
                int64_t expiry_ns, int64_t ttl_ns);

#endif
