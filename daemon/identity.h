/*
 * Who a caller is: the name of the bearer token it presented (tokens.h),
 * or else its verified client certificate's identity: the first URI
 * subject alternative name, else the first DNS one, else the common name.
 * A caller with neither has the empty identity. The identity goes with
 * each request (struct request) to the policy (policy.h) and the audit
 * lines (audit.h).
 */
#ifndef LEASED_IDENTITY_H
#define LEASED_IDENTITY_H

#include <stddef.h>

struct grpc_call;

#define IDENTITY_MAX 256 /* longer ones are cut */

/* The certificate identity of call's connection into out (len bytes,
 * NUL-terminated), or "" when it presented no certificate. Control
 * characters and '"' become spaces, so that it can be logged inside
 * quotes; one longer than len - 1 bytes is cut and ends in " ...". A
 * policy identity holds no space (policy.h), so an identity changed
 * either way can match no rule of its own, only the `*` rule. */
void identity_of_call(struct grpc_call *call, char *out, size_t len);

#endif
