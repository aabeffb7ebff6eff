/*
 * The TTL leased says with each grant, beside the reply of Mecatl's
 * protocol (which has no TTL): the initial metadata TTLHEADER_KEY on every
 * OK Acquire and Renew, the lifetime of the granted lease in whole
 * milliseconds (rounded down), counted from when leased decided it. That
 * is later than the client sent the call, so a client that trusts its
 * lease until its own send time plus this TTL (less a margin for the
 * rates of the two clocks) never trusts it past leased's expiry, whatever
 * the two wall clocks say. A client that ignores the metadata still works.
 * Shared by the daemon (which sends it) and liblease (which reads it).
 */
#ifndef LEASED_TTLHEADER_H
#define LEASED_TTLHEADER_H

#include <stddef.h>
#include <stdint.h>

#define TTLHEADER_KEY "leased-ttl-ms"
#define TTLHEADER_LEN 24 /* a buffer for any value, with its NUL */

/* Writes ttl_ns (> 0) as a value into buf (TTLHEADER_LEN bytes): whole
 * milliseconds, rounded down, at least 1. Returns its length. */
size_t ttlheader_format(int64_t ttl_ns, char *buf);

/* Reads a value of len bytes (not NUL-terminated): 1 to 12 decimal
 * digits, not 0. Returns 0 with *ttl_ns, or -1 when it is not one. */
int ttlheader_parse(const char *value, size_t len, int64_t *ttl_ns);

#endif
