/*
 * The audit trail: a log line (level info) for every change of holder
 * and every refused call, naming who did it (identity.h):
 *
 *   msg=takeover identity="app-a" session="a/42" owner="host-1" token=7
 *   msg=release identity="app-a" session="a/42" owner="host-1" token=7
 *   msg=revoke identity="ops" session="a/42" owner="host-1" token=7
 *   msg=denied identity="app-b" method=Acquire session="a/42"
 *       owner="host-9" token=0 reason="..."
 *   msg=unauthenticated peer=ipv4:10.0.0.9:51234 not_logged=0
 *
 * A takeover, release or revoke is logged only once it is stored, just
 * before its OK goes out; a revoke names the lease it ended (owner and
 * token) and who ended it (identity). Identities, sessions, owners and
 * reasons are quoted as log_quotable() makes them: no byte of theirs can
 * end the field or the line. The token is the lease's fencing token; bearer tokens
 * and other secrets never appear. Refusals are logged AUDIT_REFUSALS_PER_S
 * a second at most (struct log_limit): a flood of them must not flood the
 * log; `not_logged` counts the ones left out since the last line.
 */
#ifndef LEASED_AUDIT_H
#define LEASED_AUDIT_H

#include <stdint.h>

#include "log.h"
#include "request.h"

#define AUDIT_REFUSALS_PER_S 20

struct grpc_call;

/* On the loop, before the answer goes out: logs req's change of holder,
 * if it had one and its answer is OK. */
void audit_change(const struct request *req);

/* A call refused with PERMISSION_DENIED: req decoded, req->reason says
 * why. limit's burst is set here. */
void audit_denied(struct log_limit *limit, const struct request *req);

/* call was refused with UNAUTHENTICATED. */
void audit_unauthenticated(struct log_limit *limit, struct grpc_call *call);

#endif
