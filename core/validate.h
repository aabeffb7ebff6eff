/*
 * The rules for strings on the wire (docs/protocol.md, "Status codes"): 1..max
 * bytes of valid UTF-8 with no NUL. protobuf-c checks none of this.
 */
#ifndef LEASED_VALIDATE_H
#define LEASED_VALIDATE_H

#include <stddef.h>

/* Returns NULL when p[0..len) is acceptable, or a reason ("empty", "longer
 * than the limit of MAX bytes", "not valid UTF-8", "contains a NUL byte"):
 * a constant, or for the length the calling thread's own text, valid
 * until its next call. */
const char *validate_string(const unsigned char *p, size_t len, size_t max);

#endif
